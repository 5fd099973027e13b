"""The kube-scheduler extender service: filter, prioritize and bind GPU pods with the policy core.

Run it with ``iadeep extender serve`` (settings from ``IADEEP_EXTENDER_*``, etcd from
``IADEEP_ETCD_*``); build the ASGI app in code with :func:`create_app`. Routes, annotations and
metrics are documented in :mod:`._app`, :mod:`._pods` and :mod:`._metrics`; the scheduler
configuration and manifests are in ``k8s/extender/``. Besides the verbs it carries out the node
coordinators' undo records (:mod:`._undo`: the ban in its policy, the pod's eviction) and the
policy's preemptions (:mod:`._preempt`). :class:`Pod` is the pod model that
:meth:`PodApi.read_pod` returns (the wire format's ``v1.Pod``, only the fields the extender reads).
"""

from iadeep.extender._app import build_service, create_app
from iadeep.extender._bind import BindFailed, KubeError, KubernetesPodApi, PodApi, PodStatus, bind_annotations
from iadeep.extender._cache import StateCache
from iadeep.extender._pods import (
    ANNOTATION_ASSUME_TIME,
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_BIND_PHASE,
    ANNOTATION_DURATION,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM,
    ANNOTATION_GPU_UUID,
    ANNOTATION_MODEL,
    ANNOTATION_NODE,
    ANNOTATION_REASON,
    BIND_PHASE_ALLOCATING,
    PodDemand,
    PodSpecError,
    job_record,
    pod_demand,
)
from iadeep.extender._podwatch import GangMembers, PendingPods
from iadeep.extender._service import ExtenderService
from iadeep.extender._settings import CacheSettings, ExtenderSettings, JobDefaults, KubeSettings
from iadeep.extender._view import Snapshot, ViewBase, build_view
from iadeep.podspec import TypeResolver
from iadeep.extender._wire import Pod

__all__ = [
    "ANNOTATION_ASSUME_TIME",
    "ANNOTATION_BATCH_SIZE",
    "ANNOTATION_BIND_PHASE",
    "ANNOTATION_DURATION",
    "ANNOTATION_GPU_INDEX",
    "ANNOTATION_GPU_MEM",
    "ANNOTATION_GPU_UUID",
    "ANNOTATION_MODEL",
    "ANNOTATION_NODE",
    "ANNOTATION_REASON",
    "BIND_PHASE_ALLOCATING",
    "BindFailed",
    "CacheSettings",
    "ExtenderService",
    "ExtenderSettings",
    "JobDefaults",
    "KubeError",
    "KubeSettings",
    "KubernetesPodApi",
    "PodApi",
    "GangMembers",
    "PendingPods",
    "Pod",
    "PodDemand",
    "PodSpecError",
    "PodStatus",
    "Snapshot",
    "StateCache",
    "TypeResolver",
    "ViewBase",
    "bind_annotations",
    "build_service",
    "build_view",
    "create_app",
    "job_record",
    "pod_demand",
]
