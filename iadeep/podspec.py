"""The pod contract iadeep's components share: the annotations a pod carries (what it asks for,
and what the extender reserved for it), the extended resources, the error for a pod that asks in a
way iadeep cannot serve, the mapping of a pod's (model family, batch size) to the interference
model's job type, and the translation of a pod into its demand (:func:`pod_demand`, over
:class:`PodFacts`: what the demand reads of a pod, however the pod arrived).

The extender writes the reservation annotations at bind (:mod:`iadeep.extender`), the device
plugin reads them in ``Allocate`` (:mod:`iadeep.deviceplugin`), the GPU emulator reads the job's
annotations and the reserved GPUs (:mod:`iadeep.emulator`), and the trace submitter and the
training Jobs write the job's annotations. One definition, so that a renamed key cannot drift
between them; the extender (from kube-scheduler's wire pod) and the GPU emulator (from the
API's pod object) compute a pod's demand with the same :func:`pod_demand`.

A pod is a GPU job of ours when its containers request the GPU-memory extended resource
(default :data:`GPU_MEM_RESOURCE`, one unit = 1 GiB). Its demand is computed as kube-scheduler
computes resource requests: the sum over its containers, or the largest init container if that
is larger; for an extended resource limits and requests are equal, the limit is read first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType

__all__ = ["ANNOTATION_MODEL", "ANNOTATION_BATCH_SIZE", "ANNOTATION_DURATION", "ANNOTATION_GPU_MODELS",
           "ANNOTATION_GPU_INDEX", "ANNOTATION_GPU_UUID", "ANNOTATION_GPU_MEM", "ANNOTATION_ASSUME_TIME",
           "ANNOTATION_BIND_PHASE", "ANNOTATION_NODE", "ANNOTATION_REASON", "BIND_ANNOTATIONS", "BIND_PHASE_ALLOCATING",
           "BIND_PHASE_ALLOCATED", "GANG_LABEL", "ANNOTATION_GANG_SIZE", "ANNOTATION_GANG_INDEX", "ENV_MASTER_ADDR",
           "ENV_MASTER_PORT", "ENV_WORLD_SIZE", "ENV_RANK", "GPU_MEM_RESOURCE", "GPU_COUNT_RESOURCE", "MAX_GPUS_PER_POD", "MAX_DURATION_S", "PodSpecError",
           "TypeResolver", "ContainerFacts", "PodFacts", "PodJob", "PodDemand", "pod_job", "pod_demand", "gang_of", "api_time_s",
           "load_quantity_parser"]

#: The extended resources a pod requests: GPU memory (whole GiB) and GPUs (the device plugin's).
GPU_MEM_RESOURCE = "iadeep.io/gpu-mem"
GPU_COUNT_RESOURCE = "iadeep.io/gpu-count"

ANNOTATION_MODEL = "iadeep.io/model"
ANNOTATION_BATCH_SIZE = "iadeep.io/batch-size"
ANNOTATION_DURATION = "iadeep.io/duration-s"
ANNOTATION_GPU_MODELS = "iadeep.io/gpu-models"
#: The largest integer an annotation may hold: the largest a stored record holds
#: (``iadeep.state.MAX_INT``, JSON's exact integers; the services' layers keep this module below the store).
_MAX_INT = 2**53 - 1
#: The longest expected run time a pod may declare in :data:`ANNOTATION_DURATION` (s): ten years.
#: Longer is a unit error (milliseconds for seconds), and times derived from it must stay finite.
MAX_DURATION_S = 10 * 365 * 86_400.0

ANNOTATION_GPU_INDEX = "iadeep.io/gpu-index"
"""GPU index(es) on the node reserved for the pod, comma-separated in gang order (e.g. ``"0,3"``)."""
ANNOTATION_GPU_UUID = "iadeep.io/gpu-uuid"
"""The same GPUs' UUIDs as published in the node inventory, comma-separated (empty when unknown)."""
ANNOTATION_GPU_MEM = "iadeep.io/gpu-mem-gib"
"""GPU memory reserved on each of those GPUs, GiB (decimal)."""
ANNOTATION_ASSUME_TIME = "iadeep.io/assume-time"
"""When the reservation was made: Unix time in nanoseconds (integer), as gpushare does."""
ANNOTATION_BIND_PHASE = "iadeep.io/bind-phase"
"""``allocating`` when the extender bound the pod; the device plugin sets ``allocated`` once its
``Allocate`` has served the pod (it picks, among pods on its node in ``allocating`` with the
requested memory, the one with the oldest assume time)."""
ANNOTATION_NODE = "iadeep.io/node"
"""The node the reservation is on (lets the device plugin reject a pod bound elsewhere)."""
ANNOTATION_REASON = "iadeep.io/placement-reason"
"""The policy's justification of the GPU choice, for humans."""

GANG_LABEL = "iadeep.io/gang"
"""Label (on the pod, so that the extender can list a gang's members by selector) naming the gang
the pod is a member of: a job of more GPUs than one node has runs as ``n_pods`` pods of
``pod_gpus`` each (:func:`iadeep.policy.pod_size`), placed all or nothing. The gang is
``(namespace, label value)``; the live backend uses the Job's name."""
ANNOTATION_GANG_SIZE = "iadeep.io/gang-size"
"""Members of the gang (``n_pods``, an integer >= 1); each member asks for ``pod_gpus`` GPUs."""
ANNOTATION_GANG_INDEX = "batch.kubernetes.io/job-completion-index"
"""The member's index ``0 .. n_pods - 1``: the completion index the Job controller writes on the
pods of an Indexed Job (``completionMode: Indexed``). Member ``i`` holds the gang's GPUs
``Placement.gpus[i*p:(i+1)*p]``; it is the member's DDP rank (:data:`ENV_RANK`)."""

ENV_MASTER_ADDR = "MASTER_ADDR"
"""Rendezvous of a gang (PyTorch ``env://``): the DNS name of member 0, ``<job>-0.<service>``
through the gang's headless Service."""
ENV_MASTER_PORT = "MASTER_PORT"
ENV_WORLD_SIZE = "WORLD_SIZE"
"""Processes of the gang: ``n_pods`` (one process per member; a member's process uses its GPUs)."""
ENV_RANK = "RANK"
"""The member's rank, from :data:`ANNOTATION_GANG_INDEX` (the Downward API)."""

BIND_PHASE_ALLOCATING = "allocating"
#: What the device plugin sets once ``Allocate`` served the pod.
BIND_PHASE_ALLOCATED = "allocated"
BIND_ANNOTATIONS = (ANNOTATION_GPU_INDEX, ANNOTATION_GPU_UUID, ANNOTATION_GPU_MEM, ANNOTATION_ASSUME_TIME,
                    ANNOTATION_BIND_PHASE, ANNOTATION_NODE, ANNOTATION_REASON)


#: More GPUs than any node has; larger counts are rejected before any arithmetic on them.
MAX_GPUS_PER_POD = 64


class PodSpecError(ValueError):
    """The pod asks for our resource in a way we cannot serve; the message says what to fix."""


class TypeResolver:
    """Maps a job's (model family, batch size) to the interference model's type id.

    An unmeasured batch size of a known family maps to the nearest measured one (ties to the
    smaller); an unknown family is an error for a new pod and the default type for a stored record.

    Args:
        model: the interference model.
        default_model / default_batch_size: the type of pods without annotations.
    """

    def __init__(self, model: InterferenceModel, default_model: str, default_batch_size: int):
        self.model = model
        self._sizes: dict[str, tuple[int, ...]] = {}
        for t in model.types:
            self._sizes.setdefault(t.model, ())
        for fam in self._sizes:
            self._sizes[fam] = model.batch_sizes(fam)
        self._cache: dict[tuple[str, int], int] = {}
        self.default_type = self.resolve(default_model, default_batch_size)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted(self._sizes))

    def resolve(self, family: str, batch_size: int) -> int:
        """Type id of ``family`` at (the measured batch size nearest to) ``batch_size``.

        Raises:
            PodSpecError: ``family`` was not measured (the message lists the known families).
        """
        key = (family, batch_size)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        sizes = self._sizes.get(family)
        if not sizes:
            raise PodSpecError(f"model {family!r} is not in the interference model; known: {', '.join(self.families)}")
        nearest = min(sizes, key=lambda b: (abs(b - batch_size), b))
        tid = self.model.type_id(JobType(family, nearest))
        if len(self._cache) < 4096:
            self._cache[key] = tid
        return tid

    def resolve_or_default(self, family: str, batch_size: int) -> int:
        try:
            return self.resolve(family, batch_size)
        except PodSpecError:
            return self.default_type


# -- a pod's demand --------------------------------------------------------------------------


class ContainerFacts(msgspec.Struct, frozen=True):
    """One container's extended resources as the pod states them.

    Attributes:
        name: the container's name (for messages; empty when unknown).
        limits / requests: resource name -> quantity (a Kubernetes quantity string such as
            ``"8"`` or ``"1Ki"``, or a number).
    """

    name: str = ""
    limits: Mapping[str, Any] = {}
    requests: Mapping[str, Any] = {}


class PodFacts(msgspec.Struct, frozen=True):
    """What :func:`pod_demand` reads of a pod, independent of how the pod arrived (kube-scheduler's
    wire pod in the extender, the API's pod object in the GPU emulator: :meth:`from_api`).

    Attributes:
        namespace / name / uid: the pod.
        labels / annotations: its metadata's (empty when absent).
        containers / init_containers: their resources.
        priority: ``spec.priority`` (0 when absent).
        created: ``metadata.creationTimestamp`` (RFC 3339; empty when absent).
    """

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = {}
    annotations: Mapping[str, str] = {}
    containers: tuple[ContainerFacts, ...] = ()
    init_containers: tuple[ContainerFacts, ...] = ()
    priority: int = 0
    created: str = ""

    @classmethod
    def from_api(cls, pod: Mapping[str, Any]) -> PodFacts:
        """The facts of a pod object as the Kubernetes API returns it (JSON, as a dict): namespace
        ``default`` when absent, UID ``<namespace>/<name>`` when absent (as the extender's wire pod)."""
        meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        priority = spec.get("priority")
        return cls(ns, name, str(meta.get("uid") or f"{ns}/{name}"), _mapping(meta.get("labels")),
                   _mapping(meta.get("annotations")), _containers(spec.get("containers")),
                   _containers(spec.get("initContainers")), priority if isinstance(priority, int) else 0,
                   str(meta.get("creationTimestamp") or ""))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _containers(value: Any) -> tuple[ContainerFacts, ...]:
    out = []
    for c in value if isinstance(value, list) else ():
        c = _mapping(c)
        res = _mapping(c.get("resources"))
        out.append(ContainerFacts(str(c.get("name") or ""), _mapping(res.get("limits")), _mapping(res.get("requests"))))
    return tuple(out)


class PodJob(msgspec.Struct, frozen=True):
    """The job a pod runs, as its annotations and gang label say (:func:`pod_job`).

    Attributes:
        model / batch_size: the job type as annotated (or the defaults).
        duration_s: expected run time at dedicated speed (s).
        gpu_models: GPU models it accepts (empty: any).
        gang / gang_size / gang_index: :func:`gang_of`.
    """

    model: str
    batch_size: int
    duration_s: float
    gpu_models: tuple[str, ...] = ()
    gang: str = ""
    gang_size: int = 1
    gang_index: int = 0


class PodDemand(msgspec.Struct, frozen=True):
    """What one pod of ours asks for.

    Attributes:
        namespace / name / uid: the pod.
        mem_gib: GPU memory per GPU (GiB).
        num_gpus: GPUs needed on one node.
        model / batch_size: the job type as annotated (or the defaults).
        duration_s: expected run time at dedicated speed (s).
        gpu_models: GPU models it accepts (empty: any).
        priority: ``spec.priority`` (0 when absent).
        created_s: ``metadata.creationTimestamp`` (Unix seconds; 0 when absent): with the
            priority, the pod's place in kube-scheduler's queue (:class:`~iadeep.extender.PendingPods`).
        gang: the gang's name (label :data:`GANG_LABEL`); empty: a pod of its own.
        gang_size: members of the gang (``n_pods``; 1 without a gang).
        gang_index: this member's index ``0 .. gang_size - 1`` (0 without a gang).
    """

    namespace: str
    name: str
    uid: str
    mem_gib: float
    num_gpus: int
    model: str
    batch_size: int
    duration_s: float
    gpu_models: tuple[str, ...] = ()
    priority: int = 0
    created_s: float = 0.0
    gang: str = ""
    gang_size: int = 1
    gang_index: int = 0


def api_time_s(value: str) -> float:
    """A time of the Kubernetes API (RFC 3339, e.g. ``2026-11-30T14:56:47Z``) as Unix seconds.

    Raises:
        ValueError: not such a time.
    """
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def load_quantity_parser() -> None:
    """Import the quantity parser now (it pulls in the whole ``kubernetes`` client, about 1,000
    modules): a service calls this at start, not inside its first request."""
    from kubernetes.utils import parse_quantity  # noqa: F401


_MAX_QUANTITY_DIGITS = 18
_MAX_GANG = 1024


def _quantity(value: object, what: str) -> Decimal:
    from kubernetes.utils import parse_quantity  # Kubernetes' own suffix rules (Ki, M, m, e3, ...)

    try:
        q = Decimal(repr(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else parse_quantity(str(value).strip())
    except (InvalidOperation, ValueError, TypeError, ArithmeticError):
        raise PodSpecError(f"{what}: {value!r} is not a quantity") from None
    if not q.is_finite():
        raise PodSpecError(f"{what}: {value!r} is not a finite quantity")
    if q and q.adjusted() > _MAX_QUANTITY_DIGITS:  # Kubernetes' own quantities stop at 2^63
        raise PodSpecError(f"{what}: {value!r} is out of range")
    return q


def _resource(containers: tuple[ContainerFacts, ...], resource: str, role: str) -> list[Decimal]:
    out = []
    for c in containers:
        value = c.limits.get(resource, c.requests.get(resource))
        out.append(Decimal(0) if value is None else _quantity(value, f"{role} {c.name or '?'} {resource}"))
    return out


def _effective(pod: PodFacts, resource: str) -> Decimal:
    main = sum(_resource(pod.containers, resource, "container"), Decimal(0))
    init = _resource(pod.init_containers, resource, "init container")
    return max([main, *init])


def _int_annotation(annotations: Mapping[str, str], key: str, default: int) -> int:
    raw = annotations.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise PodSpecError(f"annotation {key}={raw!r} is not an integer") from None
    if not 1 <= value <= _MAX_INT:
        raise PodSpecError(f"annotation {key}={raw!r} must be an integer in 1..{_MAX_INT}")
    return value


def pod_demand(pod: PodFacts, *, gpu_mem_resource: str = GPU_MEM_RESOURCE, gpu_count_resource: str = GPU_COUNT_RESOURCE,
               default_model: str, default_batch_size: int, default_duration_s: float) -> PodDemand | None:
    """The pod's GPU demand, or ``None`` when it does not ask for ``gpu_mem_resource``.

    Memory (GiB) and GPUs are the pod's effective requests (module docstring), the memory spread
    evenly over the GPUs (``gpu_count_resource``, default 1); the job, its type, duration, GPU
    models and gang, is :func:`pod_job`.

    Raises:
        PodSpecError: a malformed quantity or annotation, or a demand that cannot be served (zero
            GPUs, memory not a positive number); the message names the field.
    """
    mem = _effective(pod, gpu_mem_resource)
    if mem == 0:
        return None
    if mem < 0:
        raise PodSpecError(f"{gpu_mem_resource} must be positive, got {mem}")
    count = _effective(pod, gpu_count_resource)
    if count == 0:
        count = Decimal(1)
    if not 1 <= count <= MAX_GPUS_PER_POD or count != count.to_integral_value():
        raise PodSpecError(f"{gpu_count_resource} must be an integer in 1..{MAX_GPUS_PER_POD}, got {count}")
    num_gpus = int(count)
    per_gpu = float(mem) / num_gpus
    if not math.isfinite(per_gpu) or per_gpu <= 0:
        raise PodSpecError(f"{gpu_mem_resource}={mem} is not a usable amount of GPU memory")
    job = pod_job(pod, default_model=default_model, default_batch_size=default_batch_size,
                  default_duration_s=default_duration_s)
    try:
        created_s = api_time_s(pod.created) if pod.created else 0.0
    except ValueError:
        raise PodSpecError(f"metadata.creationTimestamp={pod.created!r} is not an RFC 3339 time") from None
    return PodDemand(pod.namespace, pod.name, pod.uid, per_gpu, num_gpus, job.model, job.batch_size, job.duration_s,
                     job.gpu_models, pod.priority, created_s, job.gang, job.gang_size, job.gang_index)


def pod_job(pod: PodFacts, *, default_model: str, default_batch_size: int, default_duration_s: float) -> PodJob:
    """The job ``pod`` runs: its annotations :data:`ANNOTATION_MODEL`, :data:`ANNOTATION_BATCH_SIZE`
    (an integer >= 1), :data:`ANNOTATION_DURATION` (seconds, in ``0..MAX_DURATION_S``) and
    :data:`ANNOTATION_GPU_MODELS` (``|``- or comma-separated), each the default when absent or
    empty, and its gang (:func:`gang_of`).

    Raises:
        PodSpecError: a malformed annotation (the message names the key).
    """
    ann = pod.annotations
    model = (ann.get(ANNOTATION_MODEL) or "").strip() or default_model
    batch = _int_annotation(ann, ANNOTATION_BATCH_SIZE, default_batch_size)
    raw_duration = ann.get(ANNOTATION_DURATION)
    duration = default_duration_s
    if raw_duration:
        try:
            duration = float(raw_duration)
        except ValueError:
            raise PodSpecError(f"annotation {ANNOTATION_DURATION}={raw_duration!r} is not a number") from None
        if not 0 <= duration <= MAX_DURATION_S:  # NaN fails too
            raise PodSpecError(f"annotation {ANNOTATION_DURATION}={raw_duration!r} must be a number of seconds "
                               f"in 0..{MAX_DURATION_S:.0f} (ten years)")
    models = tuple(m.strip() for m in re.split(r"[|,]", ann.get(ANNOTATION_GPU_MODELS) or "") if m.strip())
    gang, size, index = gang_of(pod)
    return PodJob(model, batch, duration, models, gang, size, index)


def gang_of(pod: PodFacts) -> tuple[str, int, int]:
    """``(gang, size, index)`` of a gang member (label :data:`GANG_LABEL`, annotations
    :data:`ANNOTATION_GANG_SIZE` and the Job controller's completion index
    :data:`ANNOTATION_GANG_INDEX`); ``("", 1, 0)`` for a pod of its own.

    Raises:
        PodSpecError: a gang label without a size in ``1..1024``, or without an index in
            ``0..size-1`` (the pod is not an Indexed Job's); the message names the key.
    """
    gang = (pod.labels.get(GANG_LABEL) or "").strip()
    if not gang:
        return "", 1, 0
    size = _int_annotation(pod.annotations, ANNOTATION_GANG_SIZE, 0)
    if not 1 <= size <= _MAX_GANG:
        raise PodSpecError(f"pod of gang {gang!r}: annotation {ANNOTATION_GANG_SIZE} must be an integer in "
                           f"1..{_MAX_GANG}, got {pod.annotations.get(ANNOTATION_GANG_SIZE)!r}")
    raw = (pod.annotations.get(ANNOTATION_GANG_INDEX) or "").strip()
    if not raw.isdigit() or int(raw) >= size:
        raise PodSpecError(f"pod of gang {gang!r}: annotation {ANNOTATION_GANG_INDEX} must be an integer in "
                           f"0..{size - 1} (the pods of an Indexed Job carry it), got {raw or None!r}")
    return gang, size, int(raw)
