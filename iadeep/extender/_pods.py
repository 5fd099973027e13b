"""Which pods are ours and what they ask for; the annotation keys the extender reads and writes.

A pod is a GPU job of ours when its containers request the GPU-memory extended resource
(:attr:`ExtenderSettings.gpu_mem_resource`, default ``iadeep.io/gpu-mem``, one unit = 1 GiB).
The pod's demand is computed as kube-scheduler computes resource requests: the sum over its
containers, or the largest init container if that is larger; for an extended resource limits and
requests are equal, the limit is read first.

* ``iadeep.io/gpu-mem`` (resource): GPU memory of the whole pod, GiB; spread evenly over its GPUs.
* ``iadeep.io/gpu-count`` (resource, optional): GPUs the pod needs on its node (default 1).

Annotations the user may set on the pod (all optional):

==============================  ===============================================================
``iadeep.io/model``             Gavel model family, e.g. ``ResNet-50`` (default: settings)
``iadeep.io/batch-size``        per-GPU batch size (default: settings; an unmeasured size is
                                mapped to the nearest measured one)
``iadeep.io/duration-s``        expected run time alone on a GPU, seconds (default: settings);
                                the ``iadeep`` policy weighs co-location against waiting with it
``iadeep.io/gpu-models``        GPU models the pod accepts, ``|``- or comma-separated (as openb's
                                ``gpu_spec``, e.g. ``V100M16|V100M32``); a node's GPU models are
                                in its inventory (:class:`~iadeep.state.GpuInfo` ``model``).
                                Default: any model
==============================  ===============================================================

Annotations the extender writes at bind (read by the device plugin, see :mod:`._bind`) are listed
in :data:`BIND_ANNOTATIONS`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from iadeep.extender._wire import Container, Pod
from iadeep.podspec import (
    ANNOTATION_ASSUME_TIME, ANNOTATION_BATCH_SIZE, ANNOTATION_BIND_PHASE, ANNOTATION_DURATION, ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM, ANNOTATION_GPU_MODELS, ANNOTATION_GPU_UUID, ANNOTATION_MODEL, ANNOTATION_NODE, ANNOTATION_REASON,
    ANNOTATION_GANG_INDEX, ANNOTATION_GANG_SIZE, BIND_ANNOTATIONS, BIND_PHASE_ALLOCATING, GANG_LABEL, MAX_GPUS_PER_POD,
    PodSpecError,
)
from iadeep.state import JobRecord

__all__ = [
    "job_of",
    "ANNOTATION_MODEL",
    "ANNOTATION_BATCH_SIZE",
    "ANNOTATION_DURATION",
    "ANNOTATION_GPU_MODELS",
    "ANNOTATION_GPU_INDEX",
    "ANNOTATION_GPU_UUID",
    "ANNOTATION_GPU_MEM",
    "ANNOTATION_ASSUME_TIME",
    "ANNOTATION_BIND_PHASE",
    "ANNOTATION_NODE",
    "ANNOTATION_REASON",
    "BIND_ANNOTATIONS",
    "BIND_PHASE_ALLOCATING",
    "PodDemand",
    "PodSpecError",
    "gang_of",
    "pod_demand",
]

@dataclass(frozen=True)
class PodDemand:
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
        gang: the gang's name (label :data:`~iadeep.podspec.GANG_LABEL`); empty: a pod of its own.
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

    def job_record(self, now_s: float) -> JobRecord:
        """The :class:`~iadeep.state.JobRecord` stored with the reservation."""
        return JobRecord(self.uid, self.namespace, self.name, self.model, self.batch_size, self.num_gpus,
                         self.mem_gib, remaining_s=self.duration_s, submitted_at=now_s, gpu_models=self.gpu_models,
                         gang=self.gang)


def job_of(namespace: str, pod_name: str) -> tuple[str, str]:
    """``(namespace, Job name)`` of a Job's pod: the Job controller names its pods
    ``<Job name>-<suffix>`` (``generateName``), a replacement pod as the evicted one."""
    return namespace, pod_name.rsplit("-", 1)[0]


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


def _resource(containers: list[Container] | None, resource: str, role: str) -> list[Decimal]:
    out = []
    for c in containers or []:
        res = c.resources
        if res is None:
            out.append(Decimal(0))
            continue
        value = (res.limits or {}).get(resource, (res.requests or {}).get(resource))
        out.append(Decimal(0) if value is None else _quantity(value, f"{role} {c.name or '?'} {resource}"))
    return out


def _effective(pod: Pod, resource: str) -> Decimal:
    main = sum(_resource(pod.spec.containers, resource, "container"), Decimal(0))
    init = _resource(pod.spec.initContainers, resource, "init container")
    return max([main, *init])


_MAX_QUANTITY_DIGITS = 18


def _int_annotation(pod: Pod, key: str, default: int) -> int:
    raw = pod.annotations.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise PodSpecError(f"annotation {key}={raw!r} is not an integer") from None
    if value < 1:
        raise PodSpecError(f"annotation {key}={raw!r} must be >= 1")
    return value


def pod_demand(pod: Pod, *, gpu_mem_resource: str, gpu_count_resource: str, default_model: str,
               default_batch_size: int, default_duration_s: float) -> PodDemand | None:
    """The pod's GPU demand, or ``None`` when it does not ask for ``gpu_mem_resource``.

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
    ann = pod.annotations
    model = (ann.get(ANNOTATION_MODEL) or "").strip() or default_model
    batch = _int_annotation(pod, ANNOTATION_BATCH_SIZE, default_batch_size)
    raw_duration = ann.get(ANNOTATION_DURATION)
    duration = default_duration_s
    if raw_duration:
        try:
            duration = float(raw_duration)
        except ValueError:
            raise PodSpecError(f"annotation {ANNOTATION_DURATION}={raw_duration!r} is not a number") from None
        if not math.isfinite(duration) or duration < 0:
            raise PodSpecError(f"annotation {ANNOTATION_DURATION}={raw_duration!r} must be a finite number >= 0")
    models = tuple(m.strip() for m in re.split(r"[|,]", ann.get(ANNOTATION_GPU_MODELS) or "") if m.strip())
    created = pod.metadata.creationTimestamp
    try:
        created_s = api_time_s(created) if created else 0.0
    except ValueError:
        raise PodSpecError(f"metadata.creationTimestamp={created!r} is not an RFC 3339 time") from None
    gang, size, index = gang_of(pod)
    return PodDemand(pod.namespace, pod.metadata.name, pod.uid, per_gpu, num_gpus, model, batch, duration, models,
                     pod.spec.priority or 0, created_s, gang, size, index)


_MAX_GANG = 1024


def gang_of(pod: Pod) -> tuple[str, int, int]:
    """``(gang, size, index)`` of a gang member (label :data:`~iadeep.podspec.GANG_LABEL`,
    annotations :data:`~iadeep.podspec.ANNOTATION_GANG_SIZE` and the Job controller's completion
    index :data:`~iadeep.podspec.ANNOTATION_GANG_INDEX`); ``("", 1, 0)`` for a pod of its own.

    Raises:
        PodSpecError: a gang label without a size in ``1..1024``, or without an index in
            ``0..size-1`` (the pod is not an Indexed Job's); the message names the key.
    """
    gang = ((pod.metadata.labels or {}).get(GANG_LABEL) or "").strip()
    if not gang:
        return "", 1, 0
    size = _int_annotation(pod, ANNOTATION_GANG_SIZE, 0)
    if not 1 <= size <= _MAX_GANG:
        raise PodSpecError(f"pod of gang {gang!r}: annotation {ANNOTATION_GANG_SIZE} must be an integer in "
                           f"1..{_MAX_GANG}, got {pod.annotations.get(ANNOTATION_GANG_SIZE)!r}")
    raw = (pod.annotations.get(ANNOTATION_GANG_INDEX) or "").strip()
    if not raw.isdigit() or int(raw) >= size:
        raise PodSpecError(f"pod of gang {gang!r}: annotation {ANNOTATION_GANG_INDEX} must be an integer in "
                           f"0..{size - 1} (the pods of an Indexed Job carry it), got {raw or None!r}")
    return gang, size, int(raw)
