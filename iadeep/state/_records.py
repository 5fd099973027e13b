"""Typed records kept in the state store (etcd), serialised as JSON.

Key schema (all under one configurable prefix, default ``/iadeep``; ``<p>`` below), with each
record's owner (the only writer that creates it) and its end of life. Nothing grows with the
number of pods that ever ran: a pod's records end with its reservation, a GPU's with its last
pod, a node's with its device plugin's lease.

==========================================  =====================================  ===================================
key: value                                  owner (writer)                         end of life
==========================================  =====================================  ===================================
``<p>/nodes/<node>``:                       device plugin (``put_inventory``,      its lease expires when the plugin
:class:`NodeInventory`                      on an etcd lease)                      stops renewing it
``<p>/jobs/<pod_uid>``:                     extender (``reserve``, one             deleted by ``release`` (same
:class:`JobRecord`                          transaction with the reservation)      transaction), or ``delete_job``
``<p>/reservations/<pod_uid>``: what the    extender (``reserve``)                 deleted by ``release``; replaced
pod holds, with a nonce (see _memory)                                              by a superseding ``reserve``
``<p>/assignments/<node>/<gpu>/<pod_uid>``  extender (``reserve``)                 deleted by ``release``
:class:`Assignment` (one per pod per GPU)
``<p>/gpus/<node>/<gpu>``: :class:`GpuState`  ``reserve`` / ``release``            deleted by the ``release`` that
(memory used, co-located pods; allocation                                          leaves the GPU empty (absent =
transactions compare on its mod revision)                                          unused)
``<p>/measurements/<pod_uid>/<seq>``:       the job's reporter (coordinator,       deleted with the job record
:class:`Measurement` (throughput reported)  ``add_measurement``)                   (``release`` / ``delete_job``)
``<p>/tuning/<node>/<gpu>``:                ``reserve`` / ``release`` (the GPU's   cleared by ``complete_tuning``, or
:class:`TuningRequest` (co-location set     co-location set changed; the           by the ``release`` that leaves
changed; the coordinator's cue)             coordinator's cue)                     the GPU empty
``<p>/samples/<seq>``:                      tuner (``add_samples``)                kept: learned knowledge meant to
:class:`InterferenceSampleRecord`                                                  survive restarts (one per tuning
                                                                                   trial, not per pod; see README)
``<p>/batchsizes/<pod_uid>``:               node coordinator (the final or trial   deleted with the job record
:class:`BatchSizeAssignment`                size; watched by the job's SDK)        (``release`` / ``delete_job``)
``<p>/workloads/<pod_uid>``:                the job's SDK (``iadeep.workload``,    deleted with the job record
:class:`WorkloadStatus`                     at start and end)                      (``release`` / ``delete_job``)
``<p>/checkpoints/<job_key>``:              whoever ends a job's pod before its    deleted when the job's last pod
:class:`JobCheckpoint` (a job's progress    work is done (the GPU emulator; the    succeeds (``delete_checkpoint``)
kept across its pods, by Job)               SDK's checkpoint), read by the
                                            replacement pod
``<p>/placement``:                          extender (``put_placement``, at each   kept (overwritten by the next
:class:`PlacementPolicy` (its policy and    start)                                 start); the device plugins read it
co-location limit: the device plugins'
gpu-count slots per GPU)
``<p>/undos/<pod_uid>``:                    node coordinator (``put_undo``, at the  kept: the ban it carries must
:class:`UndoRecord` (a session undid its    end of a session whose best measured   survive extender restarts; bounded
GPU's co-location: the pair's ban and the   progress is below ``undo_below``);     by the pairs of job types (a
pod to evict)                               the extender settles it                banned pair is never formed again)
                                            (``settle_undo``) once it evicted
``<p>/locks/<name>``: etcd lock keys        (none written today)                   attached to the holder's lease
==========================================  =====================================  ===================================

Releases are made by one path (the extender's; see ``iadeep/extender``), for pods that are gone,
finished or whose bind failed. etcd keeps old revisions of deleted keys until it is compacted:
see the README (State store) for compaction and defragmentation in a long-running deployment.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

import msgspec

__all__ = [
    "GpuInfo",
    "NodeInventory",
    "JobRecord",
    "Assignment",
    "GpuState",
    "Measurement",
    "TuningRequest",
    "InterferenceSampleRecord",
    "BatchSizeAssignment",
    "WorkloadStatus",
    "JobCheckpoint",
    "WORKLOAD_STATES",
    "PlacementPolicy",
    "SESSION_KINDS",
    "BannedType",
    "UndoRecord",
    "UNDO_OUTCOMES",
    "RecordError",
    "to_json",
    "from_json",
]

R = TypeVar("R")


class RecordError(ValueError):
    """A stored or submitted record is malformed; the message names the record type and field."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the device plugin sees it.

    Attributes:
        index: the GPU's index on its node (0-based).
        mem_gib: total memory (GiB).
        uuid: the device's UUID (``GPU-...`` from NVML), empty when unknown.
        model: the GPU model as the cluster names it (e.g. ``"V100M32"``, ``"T4"``), empty when
            unknown; pods may require models (:attr:`JobRecord.gpu_models`).
    """

    index: int
    mem_gib: float
    uuid: str = ""
    model: str = ""


@dataclass(frozen=True)
class NodeInventory:
    """GPUs of one node, published by that node's device plugin.

    Attributes:
        node: the node's name.
        gpus: its GPUs.
        allocates: the publisher is a device plugin whose ``Allocate`` turns each pod it serves
            from bind phase ``allocating`` to ``allocated`` (``iadeep deviceplugin``): the
            extender then binds one GPU pod at a time to the node (:mod:`iadeep.extender._admission`).
            False for inventories published without a kubelet behind them (the GPU emulator's
            kwok nodes), where pods stay ``allocating``.
    """

    node: str
    gpus: tuple[GpuInfo, ...]
    allocates: bool = False


@dataclass(frozen=True)
class JobRecord:
    """A GPU job (one pod) known to the system.

    Attributes:
        pod_uid / namespace / name: the pod.
        model: Gavel model family (e.g. "ResNet-50"); batch_size: submitted batch size.
        num_gpus: GPUs the pod needs; mem_gib: memory per GPU (GiB).
        remaining_s: remaining work at dedicated speed (s), as estimated from reported progress.
        submitted_at: submission time (Unix seconds).
        gpu_models: GPU models the pod accepts (empty: any).
        gang: the gang the pod is a member of (its ``iadeep.io/gang`` label; with ``namespace``
            it names the gang, :data:`iadeep.podspec.GANG_LABEL`); empty: a pod of its own. The
            members' reservations are made in one transaction (:meth:`StateStore.reserve_gang`)
            and released together.
    """

    pod_uid: str
    namespace: str
    name: str
    model: str
    batch_size: int
    num_gpus: int
    mem_gib: float
    remaining_s: float = 0.0
    submitted_at: float = 0.0
    gpu_models: tuple[str, ...] = ()
    gang: str = ""


@dataclass(frozen=True)
class Assignment:
    """A pod's reservation on one GPU."""

    pod_uid: str
    node: str
    gpu: int
    mem_gib: float
    assumed_at: float


@dataclass(frozen=True)
class GpuState:
    """Aggregate of the assignments on one GPU (kept consistent by transactions).

    ``pods`` are in reservation order (oldest first): a reservation appends, a release removes
    and keeps the order of the rest. The extender's view fills a GPU's co-location slots in this
    order, which is the slot contract of :class:`iadeep.policy.ClusterView`.
    """

    node: str
    gpu: int
    mem_used_gib: float = 0.0
    pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measurement:
    """Throughput a job reported (steps/s) at a batch size, at a time (Unix seconds).

    Attributes:
        samples: samples the job has processed since it started (cumulative; 0 when unknown).
    """

    pod_uid: str
    steps_per_s: float
    batch_size: int
    at: float
    samples: int = 0


@dataclass(frozen=True)
class TuningRequest:
    """A GPU whose co-location set changed and needs a tuning session."""

    node: str
    gpu: int
    pods: tuple[str, ...]
    requested_at: float


@dataclass(frozen=True)
class InterferenceSampleRecord:
    """A learned interference sample: ``job`` ran at ``normalised_throughput`` sharing with ``partner``.

    Job types are given as model family and batch size.
    """

    job_model: str
    job_batch_size: int
    partner_model: str
    partner_batch_size: int
    normalised_throughput: float
    at: float = field(default=0.0)


@dataclass(frozen=True)
class BatchSizeAssignment:
    """The batch size a job is to train at from its next step on (set by the node coordinator).

    Attributes:
        pod_uid: the job's pod.
        batch_size: samples per step (per GPU).
        session: the tuning session that set it (``""``: set outside a session).
        trial: the session's trial number (-1 for a session's final configuration).
        at: when it was set (Unix seconds); measurements after it are at this batch size.
    """

    pod_uid: str
    batch_size: int
    session: str = ""
    trial: int = -1
    at: float = 0.0


#: States of :class:`WorkloadStatus`.
WORKLOAD_STATES = ("running", "completed", "failed")


@dataclass(frozen=True)
class WorkloadStatus:
    """What a job's SDK says about itself (written at registration and at the end).

    Attributes:
        pod_uid: the job's pod.
        state: one of :data:`WORKLOAD_STATES`.
        batch_size: the batch size it started (or ended) at.
        samples: samples processed so far (cumulative).
        started_at / updated_at: Unix seconds.
    """

    pod_uid: str
    state: str
    batch_size: int
    samples: int = 0
    started_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True)
class JobCheckpoint:
    """A job's progress kept across its pods (an evicted pod's Job creates a replacement pod,
    which resumes from here): keyed by the job, not the pod.

    Attributes:
        job_key: the job (``<namespace>.<Job name>``; one key segment, no ``/``).
        remaining_s: work left at the last checkpoint (seconds at dedicated speed, as
            :attr:`JobRecord.remaining_s`), before the restart cost.
        evictions: pods of the job that ended before its work was done.
        updated_at: Unix seconds.
        first_started_at: when the job's first pod started its work (Unix seconds; 0: unknown).
    """

    job_key: str
    remaining_s: float
    evictions: int = 1
    updated_at: float = 0.0
    first_started_at: float = 0.0


@dataclass(frozen=True)
class PlacementPolicy:
    """How the extender places jobs, as the node side needs to know it (one record per cluster).

    Attributes:
        policy: the registered policy's name (:func:`iadeep.policy.make_policy`).
        colocation_limit: jobs per GPU the extender allows (its setting, else the policy's own
            limit): the device plugins advertise this many ``iadeep.io/gpu-count`` slots per GPU.
        at: when the extender published it (Unix seconds).
        undo_below: the policy's undo threshold (its ``undo_below``; 0: the policy never undoes):
            the node coordinators undo a session whose best measured summed progress is below it
            (:func:`iadeep.policy.undo_rule`, :class:`UndoRecord`). A record without the field
            reads as 0.
        session: what the node coordinators run after a GPU's co-location set changed, one of
            :data:`SESSION_KINDS`: ``tune`` (IADeep's batch-size tuning with the tuner) or
            ``profile`` (one measurement round at the jobs' current batch sizes, no tuner: Gandiva's
            profile of a packing). A record without the field reads as ``tune``.
    """

    policy: str
    colocation_limit: int
    at: float = 0.0
    undo_below: float = 0.0
    session: str = "tune"


#: Kinds of node session (:attr:`PlacementPolicy.session`): batch-size tuning, or one profile round.
SESSION_KINDS = ("tune", "profile")


@dataclass(frozen=True)
class BannedType:
    """A job type as the live system names it: Gavel model family and submitted batch size."""

    model: str
    batch_size: int


#: States of :class:`UndoRecord`: the extender has not carried it out yet, evicted the pod, or
#: found the pod gone (it had ended or been replaced: nothing to evict).
UNDO_OUTCOMES = ("pending", "evicted", "gone")


@dataclass(frozen=True)
class UndoRecord:
    """A tuning session undid its GPU's co-location (:func:`iadeep.policy.undo_rule`: its best
    measured summed progress was below ``undo_below``): the job types are banned from sharing a
    GPU with each other, and the newest pod is to be evicted (its Job replaces it).

    Written by the node coordinator at the end of the session (key ``undos/<pod_uid>``: one per
    evicted pod, so a coordinator that re-runs the session after a crash writes the same key);
    read by the extender, which applies the ban to its policy (at start, from the listing, and as
    records arrive) and evicts the pod through the Eviction API, then settles the record
    (``outcome``). The eviction names the pod's UID, so a record processed again (an extender
    restart before it settled it) can never evict another pod, e.g. the Job's replacement.

    Attributes:
        pod_uid / namespace / name: the pod to evict (the newest on the GPU).
        node / gpu: the GPU (index on its node).
        types: the job types of the GPU's pods, in reservation order (two or more): none of them
            is to share a GPU with another of them again.
        progress: the session's best measured summed progress rate (dimensionless; >= 0).
        undo_below: the threshold it was judged against (> ``progress``).
        session: the coordinator's tuning session (``<node>.<gpu>.<requested_at µs>``).
        reason: one line for humans.
        at: when the coordinator recorded it (Unix seconds).
        outcome: one of :data:`UNDO_OUTCOMES` (``pending`` until the extender settles it).
        settled_at: when the extender settled it (Unix seconds; 0 while pending).
    """

    pod_uid: str
    namespace: str
    name: str
    node: str
    gpu: int
    types: tuple[BannedType, ...]
    progress: float
    undo_below: float
    session: str = ""
    reason: str = ""
    at: float = 0.0
    outcome: str = "pending"
    settled_at: float = 0.0


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` for records (dataclasses, tuples and JSON scalars), without its
    deep copies: a third of the cost, and reservations serialise half a dozen records each."""
    names = _FIELDS.get(type(value))
    if names is None:
        if not is_dataclass(value):
            return [_plain(v) for v in value] if isinstance(value, tuple | list) else value
        names = _FIELDS[type(value)] = tuple(f.name for f in fields(value))
    return {n: _plain(getattr(value, n)) for n in names}


def to_json(record: Any) -> str:
    """Serialise a record dataclass to compact JSON (keys sorted, so that equal records give
    equal bytes: the etcd store compares stored values with it)."""
    return json.dumps(_plain(record), separators=(",", ":"), sort_keys=True)


def from_json(cls: type[R], text: str | bytes) -> R:
    """Parse JSON into ``cls``, checking every field's type (msgspec), that numbers are finite,
    and the record's own rules (:data:`_RULES`).

    Raises:
        RecordError: invalid JSON, a missing, unknown or mistyped field, a non-finite number, or
            a broken rule; the message names ``cls`` and the field (e.g. ``$.gpus[0].mem_gib``).
    """
    try:
        d = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise RecordError(f"{cls.__name__}: invalid JSON: {exc}") from None
    if not isinstance(d, dict):
        raise RecordError(f"{cls.__name__}: expected a JSON object")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = set(d) - names
    if unknown:
        raise RecordError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
    where = _non_finite(d, "$")
    if where:
        raise RecordError(f"{cls.__name__}: {where}: not a finite number")
    try:
        record = msgspec.convert(d, cls)
    except msgspec.ValidationError as exc:
        raise RecordError(f"{cls.__name__}: {exc}") from None
    for check in _RULES.get(cls, ()):
        problem = check(record)
        if problem:
            raise RecordError(f"{cls.__name__}: {problem}")
    return record


def _non_finite(value: Any, where: str) -> str | None:
    """Path of the first NaN or infinite number in parsed JSON (``1e400`` parses as infinity)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, dict):
        for k, v in value.items():
            found = _non_finite(v, f"{where}.{k}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return None


def _inventory_rules(inv: NodeInventory) -> str | None:
    indexes = [g.index for g in inv.gpus]
    if len(set(indexes)) != len(indexes):
        return f"$.gpus: GPU indexes repeat: {indexes}"
    for i, g in enumerate(inv.gpus):
        if g.index < 0 or g.mem_gib <= 0:
            return f"$.gpus[{i}]: index must be >= 0 and mem_gib > 0, got {g.index} and {g.mem_gib}"
    return None


def _gpu_rules(st: GpuState) -> str | None:
    if st.gpu < 0 or st.mem_used_gib < 0:
        return f"gpu must be >= 0 and mem_used_gib >= 0, got {st.gpu} and {st.mem_used_gib}"
    if len(set(st.pods)) != len(st.pods):
        return f"$.pods: a pod is listed twice: {list(st.pods)}"
    return None


def _job_rules(job: JobRecord) -> str | None:
    if job.batch_size < 1 or job.num_gpus < 1 or job.mem_gib <= 0 or job.remaining_s < 0:
        return "batch_size and num_gpus must be >= 1, mem_gib > 0, remaining_s >= 0"
    return None


def _batch_rules(a: BatchSizeAssignment) -> str | None:
    return None if a.batch_size >= 1 else f"$.batch_size: must be >= 1, got {a.batch_size}"


def _measurement_rules(m: Measurement) -> str | None:
    if m.steps_per_s < 0 or m.batch_size < 1 or m.samples < 0:
        return "steps_per_s and samples must be >= 0, batch_size >= 1"
    return None


def _workload_rules(w: WorkloadStatus) -> str | None:
    if w.state not in WORKLOAD_STATES:
        return f"$.state: must be one of {', '.join(WORKLOAD_STATES)}, got {w.state!r}"
    if w.batch_size < 1 or w.samples < 0:
        return "batch_size must be >= 1 and samples >= 0"
    return None


def _checkpoint_rules(c: JobCheckpoint) -> str | None:
    if c.remaining_s < 0 or c.evictions < 0:
        return "remaining_s and evictions must be >= 0"
    return None


def _placement_rules(p: PlacementPolicy) -> str | None:
    if p.colocation_limit < 1:
        return f"$.colocation_limit: must be >= 1, got {p.colocation_limit}"
    if p.session not in SESSION_KINDS:
        return f"$.session: must be one of {', '.join(SESSION_KINDS)}, got {p.session!r}"
    return None if p.undo_below >= 0 else f"$.undo_below: must be >= 0, got {p.undo_below}"


def _undo_rules(u: UndoRecord) -> str | None:
    for name in ("pod_uid", "node", "namespace", "name"):
        value = getattr(u, name)
        if not value or "/" in value:
            return f"$.{name}: must be a non-empty name without '/', got {value!r}"
    if u.gpu < 0:
        return f"$.gpu: must be >= 0, got {u.gpu}"
    if len(u.types) < 2:
        return f"$.types: an undone co-location has two or more job types, got {len(u.types)}"
    for i, t in enumerate(u.types):
        if not t.model or t.batch_size < 1:
            return f"$.types[{i}]: model must be non-empty and batch_size >= 1, got {t.model!r} and {t.batch_size}"
    if not 0 <= u.progress < u.undo_below:
        return f"$.progress: must be >= 0 and below undo_below ({u.undo_below}), got {u.progress}"
    if u.outcome not in UNDO_OUTCOMES:
        return f"$.outcome: must be one of {', '.join(UNDO_OUTCOMES)}, got {u.outcome!r}"
    return None


#: Rules a parsed record must keep beyond its field types (each returns what is wrong, or None).
_RULES: dict[type, tuple[Callable[[Any], str | None], ...]] = {
    NodeInventory: (_inventory_rules,),
    GpuState: (_gpu_rules,),
    JobRecord: (_job_rules,),
    BatchSizeAssignment: (_batch_rules,),
    Measurement: (_measurement_rules,),
    WorkloadStatus: (_workload_rules,),
    JobCheckpoint: (_checkpoint_rules,),
    PlacementPolicy: (_placement_rules,),
    UndoRecord: (_undo_rules,),
}
