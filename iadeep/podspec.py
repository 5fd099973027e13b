"""The pod contract iadeep's components share: the annotations a pod carries (what it asks for,
and what the extender reserved for it), the extended resources, the error for a pod that asks in a
way iadeep cannot serve, and the mapping of a pod's (model family, batch size) to the interference
model's job type.

The extender writes the reservation annotations at bind (:mod:`iadeep.extender`), the device
plugin reads them in ``Allocate`` (:mod:`iadeep.deviceplugin`), the GPU emulator reads the job's
annotations and the reserved GPUs (:mod:`iadeep.emulator`), and the trace submitter and the
training Jobs write the job's annotations. One definition, so that a renamed key cannot drift
between them.
"""

from __future__ import annotations

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType

__all__ = ["ANNOTATION_MODEL", "ANNOTATION_BATCH_SIZE", "ANNOTATION_DURATION", "ANNOTATION_GPU_MODELS",
           "ANNOTATION_GPU_INDEX", "ANNOTATION_GPU_UUID", "ANNOTATION_GPU_MEM", "ANNOTATION_ASSUME_TIME",
           "ANNOTATION_BIND_PHASE", "ANNOTATION_NODE", "ANNOTATION_REASON", "BIND_ANNOTATIONS", "BIND_PHASE_ALLOCATING",
           "BIND_PHASE_ALLOCATED", "GANG_LABEL", "ANNOTATION_GANG_SIZE", "ANNOTATION_GANG_INDEX", "ENV_MASTER_ADDR",
           "ENV_MASTER_PORT", "ENV_WORLD_SIZE", "ENV_RANK", "GPU_MEM_RESOURCE", "GPU_COUNT_RESOURCE", "MAX_GPUS_PER_POD", "PodSpecError",
           "TypeResolver"]

#: The extended resources a pod requests: GPU memory (whole GiB) and GPUs (the device plugin's).
GPU_MEM_RESOURCE = "iadeep.io/gpu-mem"
GPU_COUNT_RESOURCE = "iadeep.io/gpu-count"

ANNOTATION_MODEL = "iadeep.io/model"
ANNOTATION_BATCH_SIZE = "iadeep.io/batch-size"
ANNOTATION_DURATION = "iadeep.io/duration-s"
ANNOTATION_GPU_MODELS = "iadeep.io/gpu-models"

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
