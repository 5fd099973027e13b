"""The key-value backend the state store is written over: etcd's data model, small.

:class:`iadeep.state._store.KVStateStore` holds every rule of :class:`iadeep.state.StateStore`
once; a backend only stores bytes under string keys and answers these calls:

* ``range(key, prefix=)``: the key (or every key under a prefix), by key, and the revision read;
* ``ranges(prefixes)``: every key under each prefix, all at one revision (listings);
* ``txn(compares, success, failure)``: when every compare holds the ``success`` ops run, else
  the ``failure`` ops; atomic, one revision for all of its writes (none when it changes nothing);
* ``watch(prefixes, start_revision)``: the changes under the prefixes, in batches (:class:`WatchBatch`);
* ``grant``, ``keepalive``, ``revoke``: leases; a key put with a lease goes (with a delete event)
  when the lease expires or is revoked;
* ``revision()``, ``healthy()``, ``deadline()``, ``stats()``, ``close()``.

Revisions are etcd's: one counter for the whole store, raised by one for each transaction (or
single write) that changes something; a key's ``create_revision`` is the revision that created
it (0: absent), its ``mod_revision`` the one that last wrote it. Implementations:
:class:`iadeep.state._etcdwire.EtcdBackend` (etcd's v3 JSON gateway) and
:class:`iadeep.state._kvmemory.MemoryBackend` (in process, one lock).

Errors (both backends): :class:`~iadeep.state.StoreUnavailable` (unreachable after retries, or
closed: etcd), :class:`~iadeep.state.TransactionTooLarge` (a compare list or branch over
``max_txn_ops``), :class:`~iadeep.state.HistoryCompacted` (a strict watch from a revision the
backend no longer keeps). Every method is thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["KV", "Compare", "Put", "Delete", "Range", "Op", "TxnResult", "Event", "WatchBatch", "KVBackend",
           "unchanged", "holds", "first"]


@dataclass(frozen=True)
class KV:
    """One stored key: its ``value`` (bytes), the revisions that last wrote and created it, and
    its ``lease`` (0: none)."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


@dataclass(frozen=True)
class Compare:
    """A condition of a transaction: ``key``'s ``target`` equals ``expected``.

    ``target``: ``"mod"`` (its mod revision), ``"create"`` (its create revision; 0 means the key
    is absent) or ``"value"`` (its bytes; an absent key never equals a value).
    """

    key: str
    target: Literal["mod", "create", "value"]
    expected: int | bytes


@dataclass(frozen=True)
class Put:
    """Write ``value`` under ``key``, attached to ``lease`` (0: none; a put moves the key off any
    lease it had)."""

    key: str
    value: str | bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    """Delete ``key`` (``prefix``: every key starting with it); its response is the count deleted."""

    key: str
    prefix: bool = False


@dataclass(frozen=True)
class Range:
    """Read ``key`` (``prefix``: every key starting with it); its response is the list of
    :class:`KV` by key (unpaged: for a few keys; listings use :meth:`KVBackend.ranges`)."""

    key: str
    prefix: bool = False


Op = Put | Delete | Range


@dataclass(frozen=True)
class TxnResult:
    """What a transaction did.

    Attributes:
        succeeded: every compare held (the success branch ran).
        revision: the store's revision after it.
        responses: one per op of the branch that ran: ``list[KV]`` for a :class:`Range`, the
            number deleted for a :class:`Delete`, ``None`` for a :class:`Put`.
        retried: the backend sent it more than once (a lost answer): an earlier try may have
            committed, so a failed compare may be this transaction's own write.
    """

    succeeded: bool
    revision: int
    responses: list[list[KV] | int | None] = field(default_factory=list)
    retried: bool = False


@dataclass(frozen=True)
class Event:
    """A change seen by a watch: ``type`` ``put`` (``kv`` the new key) or ``delete`` (``kv.value``
    empty, ``kv.mod_revision`` the deleting revision)."""

    type: Literal["put", "delete"]
    kv: KV


@dataclass(frozen=True)
class WatchBatch:
    """Events delivered together, oldest first; ``revision``: that of the last one."""

    revision: int
    events: tuple[Event, ...]


class KVBackend(Protocol):
    """A key-value store with etcd's semantics (module docstring).

    Attributes:
        max_txn_ops: the most operations of one compare list or branch.
        name: how messages name the backend (``etcd at http://127.0.0.1:2379``).
    """

    max_txn_ops: int
    name: str

    def range(self, key: str, *, prefix: bool = False) -> tuple[list[KV], int]:
        """The key (``prefix``: every key under it, paged by the backend) and the revision read."""

    def ranges(self, prefixes: Sequence[str]) -> tuple[list[list[KV]], int]:
        """Every key under each of ``prefixes`` (by key), all at one revision, and that revision."""

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """One atomic transaction (see :class:`TxnResult`).

        Raises:
            TransactionTooLarge: ``compares``, ``success`` or ``failure`` holds more than
                :attr:`max_txn_ops` entries.
            StoreUnavailable: the backend cannot be reached.
        """

    def watch(self, prefixes: Sequence[str], start_revision: int, *, idle_s: float,
              strict: bool = True) -> Iterator[WatchBatch]:
        """Batches of the changes under any of ``prefixes`` from ``start_revision`` on, in
        revision order per prefix, until ``idle_s`` passes without one.

        Raises:
            HistoryCompacted: ``strict`` and ``start_revision`` is older than the kept history
                (not ``strict``: the watch goes on from the oldest kept).
            StoreUnavailable: the backend cannot be reached (at the call or while following).
        """

    def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds (>= 1); its ID (never 0)."""

    def keepalive(self, lease: int) -> bool:
        """Renew ``lease`` for its TTL; False when it expired or never was."""

    def revoke(self, lease: int) -> None:
        """End ``lease`` now (its keys are deleted); an unknown lease is no error."""

    def revision(self) -> int:
        """The current revision."""

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when the backend answers within ``timeout_s``."""

    def deadline(self, seconds: float) -> AbstractContextManager[None]:
        """Every call of this thread inside the block ends within ``seconds``."""

    def stats(self) -> dict[str, int]:
        """``requests`` sent and ``retries`` after transient errors."""

    def close(self) -> None:
        """Release connections (idempotent)."""


def unchanged(key: str, kv: KV | None) -> Compare:
    """Compare: ``key`` is as it was read (``kv``; ``None``: still absent)."""
    return Compare(key, "create", 0) if kv is None else Compare(key, "mod", kv.mod_revision)


def holds(key: str, text: str | None) -> Compare:
    """Compare: ``key`` holds exactly ``text`` (``None``: absent)."""
    return Compare(key, "create", 0) if text is None else Compare(key, "value", text.encode())


def first(response: list[KV] | int | None) -> KV | None:
    """The key a :class:`Range` of one key found (``None``: absent)."""
    return response[0] if isinstance(response, list) and response else None
