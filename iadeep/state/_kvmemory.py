"""The in-process key-value backend: etcd's semantics over one dictionary behind one lock.

:class:`MemoryBackend` implements :class:`iadeep.state._kv.KVBackend` as etcd does: one revision
counter raised by each transaction that changes something, ``create_revision`` and
``mod_revision`` per key, compares on them and on values, leases whose keys go (with ``delete``
events) when they expire, and watches that replay a bounded history (``history`` events; older
revisions are compacted, and a strict watch from them raises
:class:`~iadeep.state.HistoryCompacted`). Lease time is the injectable ``clock`` (monotonic
seconds), so the simulator and tests may pass a virtual one; leases expire lazily, at the next
call or within about 50 ms while a watch waits.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from iadeep.state._kv import KV, Compare, Delete, Event, Op, Put, Range, TxnResult, WatchBatch
from iadeep.state._protocol import HistoryCompacted, StoreUnavailable, TransactionTooLarge

__all__ = ["MemoryBackend"]


class _Watch(Iterator[WatchBatch]):
    """The batches of one :meth:`MemoryBackend.watch`; registered at creation, so nothing that
    changes after the ``watch()`` call is missed."""

    def __init__(self, backend: MemoryBackend, prefixes: tuple[str, ...], idle_s: float) -> None:
        self._backend = backend
        self._prefixes = prefixes
        self._idle_s = idle_s
        self._batches: deque[WatchBatch] = deque()
        self._cond = threading.Condition()
        self._done = False

    def push(self, revision: int, events: Sequence[Event]) -> None:
        mine = tuple(e for e in events if e.kv.key.startswith(self._prefixes))
        if mine:
            with self._cond:
                self._batches.append(WatchBatch(revision, mine))
                self._cond.notify_all()

    def __next__(self) -> WatchBatch:
        deadline = time.monotonic() + self._idle_s
        with self._cond:
            while not self._batches and not self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise StopIteration
                self._cond.wait(min(left, 0.05))
                if not self._batches:
                    self._cond.release()
                    try:
                        self._backend.revision()  # leases expire even when nobody else calls in
                    finally:
                        self._cond.acquire()
            if not self._batches:
                raise StopIteration
            return self._batches.popleft()

    def close(self) -> None:
        self._done = True
        self._backend._watchers.discard(self)


class MemoryBackend:
    """:class:`~iadeep.state._kv.KVBackend` in process memory (module docstring).

    Args:
        clock: monotonic seconds for lease expiry.
        history: events kept for watches from past revisions (>= 1).
        max_txn_ops: the most operations of one compare list or branch (etcd's ``--max-txn-ops``).
    """

    name = "the in-memory store"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, history: int = 100_000,
                 max_txn_ops: int = 128) -> None:
        self.clock = clock
        self.max_txn_ops = max_txn_ops
        self._lock = threading.RLock()
        self._data: dict[str, KV] = {}
        self._leases: dict[int, tuple[float, float, set[str]]] = {}  # id -> (ttl_s, expires_at, keys)
        self._lease_ids = itertools.count(1)
        self._revision = 0
        self._history: deque[Event] = deque(maxlen=history)
        self._compacted = 0  # events up to this revision are no longer kept
        self._watchers: weakref.WeakSet[_Watch] = weakref.WeakSet()
        self._closed = False

    # -- writes -----------------------------------------------------------------------------

    def _commit(self, events: list[Event]) -> None:
        """Record the events of one revision and hand them to the watches."""
        for e in events:
            if len(self._history) == self._history.maxlen:
                self._compacted = self._history[0].kv.mod_revision
            self._history.append(e)
        for w in list(self._watchers):
            w.push(self._revision, events)

    def _detach(self, kv: KV | None) -> None:
        if kv is not None and kv.lease in self._leases:
            self._leases[kv.lease][2].discard(kv.key)

    def _delete(self, keys: list[str], events: list[Event]) -> int:
        if keys and not events:
            self._revision += 1
        for k in keys:
            self._detach(self._data.pop(k))
            events.append(Event("delete", KV(k, b"", self._revision, 0)))
        return len(keys)

    def _expire(self) -> None:
        now = self.clock()
        for lease, (_ttl, expires, keys) in list(self._leases.items()):
            if expires <= now:
                del self._leases[lease]
                events: list[Event] = []
                self._delete(sorted(keys), events)
                if events:
                    self._commit(events)

    def _matches(self, key: str, prefix: bool) -> list[str]:
        if not prefix:
            return [key] if key in self._data else []
        return sorted(k for k in self._data if k.startswith(key))

    def _holds(self, c: Compare) -> bool:
        kv = self._data.get(c.key)
        if c.target == "value":
            return kv is not None and kv.value == c.expected
        actual = 0 if kv is None else (kv.mod_revision if c.target == "mod" else kv.create_revision)
        return actual == c.expected

    # -- protocol ---------------------------------------------------------------------------

    def range(self, key: str, *, prefix: bool = False) -> tuple[list[KV], int]:
        with self._lock:
            self._expire()
            return [self._data[k] for k in self._matches(key, prefix)], self._revision

    def ranges(self, prefixes: Sequence[str]) -> tuple[list[list[KV]], int]:
        with self._lock:
            self._expire()
            return [[self._data[k] for k in self._matches(p, True)] for p in prefixes], self._revision

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """See :meth:`KVBackend.txn`; the ops of the branch apply in order (a range sees the
        writes before it).

        Raises:
            TransactionTooLarge: a compare list or branch longer than ``max_txn_ops``.
            StoreUnavailable: a put naming a lease that is not granted.
        """
        n = max(len(compares), len(success), len(failure))
        if n > self.max_txn_ops:
            raise TransactionTooLarge(f"{self.name} refused a transaction of {n} operations: more than its "
                                      f"max_txn_ops={self.max_txn_ops}")
        with self._lock:
            self._expire()
            ok = all(self._holds(c) for c in compares)
            events: list[Event] = []
            responses: list[list[KV] | int | None] = []
            for op in success if ok else failure:
                if isinstance(op, Range):
                    responses.append([self._data[k] for k in self._matches(op.key, op.prefix)])
                elif isinstance(op, Delete):
                    responses.append(self._delete(self._matches(op.key, op.prefix), events))
                else:
                    self._put(op, events)
                    responses.append(None)
            if events:
                self._commit(events)
            return TxnResult(ok, self._revision, responses)

    def _put(self, op: Put, events: list[Event]) -> None:
        if op.lease and op.lease not in self._leases:
            raise StoreUnavailable(f"{self.name} rejected a put of {op.key}: requested lease not found")
        if not events:
            self._revision += 1
        old = self._data.get(op.key)
        self._detach(old)
        value = op.value.encode() if isinstance(op.value, str) else op.value
        kv = KV(op.key, value, self._revision, old.create_revision if old else self._revision, op.lease)
        self._data[op.key] = kv
        if op.lease:
            self._leases[op.lease][2].add(op.key)
        events.append(Event("put", kv))

    def watch(self, prefixes: Sequence[str], start_revision: int, *, idle_s: float,
              strict: bool = True) -> Iterator[WatchBatch]:
        """See :meth:`KVBackend.watch`: one batch per revision, the kept history replayed first."""
        with self._lock:
            self._expire()
            if strict and start_revision <= self._compacted:
                raise HistoryCompacted(f"revision {start_revision} is compacted (kept from {self._compacted + 1})")
            w = _Watch(self, tuple(prefixes), idle_s)
            past = [e for e in self._history if e.kv.mod_revision >= start_revision]
            for rev, group in itertools.groupby(past, key=lambda e: e.kv.mod_revision):
                w.push(rev, list(group))
            self._watchers.add(w)
        return w

    def grant(self, ttl_s: int) -> int:
        with self._lock:
            lease = next(self._lease_ids)
            self._leases[lease] = (float(ttl_s), self.clock() + ttl_s, set())
            return lease

    def keepalive(self, lease: int) -> bool:
        with self._lock:
            self._expire()
            if lease not in self._leases:
                return False
            ttl, _, keys = self._leases[lease]
            self._leases[lease] = (ttl, self.clock() + ttl, keys)
            return True

    def revoke(self, lease: int) -> None:
        with self._lock:
            found = self._leases.pop(lease, None)
            if found is not None:
                events: list[Event] = []
                self._delete(sorted(found[2]), events)
                if events:
                    self._commit(events)

    def revision(self) -> int:
        with self._lock:
            self._expire()
            return self._revision

    def healthy(self, timeout_s: float = 2.0) -> bool:
        return not self._closed

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Nothing here waits on a network: nothing to bound."""
        yield

    def stats(self) -> dict[str, int]:
        """No requests cross a wire here: always 0."""
        return {"requests": 0, "retries": 0}

    def close(self) -> None:
        """Mark closed (``healthy()`` turns False); the data stays readable."""
        self._closed = True
