"""The allocation rules both state stores apply, as pure functions.

A reservation, release or resize is decided by a plan (:func:`plan_reserve`, :func:`plan_release`,
:func:`plan_resize`): every check, and every record the change writes, computed from what the store
holds, so that the in-memory store and the etcd store decide identically; each store then applies
the plan (the etcd store as one transaction that compares on what the plan read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from iadeep.state._protocol import (
    AllocationConflict,
)
from iadeep.state._records import (
    Assignment,
    GpuState,
    JobRecord,
    NodeInventory,
    RecordError,
    TuningRequest,
    UNDO_OUTCOMES,
    UndoRecord,
    from_json,
    to_json,
)

from iadeep.state._keys import check_name

__all__ = ["MEM_EPSILON_GIB", "reservation_gpu_limit", "checked_undo", "settled_undo", "ReservePlan", "ReleasePlan",
           "ResizePlan", "plan_reserve", "plan_release", "plan_resize", "check_resize", "check_gpu_count", "GangMember",
           "plan_gang", "gang_ops"]


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
        RecordError: an outcome other than ``evicted``, ``gone`` or ``kept``.
    """
    if outcome not in UNDO_OUTCOMES or outcome == "pending":
        raise RecordError(f"settle_undo: outcome must be one of {', '.join(UNDO_OUTCOMES[1:])}, got {outcome!r}")
    return msgspec.structs.replace(record, outcome=outcome, settled_at=float(at))


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
class GangMember:
    """One member of a gang reservation (:meth:`StateStore.reserve_gang`).

    Attributes:
        job: the member's pod (``job.num_gpus == len(gpus)``; ``job.gang`` names the gang).
        node: the node of all its GPUs.
        gpus: GPU indices on ``node``.
    """

    job: JobRecord
    node: str
    gpus: tuple[int, ...]


def gang_ops(members: Sequence[GangMember]) -> int:
    """Operations of a gang's reservation in one transaction: per member ``3 n_i + 2`` (its
    GPUs' assignments, states and tuning requests; its job and reservation records), as
    :func:`reservation_gpu_limit` counts one pod's."""
    return sum(3 * len(m.gpus) + RESERVE_OPS_FIXED for m in members)


def plan_gang(
    members: Sequence[GangMember],
    *,
    inventories: Mapping[str, NodeInventory | None],
    states: Mapping[tuple[str, int], GpuState | None],
    held: Mapping[str, Sequence[Assignment] | None],
    colocation_limit: int,
    now_s: float,
    max_txn_ops: int,
) -> list[ReservePlan]:
    """Decide a gang's reservations, all or none: :func:`plan_reserve` for each member in turn,
    each seeing the GPU states the members before it made (two members on one node, or on one
    GPU, count against each other's memory and co-location limit).

    Args:
        members: the gang, in member order (distinct pod UIDs, at least one).
        inventories: node -> its inventory (absent or ``None``: not published).
        states: ``(node, gpu)`` -> its state (absent or ``None``: unused).
        held: pod UID -> what it holds already (any reservation is a conflict).
        colocation_limit, now_s: as :func:`plan_reserve`.
        max_txn_ops: the most operations of one transaction (etcd's ``--max-txn-ops``).

    Returns:
        One plan per member, in member order; the GPU states of a GPU two members share are the
        later member's (the last plan's state of a GPU is what the transaction writes).

    Raises:
        AllocationConflict: no member, a pod named twice, more operations than ``max_txn_ops``
            (:func:`gang_ops`), or any member's :func:`plan_reserve` conflict (the message names
            the member).
        RecordError: a malformed job or node name.
    """
    if not members:
        raise AllocationConflict("a gang reservation needs at least one member")
    uids = [m.job.pod_uid for m in members]
    if len(set(uids)) != len(uids):
        raise AllocationConflict(f"gang {members[0].job.gang!r}: a pod is named twice among {uids}")
    ops = gang_ops(members)
    if ops > max_txn_ops:
        raise AllocationConflict(
            f"gang {members[0].job.gang!r}: {len(members)} pods, {sum(len(m.gpus) for m in members)} GPUs are "
            f"{ops} operations in one etcd transaction; etcd's --max-txn-ops is {max_txn_ops} (IADEEP_ETCD_MAX_TXN_OPS)")
    current = dict(states)
    plans = []
    for k, m in enumerate(members):
        try:
            plan = plan_reserve(m.job, m.node, m.gpus, inventory=inventories.get(m.node),
                                states={g: current.get((m.node, int(g))) for g in m.gpus},
                                held=held.get(m.job.pod_uid), colocation_limit=colocation_limit, now_s=now_s)
        except AllocationConflict as exc:
            raise AllocationConflict(f"gang {m.job.gang!r} member {k} ({m.job.pod_uid}): {exc}", held=exc.held) from None
        for st in plan.gpu_states:
            current[(st.node, st.gpu)] = st
        plans.append(plan)
    return plans


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
        out[pod] = [msgspec.structs.replace(a, mem_gib=float(size)) if a is mine[0] else a for a in held[pod]]  # type: ignore[index]
    if mem > capacity + MEM_EPSILON_GIB:
        asked = ", ".join(f"{p} {v:g} GiB" for p, v in sizes.items())
        raise AllocationConflict(f"{where}: not enough memory for {asked}: {mem:g} of {capacity:g} GiB in all")
    return ResizePlan(out, GpuState(node, gpu, max(mem, 0.0), state.pods))


# -- the store --------------------------------------------------------------------------------
