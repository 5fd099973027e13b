"""Which pod an ``Allocate`` serves, and what it answers.

The kubelet's ``Allocate`` names device IDs only, never the pod. The extender's bind marks the
pod it placed (``iadeep.io/bind-phase: allocating``, the GPUs' indexes and UUIDs, the memory per
GPU and the assume time in ns; see :mod:`iadeep.podspec`), so a container request is
matched to the pods bound to this node in that phase, **oldest assume time first**, and among
them to the first whose next unserved container asks for exactly as many ``iadeep.io/gpu-mem``
units as there are device IDs. When the device IDs lie on GPUs (device IDs carry their GPU's
UUID), a pod whose own GPUs hold them is preferred. Calls are serialised per node (one lock in
the plugin). Two pods of the same size waiting at once would still be ambiguous (the kubelet may
admit the newer first, and the preferred allocation follows the older's GPU): the extender never
lets that happen on a node whose inventory this plugin publishes (``NodeInventory.allocates``;
binds there take turns, :mod:`iadeep.extender._admission`). The answer is built from the pod's annotations, never from the device IDs:
``NVIDIA_VISIBLE_DEVICES`` is the pod's GPU UUID(s). A request no pod matches is refused
(:class:`NoMatchingPod`) naming the reason, never answered with some GPU.

Each container of a multi-container pod gets its own share (its own units); the pod is marked
``allocated`` when its last GPU container is served.

``iadeep.io/gpu-count`` is advertised as co-location **slots** (``<GPU UUID>-slot-<k>``, as many
per GPU as the extender places jobs on one GPU), because the kubelet gives a device to one
container only. The kubelet allocates a container's resources one after the other in no fixed
order (a Go map), so the slots' preferred allocation follows the container being admitted:
the pod whose ``gpu-mem`` was just served and whose slots were not (the kubelet admits one pod
at a time), else the oldest pod allocating whose next container asks for that many slots. The
slots' ``Allocate`` answers no environment (the ``gpu-mem`` answer carries the GPU).

Environment of a served container:

===================================  ===================================================
``NVIDIA_VISIBLE_DEVICES``           the pod's GPU UUID(s), comma-separated
``IADEEP_GPU_INDEX``                 their indexes on the node
``IADEEP_GPU_UUID``                  the same UUIDs
``IADEEP_GPU_MEM_LIMIT_MIB``         this container's share, MiB (units x 1024)
``IADEEP_POD_GPU_MEM_LIMIT_MIB``     the pod's total, MiB
``IADEEP_POD``                       ``<namespace>/<name>`` (for logs)
===================================  ===================================================
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iadeep.podspec import (
    ANNOTATION_ASSUME_TIME, ANNOTATION_BIND_PHASE, ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MEM, ANNOTATION_GPU_UUID,
    ANNOTATION_NODE, BIND_PHASE_ALLOCATED, BIND_PHASE_ALLOCATING, GPU_COUNT_RESOURCE, GPU_MEM_RESOURCE,
)

__all__ = ["BoundPod", "PodApi", "KubernetesPodApi", "NoMatchingPod", "Allocator", "device_gpu",
           "BIND_PHASE", "ALLOCATING", "ALLOCATED", "COUNT_RESOURCE"]

log = logging.getLogger(__name__)

BIND_PHASE = ANNOTATION_BIND_PHASE
ALLOCATING = BIND_PHASE_ALLOCATING
ALLOCATED = BIND_PHASE_ALLOCATED
_GPU_INDEX, _GPU_UUID, _GPU_MEM = ANNOTATION_GPU_INDEX, ANNOTATION_GPU_UUID, ANNOTATION_GPU_MEM
_ASSUME, _NODE = ANNOTATION_ASSUME_TIME, ANNOTATION_NODE
COUNT_RESOURCE = GPU_COUNT_RESOURCE
_DEVICE_SUFFIX = re.compile(r"-(?:mem|slot)-\d+$")
_OWED_MAX = 256  # containers whose gpu-mem was served and slots not yet (the kubelet admits one pod at a time)


class NoMatchingPod(LookupError):
    """No pod bound to this node waits for an allocation of that size (the message says why)."""


def device_gpu(device_id: str) -> str:
    """The GPU UUID a ``iadeep.io/gpu-mem`` device ID (``<uuid>-mem-<k>``) or ``gpu-count`` slot
    (``<uuid>-slot-<k>``) names."""
    return _DEVICE_SUFFIX.sub("", device_id)


@dataclass(frozen=True)
class BoundPod:
    """A pod the extender bound to this node, as its annotations and spec describe it.

    Attributes:
        namespace / name / uid: the pod.
        gpu_indexes / gpu_uuids: the GPUs reserved for it, gang order.
        assume_ns: the reservation's time (Unix ns).
        containers: ``(container name, iadeep.io/gpu-mem units)`` of each container asking for GPU memory.
        slots: ``iadeep.io/gpu-count`` units of those containers, same order (0: none asked).
    """

    namespace: str
    name: str
    uid: str
    gpu_indexes: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    assume_ns: int
    containers: tuple[tuple[str, int], ...]
    slots: tuple[int, ...] = ()

    @property
    def units(self) -> int:
        return sum(u for _, u in self.containers)


class PodApi(Protocol):
    """The Kubernetes side the allocator needs (:class:`KubernetesPodApi`)."""

    def allocating_pods(self, node: str) -> list[BoundPod]:
        """Pods bound to ``node`` whose bind phase is ``allocating``."""

    def mark_allocated(self, pod: BoundPod) -> None:
        """Set the pod's bind phase to ``allocated``."""


def parse_pod(pod: dict[str, Any], node: str, resource: str, count_resource: str = COUNT_RESOURCE) -> BoundPod | None:
    """A :class:`BoundPod` from a pod object (as a dict), ``None`` when it is not one of ours on
    ``node`` in phase ``allocating`` or its annotations are malformed (logged)."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    if ann.get(BIND_PHASE) != ALLOCATING or ann.get(_NODE, node) != node:
        return None
    try:
        indexes = tuple(int(x) for x in ann[_GPU_INDEX].split(","))
        uuids = tuple(ann.get(_GPU_UUID, "").split(","))
        assume = int(ann[_ASSUME])
    except (KeyError, ValueError) as exc:
        log.warning("pod %s/%s: malformed iadeep annotations (%s), not matched", meta.get("namespace"), meta.get("name"), exc)
        return None
    containers, slots = [], []
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        units = limits.get(resource) or requests.get(resource)
        if units:
            containers.append((c["name"], int(str(units))))
            slots.append(int(str(limits.get(count_resource) or requests.get(count_resource) or 0)))
    return BoundPod(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), indexes, uuids, assume,
                    tuple(containers), tuple(slots))


class KubernetesPodApi:
    """:class:`PodApi` over the Kubernetes API (``kubernetes`` client).

    Args:
        api_client: a ``kubernetes.client.ApiClient``.
        resource: the memory resource name (``iadeep.io/gpu-mem``).
        count_resource: the slot resource name (``iadeep.io/gpu-count``).
    """

    def __init__(self, api_client: Any, resource: str = GPU_MEM_RESOURCE, count_resource: str = COUNT_RESOURCE) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.api_client = api_client
        self.resource = resource
        self.count_resource = count_resource

    def allocating_pods(self, node: str) -> list[BoundPod]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        out = []
        for p in pods.items:
            bp = parse_pod(self.api_client.sanitize_for_serialization(p), node, self.resource, self.count_resource)
            if bp is not None:
                out.append(bp)
        return out

    def mark_allocated(self, pod: BoundPod) -> None:
        self.core.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": {"annotations": {BIND_PHASE: ALLOCATED}}})


@dataclass
class Allocator:
    """Matches container requests to bound pods (module docstring); the caller serialises calls.

    Args:
        node: this node.
        pods: the Kubernetes side.
    """

    node: str
    pods: PodApi
    served: dict[str, set[str]] = field(default_factory=dict)  # pod uid -> containers served
    # (pod uid, container) -> pod: gpu-mem served, slots not yet; and slots served before gpu-mem
    owed: dict[tuple[str, str], BoundPod] = field(default_factory=dict)
    prepaid: set[tuple[str, str]] = field(default_factory=set)

    def candidates(self) -> list[BoundPod]:
        """Pods bound here in phase allocating, oldest assume time first."""
        found = sorted(self.pods.allocating_pods(self.node), key=lambda p: (p.assume_ns, p.namespace, p.name))
        live = {p.uid for p in found}
        for uid in list(self.served):
            if uid not in live:
                del self.served[uid]
        self.prepaid = {k for k in self.prepaid if k[0] in live}
        return found

    def _next_container(self, pod: BoundPod, units: int) -> str | None:
        done = self.served.get(pod.uid, set())
        for name, u in pod.containers:
            if name not in done:
                return name if u == units else None  # containers are served in spec order
        return None

    def match(self, device_ids: Sequence[str]) -> tuple[BoundPod, str]:
        """The pod and container a request for ``device_ids`` serves (not yet recorded).

        Raises:
            NoMatchingPod: none waits for that many units on this node.
        """
        units = len(device_ids)
        pods = self.candidates()
        fitting = [(p, c) for p in pods if (c := self._next_container(p, units)) is not None]
        if not fitting:
            seen = ", ".join(f"{p.namespace}/{p.name} ({[u for _, u in p.containers]} GiB)" for p in pods) or "none"
            raise NoMatchingPod(f"no pod bound to node {self.node} in phase allocating asks for {units} GiB of GPU "
                                f"memory in its next container (pods allocating here: {seen})")
        gpus = {device_gpu(d) for d in device_ids}
        for p, c in fitting:
            if gpus <= set(p.gpu_uuids):
                return p, c
        return fitting[0]

    def allocate(self, device_ids: Sequence[str]) -> dict[str, str]:
        """Serve one container: record it, mark the pod allocated after its last container,
        and return the container's environment.

        Raises:
            NoMatchingPod: see :meth:`match`.
        """
        pod, container = self.match(device_ids)
        done = self.served.setdefault(pod.uid, set())
        done.add(container)
        wants_slots = dict(zip((c for c, _ in pod.containers), pod.slots)).get(container, 0) > 0
        if (pod.uid, container) in self.prepaid:
            self.prepaid.discard((pod.uid, container))
        elif wants_slots:
            self.owed[(pod.uid, container)] = pod
            while len(self.owed) > _OWED_MAX:
                del self.owed[next(iter(self.owed))]
        if len(done) == len(pod.containers):
            self.pods.mark_allocated(pod)
            del self.served[pod.uid]
        units = len(device_ids)
        log.info("allocated %d GiB on GPU %s to %s/%s container %s", units, ",".join(pod.gpu_uuids),
                 pod.namespace, pod.name, container)
        return {
            "NVIDIA_VISIBLE_DEVICES": ",".join(pod.gpu_uuids),
            "IADEEP_GPU_INDEX": ",".join(str(i) for i in pod.gpu_indexes),
            "IADEEP_GPU_UUID": ",".join(pod.gpu_uuids),
            "IADEEP_GPU_MEM_LIMIT_MIB": str(units * 1024),
            "IADEEP_POD_GPU_MEM_LIMIT_MIB": str(pod.units * 1024),
            "IADEEP_POD": f"{pod.namespace}/{pod.name}",
        }

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """Device IDs for a container of ``size`` units: on the GPUs of the pod it will serve
        (spread evenly over a gang's GPUs), else packed on one GPU."""
        chosen = list(dict.fromkeys(must))[:size]  # each ID once, as the kubelet allocates them
        rest = [d for d in available if d not in chosen]
        try:
            pod, _ = self.match(["x"] * size)
            targets = list(pod.gpu_uuids)
        except NoMatchingPod:
            by_gpu: dict[str, int] = {}
            for d in rest:
                by_gpu[device_gpu(d)] = by_gpu.get(device_gpu(d), 0) + 1
            targets = sorted(by_gpu, key=lambda g: -by_gpu[g])
        per = -(-max(size - len(chosen), 0) // max(len(targets), 1))
        for g in targets:
            take = [d for d in rest if device_gpu(d) == g and d not in chosen][:per]
            chosen += take[: size - len(chosen)]
        for d in rest:  # not enough on the targets: fill from anywhere (the kubelet needs `size`)
            if len(chosen) >= size:
                break
            if d not in chosen:
                chosen.append(d)
        return chosen[:size]

    # -- gpu-count slots ----------------------------------------------------------------------

    def slot_pod(self, size: int, gpus: set[str] | None = None) -> tuple[BoundPod, str, bool] | None:
        """The container ``size`` slots are being allocated to (module docstring): ``(pod,
        container, owed)``, owed when its ``gpu-mem`` was served already; ``None`` when no pod
        waits for that many slots (``gpus``: only a pod whose GPUs hold them)."""
        for (uid, container), pod in reversed(self.owed.items()):  # the newest: the pod being admitted
            if len(pod.gpu_uuids) == size and (gpus is None or gpus <= set(pod.gpu_uuids)):
                return pod, container, True
        for pod in self.candidates():
            done = self.served.get(pod.uid, set())
            for (name, _), n in zip(pod.containers, pod.slots):
                if name in done or (pod.uid, name) in self.prepaid:
                    continue
                if n == size and (gpus is None or gpus <= set(pod.gpu_uuids)):
                    return pod, name, False
                break  # containers are served in spec order
        return None

    def preferred_slots(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """Slot IDs for a container asking for ``size`` GPUs: a free slot on each GPU the
        extender chose for its pod; else the first available ones (the kubelet needs ``size``)."""
        chosen = list(dict.fromkeys(must))[:size]  # each ID once, as the kubelet allocates them
        found = self.slot_pod(size)
        if found is not None:
            for g in found[0].gpu_uuids:
                if len(chosen) >= size or any(device_gpu(d) == g for d in chosen):
                    continue
                free = next((d for d in available if device_gpu(d) == g and d not in chosen), None)
                if free is not None:
                    chosen.append(free)
        for d in available:
            if len(chosen) >= size:
                break
            if d not in chosen:
                chosen.append(d)
        return chosen[:size]

    def allocate_slots(self, device_ids: Sequence[str]) -> dict[str, str]:
        """Record the slots' container (no environment: the ``gpu-mem`` answer carries the GPU).

        Slots on GPUs no waiting container was given are still granted (the kubelet has counted
        them already): logged, since it means a slot of another GPU was taken."""
        gpus = {device_gpu(d) for d in device_ids}
        found = self.slot_pod(len(device_ids), gpus)
        if found is None:
            log.warning("gpu-count slots %s match no pod allocating here (slots of another GPU taken)", list(device_ids))
            return {}
        pod, container, owed = found
        if owed:
            self.owed.pop((pod.uid, container), None)
        else:
            self.prepaid.add((pod.uid, container))
        log.info("slots %s to %s/%s container %s", ",".join(device_ids), pod.namespace, pod.name, container)
        return {}
