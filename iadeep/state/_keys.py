"""The state store's key schema and value encodings, shared by both stores.

:class:`Keys` builds every key under one prefix (the schema: :mod:`iadeep.state._records`) and
decodes the keys a watch follows into typed changes. Besides the documented keys, both stores keep
``<p>/reservations/<pod_uid>`` (what a pod holds, with a nonce; :func:`reservation_json`): the
per-pod record that allocation transactions compare on (absent: the pod holds nothing), so a pod
can never hold two reservations, and a release finds its GPUs in one read.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import dataclass

import msgspec

from iadeep.state._protocol import (
    Change,
    ChangeKind,
)
from iadeep.state._records import (
    Assignment,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    NodeInventory,
    RecordError,
    UndoRecord,
    from_json,
)


log = logging.getLogger(__name__)

__all__ = ["Keys", "check_name", "new_seqs", "reservation_json", "reservation_from_json"]


def check_name(kind: str, value: str) -> str:
    """A node name or pod UID usable as one key segment.

    Raises:
        RecordError: empty, or contains ``/``.
    """
    if not isinstance(value, str) or not value or "/" in value:
        raise RecordError(f"{kind}: {value!r} is not a valid name (non-empty, no '/')")
    return value


@dataclass(frozen=True)
class Keys:
    """The key schema under one prefix (``/iadeep``)."""

    prefix: str = "/iadeep"

    def folder(self, what: str) -> str:
        """``<prefix>/<what>`` (``what`` relative to the prefix, e.g. ``"jobs/"``)."""
        return f"{self.prefix}/{what.lstrip('/')}"

    def node(self, node: str) -> str:
        return f"{self.prefix}/nodes/{node}"

    def job(self, pod_uid: str) -> str:
        return f"{self.prefix}/jobs/{pod_uid}"

    def assignment(self, node: str, gpu: int, pod_uid: str) -> str:
        return f"{self.prefix}/assignments/{node}/{gpu}/{pod_uid}"

    def gpu(self, node: str, gpu: int) -> str:
        return f"{self.prefix}/gpus/{node}/{gpu}"

    def measurement(self, pod_uid: str, seq: str) -> str:
        return f"{self.prefix}/measurements/{pod_uid}/{seq}"

    def tuning(self, node: str, gpu: int) -> str:
        return f"{self.prefix}/tuning/{node}/{gpu}"

    def sample(self, seq: str) -> str:
        return f"{self.prefix}/samples/{seq}"

    def reservation(self, pod_uid: str) -> str:
        return f"{self.prefix}/reservations/{pod_uid}"

    def batch_size(self, pod_uid: str) -> str:
        return f"{self.prefix}/batchsizes/{pod_uid}"

    def workload(self, pod_uid: str) -> str:
        return f"{self.prefix}/workloads/{pod_uid}"

    def checkpoint(self, job_key: str) -> str:
        return f"{self.prefix}/checkpoints/{job_key}"

    def placement(self) -> str:
        return f"{self.prefix}/placement"

    def undo(self, pod_uid: str) -> str:
        return f"{self.prefix}/undos/{pod_uid}"

    def arrival(self, job: str) -> str:
        return f"{self.prefix}/arrivals/{job}"

    def lock(self, name: str) -> str:
        return f"{self.prefix}/locks/{name}"

    def followed(self, key: str) -> tuple[ChangeKind, str | tuple[str, int]] | None:
        """``(kind, name)`` of a key an extender follows (inventories, GPU states, jobs, samples),
        ``None`` for any other key.

        Raises:
            RecordError: a GPU key without ``<node>/<gpu index>``.
        """
        if not key.startswith(self.prefix + "/"):
            return None
        folder, _, rest = key[len(self.prefix) + 1:].partition("/")
        spec = _FOLLOWED.get(folder)
        if spec is None or not rest:
            return None
        if spec[0] != "gpu":
            return spec[0], rest
        node, _, index = rest.rpartition("/")
        if not node or not index.isdigit():
            raise RecordError(f"{key}: expected gpus/<node>/<gpu index>")
        return "gpu", (node, int(index))

    def decode_change(self, key: str, value: str | bytes | None, revision: int) -> Change | None:
        """What a put (``value``) or delete (``value=None``) of ``key`` means to a follower of
        inventories, GPU states, jobs and samples; ``None`` for any other key.

        Raises:
            RecordError: the key or the record is malformed, or the record names another node,
                GPU or pod than its key (the message names the key).
        """
        found = self.followed(key)
        if found is None:
            return None
        kind, name = found
        if value is None:
            return Change(kind, name, None, revision)
        try:
            record = from_json(_FOLLOWED_TYPES[kind], value)
        except RecordError as exc:
            raise RecordError(f"{key}: {exc}") from None
        identity = _IDENTITY[kind](record) if kind in _IDENTITY else name
        if identity != name:
            raise RecordError(f"{key}: the record is for {identity!r}, not {name!r}")
        return Change(kind, name, record, revision)

    def decode_or_absent(self, key: str, value: str | bytes | None, revision: int) -> Change | None:
        """:meth:`decode_change`, with a malformed record logged and reported as absent (deleted),
        as a listing skips it: a follower and a fresh listing then agree."""
        try:
            return self.decode_change(key, value, revision)
        except RecordError as exc:
            log.warning("malformed record, treated as absent: %s", exc)
            try:
                found = self.followed(key)
            except RecordError:
                return None
            return None if found is None else Change(found[0], found[1], None, revision)


_FOLLOWED: dict[str, tuple[ChangeKind, type]] = {
    "nodes": ("inventory", NodeInventory),
    "gpus": ("gpu", GpuState),
    "jobs": ("job", JobRecord),
    "samples": ("sample", InterferenceSampleRecord),
    "undos": ("undo", UndoRecord),
}
_FOLLOWED_TYPES: dict[str, type] = {kind: cls for kind, cls in _FOLLOWED.values()}
#: what a followed record says its key is (samples are keyed by sequence only)
_IDENTITY: dict[str, Callable[[Any], str | tuple[str, int]]] = {
    "inventory": lambda r: r.node,
    "gpu": lambda r: (r.node, r.gpu),
    "job": lambda r: r.pod_uid,
    "undo": lambda r: r.pod_uid,
}


def new_seqs(n: int) -> list[str]:
    """``n`` fresh, unique sequence segments that sort in order (time, then position)."""
    base = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
    return [f"{base}-{i:06d}" for i in range(n)]


def reservation_json(assignments: Sequence[Assignment], nonce: str) -> str:
    """Value of ``<p>/reservations/<pod_uid>``."""
    return json.dumps(
        {"nonce": nonce, "assignments": [msgspec.structs.asdict(a) for a in assignments]}, separators=(",", ":"), sort_keys=True
    )


def reservation_from_json(text: str | bytes) -> tuple[list[Assignment], str]:
    """Parse a reservation value into its assignments and nonce.

    Raises:
        RecordError: malformed.
    """
    try:
        d = json.loads(text)
        return [Assignment(**a) for a in d["assignments"]], str(d["nonce"])
    except (ValueError, TypeError, KeyError) as exc:
        raise RecordError(f"reservation: {exc}") from None
