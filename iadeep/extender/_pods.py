"""Which pods are ours and what they ask for; the annotation keys the extender reads and writes.

A pod is a GPU job of ours when its containers request the GPU-memory extended resource
(:attr:`ExtenderSettings.gpu_mem_resource`, default ``iadeep.io/gpu-mem``, one unit = 1 GiB).
Its demand is :func:`iadeep.podspec.pod_demand` (shared with the GPU emulator) over the facts of
kube-scheduler's wire pod (:func:`pod_facts`); the rules are in :mod:`iadeep.podspec`.

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

from iadeep.extender._wire import Container, Pod
from iadeep.podspec import (
    ANNOTATION_ASSUME_TIME, ANNOTATION_BATCH_SIZE, ANNOTATION_BIND_PHASE, ANNOTATION_DURATION, ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM, ANNOTATION_GPU_MODELS, ANNOTATION_GPU_UUID, ANNOTATION_MODEL, ANNOTATION_NODE, ANNOTATION_REASON,
    BIND_ANNOTATIONS, BIND_PHASE_ALLOCATING, ContainerFacts, PodDemand, PodFacts, PodSpecError, api_time_s,
    load_quantity_parser,
)
from iadeep.podspec import pod_demand as demand_of_facts
from iadeep.state import JobRecord

__all__ = [
    "job_of",
    "job_record",
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
    "api_time_s",
    "load_quantity_parser",
    "pod_demand",
    "pod_facts",
]


def job_record(demand: PodDemand, now_s: float) -> JobRecord:
    """The :class:`~iadeep.state.JobRecord` stored with the pod's reservation (submitted at
    ``now_s``, Unix seconds; its work left the demand's ``duration_s``)."""
    return JobRecord(demand.uid, demand.namespace, demand.name, demand.model, demand.batch_size, demand.num_gpus,
                     demand.mem_gib, remaining_s=demand.duration_s, submitted_at=now_s, gpu_models=demand.gpu_models,
                     gang=demand.gang)


def job_of(namespace: str, pod_name: str) -> tuple[str, str]:
    """``(namespace, Job name)`` of a Job's pod: the Job controller names its pods
    ``<Job name>-<suffix>`` (``generateName``), a replacement pod as the evicted one."""
    return namespace, pod_name.rsplit("-", 1)[0]


def _containers(containers: list[Container] | None) -> tuple[ContainerFacts, ...]:
    return tuple(ContainerFacts(c.name, (c.resources.limits or {}) if c.resources else {},
                                (c.resources.requests or {}) if c.resources else {}) for c in containers or ())


def pod_facts(pod: Pod) -> PodFacts:
    """What :func:`iadeep.podspec.pod_demand` reads of a wire pod."""
    meta, spec = pod.metadata, pod.spec
    return PodFacts(pod.namespace, meta.name, pod.uid, meta.labels or {}, pod.annotations, _containers(spec.containers),
                    _containers(spec.initContainers), spec.priority or 0, meta.creationTimestamp or "")


def pod_demand(pod: Pod, *, gpu_mem_resource: str, gpu_count_resource: str, default_model: str,
               default_batch_size: int, default_duration_s: float) -> PodDemand | None:
    """The wire pod's GPU demand (:func:`iadeep.podspec.pod_demand`), or ``None`` when it does not
    ask for ``gpu_mem_resource``.

    Raises:
        PodSpecError: a malformed quantity or annotation, or a demand that cannot be served (zero
            GPUs, memory not a positive number); the message names the field.
    """
    return demand_of_facts(pod_facts(pod), gpu_mem_resource=gpu_mem_resource, gpu_count_resource=gpu_count_resource,
                           default_model=default_model, default_batch_size=default_batch_size,
                           default_duration_s=default_duration_s)
