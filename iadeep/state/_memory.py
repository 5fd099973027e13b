"""The in-process state store, and the allocation rules both stores apply.

:class:`MemoryStateStore` implements :class:`iadeep.state.StateStore` with the same semantics as
:class:`iadeep.state.EtcdStateStore` — same checks, same errors, same watch events and keys — over
plain dictionaries behind one lock. It is a real store, not a mock: the simulator-side tools and
the tests of drivers use it where no etcd runs.

The rules of a reservation live here as pure functions (:func:`plan_reserve`,
:func:`plan_release`) so that both stores decide identically; the etcd store only adds the
transaction around them.

Keys (see :mod:`iadeep.state._records` for the schema) are built by :class:`Keys`. Besides the
documented ones, both stores keep ``<p>/reservations/<pod_uid>`` (what a pod holds, with a nonce):
the per-pod record that allocation transactions compare on (absent: the pod holds nothing), so a
pod can never hold two reservations, and :meth:`release` finds its GPUs in one read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from dataclasses import asdict, dataclass, field, replace

from iadeep.state._protocol import (
    AllocationConflict,
    Change,
    ChangeBatch,
    ChangeKind,
    HistoryCompacted,
    NodeRecords,
    StateListing,
)
from iadeep.state._records import (
    Assignment,
    BatchSizeAssignment,
    WorkloadStatus,
    JobCheckpoint,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    RecordError,
    TuningRequest,
    UNDO_OUTCOMES,
    UndoRecord,
    from_json,
    to_json,
)

log = logging.getLogger(__name__)

__all__ = [
    "Keys",
    "MemoryStateStore",
    "ReservePlan",
    "ReleasePlan",
    "plan_reserve",
    "plan_release",
    "ResizePlan",
    "plan_resize",
    "check_resize",
    "check_name",
    "checked_undo",
    "settled_undo",
    "reservation_gpu_limit",
]

MEM_EPSILON_GIB = 1e-9
"""Tolerance of the memory check (GiB): sums of float sizes must not reject an exact fit."""


RESERVE_OPS_FIXED = 2
"""Operations of a reservation beyond 3 per GPU: the job record and the reservation record."""
RELEASE_OPS_FIXED = 5
"""Operations of a release beyond 3 per GPU: the reservation, job and measurements deletes."""


def reservation_gpu_limit(max_txn_ops: int) -> int:
    """The most GPUs one pod may reserve when a transaction may hold ``max_txn_ops`` operations.

    A reservation of n GPUs is one transaction of 3n+2 puts (per GPU: its assignment, GPU state
    and tuning request; plus the job and reservation records) and its release one of 3n+5 (per
    GPU: the assignment delete, the GPU state and the tuning request put or delete; plus the
    reservation, job, measurements, batch-size and workload-status deletes). etcd refuses a
    transaction whose compare list or either branch holds more than ``--max-txn-ops`` operations
    (default 128; etcd's ``checkTxnRequest``), so both must fit: ``n <= (max_txn_ops - 5) // 3``
    (41 at 128).
    """
    return max(0, (int(max_txn_ops) - RELEASE_OPS_FIXED) // 3)


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


def checked_undo(record: UndoRecord) -> str:
    """``record`` as stored (JSON), after the checks a reader applies (both stores refuse to
    write what a follower would drop as malformed).

    Raises:
        RecordError: the record breaks its rules.
    """
    if not isinstance(record, UndoRecord):
        raise RecordError(f"put_undo: expected UndoRecord, got {type(record).__name__}")
    text = to_json(record)
    from_json(UndoRecord, text)
    return text


def settled_undo(record: UndoRecord, outcome: str, at: float) -> UndoRecord:
    """``record`` carried out (``outcome`` at ``at``).

    Raises:
        RecordError: an outcome other than ``evicted`` or ``gone``.
    """
    if outcome not in UNDO_OUTCOMES or outcome == "pending":
        raise RecordError(f"settle_undo: outcome must be one of {', '.join(UNDO_OUTCOMES[1:])}, got {outcome!r}")
    return replace(record, outcome=outcome, settled_at=float(at))


def new_seqs(n: int) -> list[str]:
    """``n`` fresh, unique sequence segments that sort in order (time, then position)."""
    base = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
    return [f"{base}-{i:06d}" for i in range(n)]


def reservation_json(assignments: Sequence[Assignment], nonce: str) -> str:
    """Value of ``<p>/reservations/<pod_uid>``."""
    return json.dumps(
        {"nonce": nonce, "assignments": [asdict(a) for a in assignments]}, separators=(",", ":"), sort_keys=True
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


# -- allocation rules -------------------------------------------------------------------------


@dataclass(frozen=True)
class ReservePlan:
    """What one reservation writes (all of it, or nothing)."""

    assignments: list[Assignment]
    gpu_states: list[GpuState]
    tuning: list[TuningRequest]


@dataclass(frozen=True)
class ReleasePlan:
    """What one release writes: GPU states to put (GPUs still shared) and to delete (GPUs left
    empty), tuning requests to set and to clear."""

    released: list[Assignment]
    gpu_states: list[GpuState]
    tuning_put: list[TuningRequest]
    tuning_delete: list[tuple[str, int]] = field(default_factory=list)
    gpu_delete: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ops(self) -> int:
        """Operations of this plan in a transaction (besides the per-pod records)."""
        return len(self.released) + len(self.gpu_states) + len(self.gpu_delete) + len(self.tuning_put) + len(
            self.tuning_delete)


def _check_job(job: JobRecord) -> None:
    check_name("JobRecord.pod_uid", job.pod_uid)
    if not (isinstance(job.mem_gib, int | float) and math.isfinite(job.mem_gib) and job.mem_gib > 0):
        raise RecordError(f"JobRecord.mem_gib: expected a positive number of GiB, got {job.mem_gib!r}")
    if not (isinstance(job.num_gpus, int) and job.num_gpus >= 1):
        raise RecordError(f"JobRecord.num_gpus: expected an integer >= 1, got {job.num_gpus!r}")


def check_gpu_count(job: JobRecord, gpus: Sequence[int], limit: int, max_txn_ops: int) -> None:
    """Refuse a reservation of more GPUs than one transaction can hold.

    Raises:
        AllocationConflict: ``len(gpus)`` above ``limit`` (the message names the limit and the
            ``IADEEP_ETCD_MAX_TXN_OPS`` setting it comes from).
    """
    if len(gpus) > limit:
        raise AllocationConflict(
            f"pod {job.pod_uid} needs {len(gpus)} GPUs; one reservation is one etcd transaction of 3n+5 operations "
            f"and etcd's --max-txn-ops is {max_txn_ops} (IADEEP_ETCD_MAX_TXN_OPS): at most {limit} GPUs per pod"
        )


def plan_reserve(
    job: JobRecord,
    node: str,
    gpus: Sequence[int],
    *,
    inventory: NodeInventory | None,
    states: Mapping[int, GpuState | None],
    held: Sequence[Assignment] | None,
    colocation_limit: int,
    now_s: float,
) -> ReservePlan:
    """Decide a reservation of ``job.mem_gib`` on each of ``gpus`` of ``node``.

    Args:
        job: the pod to place; ``job.num_gpus`` must equal ``len(gpus)``.
        node, gpus: where.
        inventory: the node's published GPUs (``None``: not published / expired).
        states: current :class:`GpuState` per GPU index of ``node`` (``None`` or absent: unused).
        held: what the pod already holds (``None`` or empty: nothing).
        colocation_limit: most pods on one GPU, this one included (>= 1).
        now_s: time stamp of the assignments and tuning requests (Unix seconds).

    Returns:
        The assignments, the new GPU states and one tuning request per GPU (its pod set changed).

    Raises:
        AllocationConflict: the pod holds a reservation, the node or a GPU is unknown, a GPU is
            named twice or their count is not ``job.num_gpus``, memory or the co-location limit
            would be exceeded.
        RecordError: malformed job or node name.
        ValueError: ``colocation_limit`` < 1.
    """
    _check_job(job)
    check_name("node", node)
    if colocation_limit < 1:
        raise ValueError(f"colocation_limit must be >= 1, got {colocation_limit}")
    gpus = [int(g) for g in gpus]
    where = f"{node}/{gpus}"
    if held:
        h = held[0]
        raise AllocationConflict(
            f"pod {job.pod_uid} already holds a reservation on {h.node}/{sorted(a.gpu for a in held)}", held=held
        )
    if not gpus or len(set(gpus)) != len(gpus):
        raise AllocationConflict(f"{where}: GPUs must be distinct and at least one")
    if len(gpus) != job.num_gpus:
        raise AllocationConflict(f"{where}: pod {job.pod_uid} needs {job.num_gpus} GPU(s), {len(gpus)} given")
    if inventory is None:
        raise AllocationConflict(f"node {node!r} has no published GPU inventory (unknown node or agent gone)")
    capacity = {g.index: g.mem_gib for g in inventory.gpus}
    assignments, new_states, tuning = [], [], []
    for g in gpus:
        if g not in capacity:
            raise AllocationConflict(f"{node}/gpu{g}: no such GPU (node has {sorted(capacity)})")
        st = states.get(g) or GpuState(node, g)
        if len(st.pods) + 1 > colocation_limit:
            raise AllocationConflict(
                f"{node}/gpu{g}: co-location limit {colocation_limit} reached ({len(st.pods)} pod(s))"
            )
        if st.mem_used_gib + job.mem_gib > capacity[g] + MEM_EPSILON_GIB:
            raise AllocationConflict(
                f"{node}/gpu{g}: not enough memory: {job.mem_gib:g} GiB asked, "
                f"{max(0.0, capacity[g] - st.mem_used_gib):g} of {capacity[g]:g} GiB free"
            )
        pods = (*st.pods, job.pod_uid)
        assignments.append(Assignment(job.pod_uid, node, g, float(job.mem_gib), float(now_s)))
        new_states.append(GpuState(node, g, st.mem_used_gib + job.mem_gib, pods))
        tuning.append(TuningRequest(node, g, pods, float(now_s)))
    return ReservePlan(assignments, new_states, tuning)


def plan_release(
    held: Sequence[Assignment], states: Mapping[tuple[str, int], GpuState | None], *, now_s: float
) -> ReleasePlan:
    """Decide the release of ``held`` (a pod's assignments) given the current GPU states.

    A GPU left with pods gets a new state and tuning request (its co-location set changed); a
    GPU left empty has its state and tuning request deleted (an absent state means unused), so
    no record outlives the pods it describes.
    """
    new_states, put, delete, gone = [], [], [], []
    for a in held:
        st = states.get((a.node, a.gpu)) or GpuState(a.node, a.gpu)
        pods = tuple(p for p in st.pods if p != a.pod_uid)
        mem = st.mem_used_gib - a.mem_gib if a.pod_uid in st.pods else st.mem_used_gib
        mem = 0.0 if not pods or mem < MEM_EPSILON_GIB else mem
        if pods:
            new_states.append(GpuState(a.node, a.gpu, mem, pods))
            put.append(TuningRequest(a.node, a.gpu, pods, float(now_s)))
        else:
            gone.append((a.node, a.gpu))
            delete.append((a.node, a.gpu))
    return ReleasePlan(list(held), new_states, put, delete, gone)


@dataclass(frozen=True)
class ResizePlan:
    """What :func:`plan_resize` decided: each resized pod's whole reservation (its assignments on
    every GPU, the resized one changed) and the GPU's new state."""

    reservations: dict[str, list[Assignment]]
    gpu_state: GpuState


def check_resize(node: str, gpu: int, sizes: Mapping[str, float]) -> None:
    """The arguments of a resize, checked before anything is read.

    Raises:
        RecordError: a malformed node or pod name, a GPU index that is not an ``int``, no pod, or a
            size that is not a positive finite number of GiB (the message names the field).
    """
    check_name("node", node)
    if not isinstance(gpu, int) or isinstance(gpu, bool):
        raise RecordError(f"gpu: expected an integer GPU index, got {gpu!r}")
    if not sizes:
        raise RecordError("sizes: expected at least one pod")
    for pod, size in sizes.items():
        check_name("pod_uid", pod)
        if isinstance(size, bool) or not (isinstance(size, int | float) and math.isfinite(size) and size > 0):
            raise RecordError(f"sizes[{pod!r}]: expected a positive number of GiB, got {size!r}")


def plan_resize(
    node: str,
    gpu: int,
    sizes: Mapping[str, float],
    *,
    inventory: NodeInventory | None,
    state: GpuState | None,
    held: Mapping[str, Sequence[Assignment] | None],
    requests: Mapping[str, JobRecord | None],
) -> ResizePlan:
    """Decide new reservations of pods on one GPU (a tuning session's configuration).

    A tuning session may grow a job's batch size into the GPU memory no other pod reserved, so the
    memory a pod holds follows its batch size; it never falls below the pod's request (its job
    record's ``mem_gib``, the ``iadeep.io/gpu-mem`` the kubelet counted for it), so the
    extender's books never show memory free that the kubelet's do not.

    Args:
        node, gpu: the GPU.
        sizes: new reservation per pod on that GPU (GiB); pods not named keep theirs.
        inventory: the node's published GPUs.
        state: the GPU's current state.
        held: each named pod's reservation (its assignments on all its GPUs).
        requests: each named pod's job record.

    Raises:
        AllocationConflict: the node or GPU is unknown, a pod holds nothing on that GPU, a size
            is below the pod's request, or the sizes exceed the GPU's memory (the message names
            the GPU and the sizes).
        RecordError: a size that is not a positive finite number (names the pod).
    """
    check_resize(node, gpu, sizes)
    where = f"{node}/gpu{gpu}"
    if inventory is None:
        raise AllocationConflict(f"node {node!r} has no published GPU inventory (unknown node or agent gone)")
    capacity = {g.index: g.mem_gib for g in inventory.gpus}.get(gpu)
    if capacity is None or state is None:
        raise AllocationConflict(f"{where}: no such GPU in use")
    mem = state.mem_used_gib
    out: dict[str, list[Assignment]] = {}
    for pod, size in sizes.items():
        mine = [a for a in held.get(pod) or () if a.node == node and a.gpu == gpu]
        if pod not in state.pods or not mine:
            raise AllocationConflict(f"{where}: pod {pod} holds no reservation there")
        job = requests.get(pod)
        if job is not None and size < job.mem_gib - MEM_EPSILON_GIB:
            raise AllocationConflict(f"{where}: pod {pod}: {size:g} GiB is below its request of {job.mem_gib:g} GiB")
        mem += float(size) - mine[0].mem_gib
        out[pod] = [replace(a, mem_gib=float(size)) if a is mine[0] else a for a in held[pod]]  # type: ignore[index]
    if mem > capacity + MEM_EPSILON_GIB:
        asked = ", ".join(f"{p} {v:g} GiB" for p, v in sizes.items())
        raise AllocationConflict(f"{where}: not enough memory for {asked}: {mem:g} of {capacity:g} GiB in all")
    return ResizePlan(out, GpuState(node, gpu, max(mem, 0.0), state.pods))


# -- the store --------------------------------------------------------------------------------


class _MemoryWatch(Iterator[Mapping[str, str]]):
    """Events of one :meth:`MemoryStateStore.watch`; registered at creation, so nothing that
    happens after the ``watch()`` call is missed."""

    def __init__(self, store: MemoryStateStore, prefix: str | tuple[str, ...], timeout_s: float, *,
                 revisions: bool = False) -> None:
        self._store = store
        self._prefix = prefix  # one prefix or several (str.startswith takes both)
        self._timeout_s = timeout_s
        self._revisions = revisions
        self._events: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._done = False

    def push(self, event: dict[str, Any]) -> None:
        if event["key"].startswith(self._prefix):
            if not self._revisions:
                event = {k: v for k, v in event.items() if k != "revision"}
            with self._cond:
                self._events.append(event)
                self._cond.notify_all()

    def __next__(self) -> Mapping[str, str]:
        deadline = time.monotonic() + self._timeout_s
        with self._cond:
            while not self._events and not self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise StopIteration
                self._cond.wait(min(left, 0.05))
                if not self._events:
                    self._cond.release()
                    try:
                        self._store._expire()  # leases expire even when nobody else calls in
                    finally:
                        self._cond.acquire()
            if not self._events:
                raise StopIteration
            return self._events.popleft()

    def close(self) -> None:
        self._done = True
        self._store._watchers.discard(self)


class MemoryStateStore:
    """:class:`iadeep.state.StateStore` in process memory (thread-safe, one lock).

    Args:
        prefix: key prefix used in watch events (as the etcd store's, default ``/iadeep``).
        clock: monotonic seconds for lease expiry; the simulator may pass a virtual clock.
        history: changes kept for :meth:`changes` (older ones are compacted, as etcd does).

    Leases expire lazily: a record whose lease ran out disappears (with a ``delete`` event) at
    the next call, or within about 50 ms while a watch waits.
    """

    def __init__(self, *, prefix: str = "/iadeep", clock: Callable[[], float] = time.monotonic,
                 history: int = 100_000, max_txn_ops: int = 128) -> None:
        self.keys = Keys("/" + prefix.strip("/"))
        self.max_txn_ops = max_txn_ops  # the same limit as etcd's, so both stores refuse alike
        self.max_reservation_gpus = reservation_gpu_limit(max_txn_ops)
        self._clock = clock
        self._lock = threading.RLock()
        self._inventories: dict[str, NodeInventory] = {}
        self._leases: dict[str, tuple[float, float]] = {}  # node -> (ttl_s, expires_at)
        self._jobs: dict[str, JobRecord] = {}
        self._gpus: dict[tuple[str, int], GpuState] = {}
        self._assignments: dict[tuple[str, int, str], Assignment] = {}
        self._reservations: dict[str, list[Assignment]] = {}
        self._measurements: dict[str, list[Measurement]] = {}
        self._tuning: dict[tuple[str, int], TuningRequest] = {}
        self._samples: list[InterferenceSampleRecord] = []
        self._batch_sizes: dict[str, BatchSizeAssignment] = {}
        self._workloads: dict[str, WorkloadStatus] = {}
        self._checkpoints: dict[str, JobCheckpoint] = {}
        self._placement: PlacementPolicy | None = None
        self._undos: dict[str, UndoRecord] = {}
        self._watchers: weakref.WeakSet[_MemoryWatch] = weakref.WeakSet()
        self._closed = False
        self._revision = 0
        self._history: deque[dict[str, Any]] = deque(maxlen=history)
        self._compacted = 0  # changes up to this revision are no longer kept

    # -- plumbing ---------------------------------------------------------------------------

    def _emit(self, kind: str, key: str, value: str | None = None) -> None:
        self._revision += 1
        event: dict[str, Any] = {"type": kind, "key": key, "revision": self._revision}
        if value is not None:
            event["value"] = value
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0]["revision"]
        self._history.append(event)
        for w in list(self._watchers):
            w.push(dict(event))

    def _expire(self) -> None:
        with self._lock:
            now = self._clock()
            for node, (_ttl, expires) in list(self._leases.items()):
                if expires <= now:
                    del self._leases[node]
                    if self._inventories.pop(node, None) is not None:
                        self._emit("delete", self.keys.node(node))

    def _put_tuning(self, t: TuningRequest) -> None:
        self._tuning[(t.node, t.gpu)] = t
        self._emit("put", self.keys.tuning(t.node, t.gpu), to_json(t))

    def _put_gpu(self, st: GpuState) -> None:
        self._gpus[(st.node, st.gpu)] = st
        self._emit("put", self.keys.gpu(st.node, st.gpu), to_json(st))

    # -- protocol ---------------------------------------------------------------------------

    def healthy(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Mark closed (``healthy()`` turns False); the data stays readable."""
        self._closed = True

    def __enter__(self) -> MemoryStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put_inventory(self, inventory: NodeInventory, *, lease_ttl_s: int | None = None) -> None:
        check_name("NodeInventory.node", inventory.node)
        if lease_ttl_s is not None and lease_ttl_s < 1:
            raise ValueError(f"lease_ttl_s must be >= 1, got {lease_ttl_s}")
        with self._lock:
            self._expire()
            self._inventories[inventory.node] = inventory
            if lease_ttl_s is None:
                self._leases.pop(inventory.node, None)
            else:
                self._leases[inventory.node] = (float(lease_ttl_s), self._clock() + lease_ttl_s)
            self._emit("put", self.keys.node(inventory.node), to_json(inventory))

    def keepalive(self, node: str) -> bool:
        """Renew the lease of ``node``'s inventory. True when the record is still there (with or
        without a lease); False when it is gone (expired or never published): publish it again."""
        with self._lock:
            self._expire()
            if node not in self._inventories:
                return False
            if node in self._leases:
                ttl, _ = self._leases[node]
                self._leases[node] = (ttl, self._clock() + ttl)
            return True

    def inventories(self) -> dict[str, NodeInventory]:
        with self._lock:
            self._expire()
            return dict(sorted(self._inventories.items()))

    def put_job(self, job: JobRecord) -> None:
        check_name("JobRecord.pod_uid", job.pod_uid)
        with self._lock:
            self._jobs[job.pod_uid] = job
            self._emit("put", self.keys.job(job.pod_uid), to_json(job))

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """See :meth:`StateStore.deadline`; nothing here waits on a network, so nothing to bound."""
        yield

    def delete_job(self, pod_uid: str) -> bool:
        """Forget a job record and its measurements (not its reservation: :meth:`release` that).
        True when a job record was there."""
        check_name("pod_uid", pod_uid)
        with self._lock:
            found = self._jobs.pop(pod_uid, None) is not None
            if found:
                self._emit("delete", self.keys.job(pod_uid))
            self._measurements.pop(pod_uid, None)
            for table, key in ((self._batch_sizes, self.keys.batch_size), (self._workloads, self.keys.workload)):
                if table.pop(pod_uid, None) is not None:
                    self._emit("delete", key(pod_uid))
            return found

    def jobs(self) -> dict[str, JobRecord]:
        with self._lock:
            return dict(sorted(self._jobs.items()))

    def gpu_states(self) -> dict[tuple[str, int], GpuState]:
        with self._lock:
            return dict(sorted(self._gpus.items()))

    def reserve(
        self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
        known: NodeRecords | None = None, supersede: bool = False,
    ) -> list[Assignment]:
        """See :meth:`StateStore.reserve`; ``known`` is not needed here (one lock, no round trips)."""
        check_gpu_count(job, gpus, self.max_reservation_gpus, self.max_txn_ops)
        with self._lock:
            self._expire()
            held = self._reservations.get(job.pod_uid)
            if held and supersede:
                if isinstance(node, str) and held[0].node == node:
                    return list(held)  # the pod's own earlier reservation on this node: reuse it
            plan = plan_reserve(
                job,
                node,
                gpus,
                inventory=self._inventories.get(node),
                states={g: self._gpus.get((node, g)) for g in gpus} if isinstance(node, str) else {},
                held=None if supersede else held,
                colocation_limit=colocation_limit,
                now_s=now_s,
            )
            if held:  # superseded: released under the same lock, as one transaction would
                self._release_locked(job.pod_uid, held, now_s=now_s, end_of_life=False)
            self._jobs[job.pod_uid] = job
            self._emit("put", self.keys.job(job.pod_uid), to_json(job))
            for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                self._assignments[(a.node, a.gpu, a.pod_uid)] = a
                self._emit("put", self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                self._put_gpu(st)
                self._put_tuning(t)
            self._reservations[job.pod_uid] = list(plan.assignments)
            self._emit(
                "put", self.keys.reservation(job.pod_uid), reservation_json(plan.assignments, secrets.token_hex(8))
            )
            return list(plan.assignments)

    def release(self, pod_uid: str, *, now_s: float) -> list[Assignment]:
        check_name("pod_uid", pod_uid)
        with self._lock:
            held = self._reservations.get(pod_uid)
            if not held:
                return []
            self._release_locked(pod_uid, held, now_s=now_s, end_of_life=True)
            return list(held)

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """See :meth:`StateStore.resize`."""
        with self._lock:
            self._expire()
            plan = plan_resize(node, gpu, sizes, inventory=self._inventories.get(node), state=self._gpus.get((node, gpu)),
                               held={p: self._reservations.get(p) for p in sizes},
                               requests={p: self._jobs.get(p) for p in sizes})
            for pod, assignments in plan.reservations.items():
                for a in assignments:
                    if (a.node, a.gpu) == (node, gpu):
                        self._assignments[(a.node, a.gpu, a.pod_uid)] = a
                        self._emit("put", self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                self._reservations[pod] = list(assignments)
                self._emit("put", self.keys.reservation(pod), reservation_json(assignments, secrets.token_hex(8)))
            self._put_gpu(plan.gpu_state)
            return plan.gpu_state

    def _release_locked(self, pod_uid: str, held: list[Assignment], *, now_s: float, end_of_life: bool) -> None:
        """Drop ``held``; with ``end_of_life`` also the pod's job record and measurements."""
        plan = plan_release(held, {(a.node, a.gpu): self._gpus.get((a.node, a.gpu)) for a in held}, now_s=now_s)
        for a in held:
            self._assignments.pop((a.node, a.gpu, a.pod_uid), None)
            self._emit("delete", self.keys.assignment(a.node, a.gpu, a.pod_uid))
        for st in plan.gpu_states:
            self._put_gpu(st)
        for key in plan.gpu_delete:
            if self._gpus.pop(key, None) is not None:
                self._emit("delete", self.keys.gpu(*key))
        for t in plan.tuning_put:
            self._put_tuning(t)
        for node, gpu in plan.tuning_delete:
            if self._tuning.pop((node, gpu), None) is not None:
                self._emit("delete", self.keys.tuning(node, gpu))
        del self._reservations[pod_uid]
        self._emit("delete", self.keys.reservation(pod_uid))
        if end_of_life:
            self.delete_job(pod_uid)

    def assignments(self, node: str | None = None) -> list[Assignment]:
        with self._lock:
            found = [a for a in self._assignments.values() if node is None or a.node == node]
        return sorted(found, key=lambda a: (a.node, a.gpu, a.pod_uid))

    def add_measurement(self, m: Measurement) -> None:
        check_name("Measurement.pod_uid", m.pod_uid)
        (seq,) = new_seqs(1)
        with self._lock:
            self._measurements.setdefault(m.pod_uid, []).append(m)
            self._emit("put", self.keys.measurement(m.pod_uid, seq), to_json(m))

    def measurements(self, pod_uid: str) -> list[Measurement]:
        with self._lock:
            return list(self._measurements.get(pod_uid, ()))

    def tuning_requests(self) -> list[TuningRequest]:
        with self._lock:
            return [t for _, t in sorted(self._tuning.items())]

    def complete_tuning(self, request: TuningRequest) -> bool:
        """Clear a tuning request if it is still the one given (same pods and time): the
        coordinator's acknowledgement. False when it changed meanwhile (tune again) or is gone."""
        with self._lock:
            key = (request.node, request.gpu)
            if self._tuning.get(key) != request:
                return False
            del self._tuning[key]
            self._emit("delete", self.keys.tuning(*key))
            return True

    def add_samples(self, samples: Sequence[InterferenceSampleRecord]) -> None:
        samples = list(samples)
        seqs = new_seqs(len(samples))
        with self._lock:
            for s, seq in zip(samples, seqs, strict=True):
                self._samples.append(s)
                self._emit("put", self.keys.sample(seq), to_json(s))

    def samples(self) -> list[InterferenceSampleRecord]:
        with self._lock:
            return list(self._samples)

    def _put_record(self, table: dict, name: str, key: str, record: Any) -> None:
        """Keep one job's record in ``table`` under ``name`` and emit its put (``key``)."""
        with self._lock:
            table[name] = record
            self._emit("put", key, to_json(record))

    def set_batch_size(self, assignment: BatchSizeAssignment) -> None:
        pod = check_name("BatchSizeAssignment.pod_uid", assignment.pod_uid)
        self._put_record(self._batch_sizes, pod, self.keys.batch_size(pod), assignment)

    def batch_size(self, pod_uid: str) -> BatchSizeAssignment | None:
        with self._lock:
            return self._batch_sizes.get(pod_uid)

    def put_workload(self, status: WorkloadStatus) -> None:
        pod = check_name("WorkloadStatus.pod_uid", status.pod_uid)
        self._put_record(self._workloads, pod, self.keys.workload(pod), status)

    def workload(self, pod_uid: str) -> WorkloadStatus | None:
        with self._lock:
            return self._workloads.get(pod_uid)

    def put_checkpoint(self, checkpoint: JobCheckpoint) -> None:
        key = check_name("JobCheckpoint.job_key", checkpoint.job_key)
        self._put_record(self._checkpoints, key, self.keys.checkpoint(key), checkpoint)

    def checkpoint(self, job_key: str) -> JobCheckpoint | None:
        with self._lock:
            return self._checkpoints.get(check_name("job_key", job_key))

    def delete_checkpoint(self, job_key: str) -> bool:
        with self._lock:
            found = self._checkpoints.pop(check_name("job_key", job_key), None) is not None
            if found:
                self._emit("delete", self.keys.checkpoint(job_key))
            return found

    def put_placement(self, placement: PlacementPolicy) -> None:
        if placement.colocation_limit < 1:
            raise RecordError(f"PlacementPolicy: $.colocation_limit: must be >= 1, got {placement.colocation_limit}")
        with self._lock:
            self._placement = placement
            self._emit("put", self.keys.placement(), to_json(placement))

    def placement(self) -> PlacementPolicy | None:
        with self._lock:
            return self._placement

    def put_undo(self, record: UndoRecord) -> None:
        text = checked_undo(record)
        with self._lock:
            self._undos[record.pod_uid] = record
            self._emit("put", self.keys.undo(record.pod_uid), text)

    def undos(self) -> dict[str, UndoRecord]:
        with self._lock:
            return dict(self._undos)

    def settle_undo(self, record: UndoRecord, outcome: str, *, at: float) -> bool:
        new = settled_undo(record, outcome, at)
        with self._lock:
            if self._undos.get(record.pod_uid) != record:
                return False
            self._undos[record.pod_uid] = new
            self._emit("put", self.keys.undo(record.pod_uid), to_json(new))
            return True

    def revision(self) -> int:
        with self._lock:
            self._expire()
            return self._revision

    def list_state(self) -> StateListing:
        with self._lock:
            self._expire()
            return StateListing(self._revision, dict(self._inventories), dict(sorted(self._gpus.items())),
                                dict(self._jobs), list(self._samples), dict(self._undos))

    def changes(self, start_revision: int, *, idle_s: float) -> Iterator[ChangeBatch]:
        """See :meth:`StateStore.changes`; the history holds the last ``history`` changes."""
        if idle_s <= 0:
            raise ValueError(f"idle_s must be > 0, got {idle_s}")
        with self._lock:
            if start_revision <= self._compacted:
                raise HistoryCompacted(f"revision {start_revision} is compacted (kept from {self._compacted + 1})")
            w = _MemoryWatch(self, self.keys.prefix + "/", idle_s, revisions=True)
            for event in self._history:
                if event["revision"] >= start_revision:
                    w.push(dict(event))
            self._watchers.add(w)
        return self._follow(w)

    def _follow(self, w: _MemoryWatch) -> Iterator[ChangeBatch]:
        for event in w:
            rev = int(event["revision"])
            change = self.keys.decode_or_absent(event["key"], event.get("value") if event["type"] == "put" else None, rev)
            yield ChangeBatch(rev, (change,) if change is not None else ())

    def watch(self, what: str | Sequence[str], *, timeout_s: float) -> Iterator[Mapping[str, str]]:
        """Events under ``<prefix>/<what>`` (a plain string prefix: end ``what`` with ``/`` to
        keep ``nodes/a`` from matching ``nodes/ab``; a sequence of them watches each), each
        ``{"type", "key"}`` plus ``"value"`` (the record's JSON) for puts, until ``timeout_s``
        passes without one. Events after this call are seen even if iteration starts later.

        Raises:
            ValueError: no prefix given.
        """
        whats = [what] if isinstance(what, str) else list(what)
        if not whats:
            raise ValueError("watch needs at least one prefix")
        w = _MemoryWatch(self, tuple(self.keys.folder(x) for x in whats), timeout_s)
        with self._lock:
            self._watchers.add(w)
        return w

    def stats(self) -> dict[str, int]:
        """Counters (the etcd store's names; always 0 here)."""
        return {"requests": 0, "retries": 0, "txn_conflicts": 0}
