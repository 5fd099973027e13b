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
pod holds, with a nonce (see _keys)                                                by a superseding ``reserve``
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
``<p>/arrivals/<job>``:                     extender (``put_arrivals``, when its   deleted by ``prune_arrivals``
:class:`ArrivalRecord` (when the policy     policy first meets a job)              after its ``keep_until`` (a
first met a job, and its needs)                                                    day for a one-GPU job: bounded
                                                                                   by a day's arrivals)
``<p>/locks/<name>``: etcd lock keys        (none written today)                   attached to the holder's lease
==========================================  =====================================  ===================================

Releases are made by one path (the extender's; see ``iadeep/extender``), for pods that are gone,
finished or whose bind failed. etcd keeps old revisions of deleted keys until it is compacted:
see the README (State store) for compaction and defragmentation in a long-running deployment.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

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
    "ArrivalRecord",
    "RecordError",
    "MAX_INT",
    "MAX_NORMALISED_THROUGHPUT",
    "to_json",
    "from_json",
]

R = TypeVar("R")


class RecordError(ValueError):
    """A stored or submitted record is malformed; the message names the record type and field."""


# Field constraints, checked when a record is decoded (:func:`from_json`; msgspec checks
# ``Meta`` constraints on decoding only, not in ``__init__``). A rule over more than one value
# (indexes that repeat, progress below a threshold) is the record's ``__post_init__``, which runs
# both when it is built in code and when it is decoded.
#: The largest integer a record holds: JSON's interoperable range (RFC 8259, Sec. 6: integers
#: within +-(2**53 - 1) are exact wherever numbers are IEEE 754 doubles). It also fits the int64
#: arrays the services build from records, so no stored record can overflow them.
MAX_INT = 2**53 - 1
#: The largest normalised throughput a sample may report (dimensionless): a job's steps/s beside a
#: partner over its isolated steps/s on the interference table's GPU. A faster GPU than the
#: table's runs a job a few times faster; a value beyond this is a unit or measurement error, which
#: would outweigh every other sample of the learner's least-squares fit.
MAX_NORMALISED_THROUGHPUT = 8.0
NonNegInt = Annotated[int, Meta(ge=0, le=MAX_INT)]
PosInt = Annotated[int, Meta(ge=1, le=MAX_INT)]
NonNegFloat = Annotated[float, Meta(ge=0)]
PosFloat = Annotated[float, Meta(gt=0)]
KeyName = Annotated[str, Meta(pattern=r"^[^/]+$")]
"""One key segment: a non-empty name without ``/``."""

WorkloadState = Literal["running", "completed", "failed"]
SessionKind = Literal["tune", "profile"]
UndoOutcome = Literal["pending", "evicted", "gone", "kept"]


class _Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Base of the stored records: immutable and hashable, equal when their fields are equal,
    built positionally in field order or by keyword; a field a decoded record does not have is
    an error. Copies with changed fields: ``msgspec.structs.replace``."""


class GpuInfo(_Record):
    """One GPU as the device plugin sees it.

    Attributes:
        index: the GPU's index on its node (0-based; >= 0).
        mem_gib: total memory (GiB; > 0).
        uuid: the device's UUID (``GPU-...`` from NVML), empty when unknown.
        model: the GPU model as the cluster names it (e.g. ``"V100M32"``, ``"T4"``), empty when
            unknown; pods may require models (:attr:`JobRecord.gpu_models`).
    """

    index: NonNegInt
    mem_gib: PosFloat
    uuid: str = ""
    model: str = ""


class NodeInventory(_Record):
    """GPUs of one node, published by that node's device plugin.

    Attributes:
        node: the node's name.
        gpus: its GPUs (their indexes distinct).
        allocates: the publisher is a device plugin whose ``Allocate`` turns each pod it serves
            from bind phase ``allocating`` to ``allocated`` (``iadeep deviceplugin``): the
            extender then binds one GPU pod at a time to the node (:mod:`iadeep.extender._admission`).
            False for inventories published without a kubelet behind them (the GPU emulator's
            kwok nodes), where pods stay ``allocating``.

    Raises:
        RecordError: a GPU index repeats.
    """

    node: str
    gpus: tuple[GpuInfo, ...]
    allocates: bool = False

    def __post_init__(self) -> None:
        indexes = [g.index for g in self.gpus]
        if len(set(indexes)) != len(indexes):
            raise RecordError(f"NodeInventory: $.gpus: GPU indexes repeat: {indexes}")


class JobRecord(_Record):
    """A GPU job (one pod) known to the system.

    Attributes:
        pod_uid / namespace / name: the pod.
        model: Gavel model family (e.g. "ResNet-50"); batch_size: submitted batch size (>= 1).
        num_gpus: GPUs the pod needs (>= 1); mem_gib: memory per GPU (GiB; > 0).
        remaining_s: remaining work at dedicated speed (s; >= 0), as estimated from reported progress.
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
    batch_size: PosInt
    num_gpus: PosInt
    mem_gib: PosFloat
    remaining_s: NonNegFloat = 0.0
    submitted_at: float = 0.0
    gpu_models: tuple[str, ...] = ()
    gang: str = ""


class Assignment(_Record):
    """A pod's reservation on one GPU (``mem_gib``: GiB; ``assumed_at``: Unix seconds)."""

    pod_uid: str
    node: str
    gpu: NonNegInt
    mem_gib: float
    assumed_at: float


class GpuState(_Record):
    """Aggregate of the assignments on one GPU (kept consistent by transactions).

    ``pods`` are in reservation order (oldest first): a reservation appends, a release removes
    and keeps the order of the rest. The extender's view fills a GPU's co-location slots in this
    order, which is the slot contract of :class:`iadeep.policy.ClusterView`. ``gpu`` and
    ``mem_used_gib`` (GiB) are >= 0.

    Raises:
        RecordError: a pod is listed twice.
    """

    node: str
    gpu: NonNegInt
    mem_used_gib: NonNegFloat = 0.0
    pods: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.pods)) != len(self.pods):
            raise RecordError(f"GpuState: $.pods: a pod is listed twice: {list(self.pods)}")


class Measurement(_Record):
    """Throughput a job reported (steps/s; >= 0) at a batch size (>= 1), at a time (Unix seconds).

    Attributes:
        samples: samples the job has processed since it started (cumulative; 0 when unknown).
    """

    pod_uid: str
    steps_per_s: NonNegFloat
    batch_size: PosInt
    at: float
    samples: NonNegInt = 0


class TuningRequest(_Record):
    """A GPU whose co-location set changed and needs a tuning session (``requested_at``: Unix s)."""

    node: str
    gpu: NonNegInt
    pods: tuple[str, ...]
    requested_at: float


class InterferenceSampleRecord(_Record):
    """A learned interference sample: ``job`` ran at ``normalised_throughput`` sharing with ``partner``.

    Job types are given as model family and batch size (>= 1); ``normalised_throughput`` is in
    ``[0, MAX_NORMALISED_THROUGHPUT]`` (a decoded sample outside it is malformed, so a reader drops
    it instead of teaching the learner from it); ``at``: Unix seconds.
    """

    job_model: str
    job_batch_size: PosInt
    partner_model: str
    partner_batch_size: PosInt
    normalised_throughput: Annotated[float, Meta(ge=0, le=MAX_NORMALISED_THROUGHPUT)]
    at: float = 0.0


class BatchSizeAssignment(_Record):
    """The batch size a job is to train at from its next step on (set by the node coordinator).

    Attributes:
        pod_uid: the job's pod.
        batch_size: samples per step (per GPU; >= 1).
        session: the tuning session that set it (``""``: set outside a session).
        trial: the session's trial number (-1 for a session's final configuration).
        at: when it was set (Unix seconds); measurements after it are at this batch size.
    """

    pod_uid: str
    batch_size: PosInt
    session: str = ""
    trial: Annotated[int, Meta(ge=-1, le=MAX_INT)] = -1
    at: float = 0.0


#: States of :class:`WorkloadStatus`.
WORKLOAD_STATES: tuple[str, ...] = get_args(WorkloadState)


class WorkloadStatus(_Record):
    """What a job's SDK says about itself (written at registration and at the end).

    Attributes:
        pod_uid: the job's pod.
        state: one of :data:`WORKLOAD_STATES`.
        batch_size: the batch size it started (or ended) at (>= 1).
        samples: samples processed so far (cumulative; >= 0).
        started_at / updated_at: Unix seconds.
    """

    pod_uid: str
    state: WorkloadState
    batch_size: PosInt
    samples: NonNegInt = 0
    started_at: float = 0.0
    updated_at: float = 0.0


class JobCheckpoint(_Record):
    """A job's progress kept across its pods (an evicted pod's Job creates a replacement pod,
    which resumes from here): keyed by the job, not the pod.

    Attributes:
        job_key: the job (``<namespace>.<Job name>``; one key segment, no ``/``).
        remaining_s: work left at the last checkpoint (seconds at dedicated speed, as
            :attr:`JobRecord.remaining_s`; >= 0), before the restart cost.
        evictions: pods of the job that ended before its work was done (>= 0).
        updated_at: Unix seconds.
        first_started_at: when the job's first pod started its work (Unix seconds; 0: unknown).
    """

    job_key: str
    remaining_s: NonNegFloat
    evictions: NonNegInt = 1
    updated_at: float = 0.0
    first_started_at: float = 0.0


#: Kinds of node session (:attr:`PlacementPolicy.session`): batch-size tuning, or one profile round.
SESSION_KINDS: tuple[str, ...] = get_args(SessionKind)


class PlacementPolicy(_Record):
    """How the extender places jobs, as the node side needs to know it (one record per cluster).

    Attributes:
        policy: the registered policy's name (:func:`iadeep.policy.make_policy`).
        colocation_limit: jobs per GPU the extender allows (its setting, else the policy's own
            limit; >= 1): the device plugins advertise this many ``iadeep.io/gpu-count`` slots
            per GPU.
        at: when the extender published it (Unix seconds).
        undo_below: the policy's undo threshold (its ``undo_below``; >= 0; 0: the policy never
            undoes): the node coordinators undo a session whose best measured summed progress is
            below it (:func:`iadeep.policy.undo_rule`, :class:`UndoRecord`). A record without the
            field reads as 0.
        session: what the node coordinators run after a GPU's co-location set changed, one of
            :data:`SESSION_KINDS`: ``tune`` (IADeep's batch-size tuning with the tuner) or
            ``profile`` (one measurement round at the jobs' current batch sizes, no tuner: Gandiva's
            profile of a packing). A record without the field reads as ``tune``.
    """

    policy: str
    colocation_limit: PosInt
    at: float = 0.0
    undo_below: NonNegFloat = 0.0
    session: SessionKind = "tune"


class BannedType(_Record):
    """A job type as the live system names it: Gavel model family (non-empty) and submitted
    batch size (>= 1)."""

    model: Annotated[str, Meta(min_length=1)]
    batch_size: PosInt


#: States of :class:`UndoRecord`: the extender has not carried it out yet, evicted the pod, or
#: found the pod gone (it had ended or been replaced: nothing to evict).
UNDO_OUTCOMES: tuple[str, ...] = get_args(UndoOutcome)


class UndoRecord(_Record):
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
        pod_uid / namespace / name: the pod to evict (the newest on the GPU; non-empty names
            without ``/``).
        node / gpu: the GPU (index on its node; >= 0).
        types: the job types of the GPU's pods, in reservation order (two or more): none of them
            is to share a GPU with another of them again.
        progress: the session's best measured summed progress rate (dimensionless; >= 0).
        undo_below: the threshold it was judged against (> ``progress``).
        session: the coordinator's tuning session (``<node>.<gpu>.<requested_at µs>``).
        reason: one line for humans.
        at: when the coordinator recorded it (Unix seconds).
        outcome: one of :data:`UNDO_OUTCOMES` (``pending`` until the extender settles it).
        settled_at: when the extender settled it (Unix seconds; 0 while pending).

    Raises:
        RecordError: ``progress`` not in ``[0, undo_below)``.
    """

    pod_uid: KeyName
    namespace: KeyName
    name: KeyName
    node: KeyName
    gpu: NonNegInt
    types: Annotated[tuple[BannedType, ...], Meta(min_length=2)]
    progress: float
    undo_below: float
    session: str = ""
    reason: str = ""
    at: float = 0.0
    outcome: UndoOutcome = "pending"
    settled_at: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.progress < self.undo_below:
            raise RecordError(f"UndoRecord: $.progress: must be >= 0 and below undo_below ({self.undo_below}), "
                              f"got {self.progress}")


class ArrivalRecord(_Record):
    """When the extender's policy first met a job (its reserve phase was asked about it), so
    that a restarted extender prices arrivals (:meth:`iadeep.policy.iadeep.IADeep.arrival_cost_s`)
    from the same log as before the restart.

    Attributes:
        job: the policy's job id (the asking pod's UID; a key segment).
        at: when it was first met (Unix seconds; >= 0).
        num_gpus: GPUs the job needs at once (a gang's: all its pods').
        model / batch_size: its job type (the pod's model family and batch size).
        mem_gib: memory it reserves on each GPU (GiB; > 0).
        gpu_milli: the share of a GPU it needs (1/1000 GPU); ``None``: not a share request.
        keep_until: when the record is of no more use (Unix seconds; >= ``at``): a one-GPU
            job's once it leaves the policy's window, a gang's once its price has lapsed too.
    """

    job: KeyName
    at: NonNegFloat
    keep_until: NonNegFloat
    num_gpus: PosInt
    model: str
    batch_size: PosInt
    mem_gib: PosFloat
    gpu_milli: Annotated[float, Meta(gt=0, le=1000)] | None = None

    def __post_init__(self) -> None:
        if self.keep_until < self.at:
            raise RecordError(f"ArrivalRecord: $.keep_until: must be >= at ({self.at}), got {self.keep_until}")


def to_json(record: Any) -> str:
    """Serialise a record to compact JSON, keys sorted, so that equal records give equal bytes
    (the etcd store compares stored values with it).

    The text is Python's ``json.dumps`` of the record's fields (``msgspec.to_builtins``): its
    float form (``1e-05``, ``1e+16``) and ASCII escapes (``\\u00b5``) are those of the values
    in the store, which msgspec's own encoder writes differently (``0.00001``, raw UTF-8).

    Raises:
        RecordError: a field is NaN or infinite, which JSON cannot hold, or breaks its declared
            bounds (e.g. ``Measurement.samples`` < 0): every reader would drop the stored text as
            malformed, so it is never written. The message names the record type and the field.
    """
    fields = msgspec.to_builtins(record)
    try:
        text = json.dumps(fields, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except ValueError:
        path = _not_finite(fields, "$") or "$"
        raise RecordError(f"{type(record).__name__}: {path}: must be finite (NaN and infinity are not JSON)") from None
    if isinstance(record, _Record):
        try:  # the bounds a reader checks (msgspec checks Meta constraints on decoding only)
            msgspec.convert(fields, type(record))
        except msgspec.ValidationError as exc:
            raise RecordError(_message(type(record), str(exc), text)) from None
    return text


def _not_finite(value: Any, path: str) -> str | None:
    """The path (``$.types[0].x``) of the first NaN or infinite float in ``value``, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        items = ((f"{path}.{k}", value[k]) for k in sorted(value))
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for p, v in items if (found := _not_finite(v, p)) is not None), None)


def from_json(cls: type[R], text: str | bytes) -> R:
    """Parse JSON into ``cls`` with msgspec (strict: no string for a number, no float for an
    int, no unknown field), checking the fields' constraints and the record's own rules.

    Raises:
        RecordError: invalid JSON (``NaN`` and ``Infinity`` are not JSON; a number beyond the
            float range is out of range), a missing, unknown, mistyped or out-of-range field, or
            a broken rule; the message names ``cls`` and the field (e.g.
            ``NodeInventory: $.gpus[0].mem_gib: Expected `float` > 0.0, got 0``).
    """
    try:
        return msgspec.json.decode(text, type=cls)
    except msgspec.ValidationError as exc:
        raise RecordError(_message(cls, str(exc), text)) from None
    except (msgspec.DecodeError, TypeError) as exc:
        raise RecordError(f"{cls.__name__}: invalid JSON: {exc}") from None


_AT = re.compile(r"(?P<what>.*?)(?: - at `(?P<path>\$[^`]*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_ENUM = re.compile(r"Invalid enum value (?P<got>.*)", re.S)


def _message(cls: type, raw: str, text: str | bytes) -> str:
    """A msgspec validation message as ``<record>: <path>: <what>, got <value>``."""
    m = _AT.fullmatch(raw)
    what, path = (m["what"], m["path"]) if m else (raw, None)
    name = cls.__name__
    if path is None:  # the record itself: a missing or unknown field, not an object, a rule
        return what if what.startswith(f"{name}: ") else f"{name}: {what}"
    enum = _ENUM.fullmatch(what)
    values = _literal_values(cls, path) if enum else None
    if enum and values:
        what = f"must be one of {', '.join(map(str, values))}, got {enum['got']}"
    elif what.startswith("Expected") and ", got" not in what:
        found = _value_at(text, path)
        if found is not None:
            what = f"{what}, got {found}"
    return f"{name}: {path}: {what}"


def _steps(path: str) -> list[tuple[str, str]]:
    return _STEP.findall(path[1:])


def _value_at(text: str | bytes, path: str) -> str | None:
    """The value at ``path`` (``$.types[0].model``) of ``text`` as JSON, at most 80 characters,
    or None when ``text`` has no such value."""
    try:
        value = json.loads(text)
        for key, index in _steps(path):
            value = value[key] if key else value[int(index)]
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    shown = json.dumps(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _literal_values(cls: type, path: str) -> tuple[Any, ...] | None:
    """The allowed values, in declared order, of the ``Literal`` field at ``path`` of ``cls``, or None."""
    t: Any = cls
    for key, _ in _steps(path):
        t = _bare(t)
        if key:
            t = get_type_hints(t, include_extras=True).get(key) if isinstance(t, type) and issubclass(t, _Record) else None
        else:  # an item of ``tuple[X, ...]``
            args = get_args(t)
            t = args[0] if get_origin(t) is tuple and args else None
        if t is None:
            return None
    t = _bare(t)
    return get_args(t) if get_origin(t) is Literal else None


def _bare(t: Any) -> Any:
    """``t`` without its ``Annotated`` constraints."""
    return get_args(t)[0] if get_origin(t) is Annotated else t
