"""End to end on the local control plane: the device plugin (emulated GPUs) publishes the node's
inventory, the real kube-scheduler sends the pod to our extender, which binds it and marks it;
the kubelet peer driven by the test then asks the device plugin for a preferred allocation and
allocates: the container gets the GPU the extender chose and the pod's bind phase turns allocated."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from extender_support import SCHEDULER, ThreadServer, gpu_pod, wait_for

from iadeep.deviceplugin import DevicePluginService, DevicePluginSettings, EmulatedBackend
from iadeep.deviceplugin import KubernetesPodApi as DevicePluginPods
from iadeep.extender import ANNOTATION_BIND_PHASE, ANNOTATION_GPU_INDEX, ANNOTATION_GPU_UUID, KubernetesPodApi, KubeSettings, create_app
from iadeep.testing.kubelet import KubeletPeer, pb2

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")


def test_pod_bound_by_the_extender_is_allocated_its_gpu(control_plane, k8s_client, k8s_namespace, store,
                                                        etcd_settings, make_service, extender_port) -> None:
    (node,) = control_plane.add_nodes(1, gpus=2, gpu_mem_gib=16, prefix=f"dp{uuid.uuid4().hex[:6]}-")
    core = client.CoreV1Api(k8s_client)
    with tempfile.TemporaryDirectory(prefix="dp-") as d:
        kubelet = KubeletPeer(Path(d)).start()
        settings = DevicePluginSettings(node=node, socket_dir=Path(d), backend="emulated", poll_s=0.2, etcd=etcd_settings)
        plugin = DevicePluginService(settings, backend=EmulatedBackend(node, 2, 16), store=store,
                                     pods=DevicePluginPods(control_plane.api_client())).start()
        api = KubernetesPodApi(KubeSettings(), api_client=control_plane.api_client())
        try:
            regs = {}
            for _ in range(2):
                r = kubelet.registration()
                regs[r.resource_name] = r.endpoint
            assert store.inventories()[node] == plugin.inventory()  # the record the extender reads
            with ThreadServer(create_app(service=make_service(pod_api=api)), port=extender_port):
                core.create_namespaced_pod(k8s_namespace, gpu_pod("trainer", mem=8, namespace=k8s_namespace,
                                                                  scheduler=SCHEDULER))
                pod = wait_for(lambda: core.read_namespaced_pod("trainer", k8s_namespace),
                               lambda p: (p.metadata.annotations or {}).get(ANNOTATION_BIND_PHASE) == "allocating",
                               timeout=60, what="bound by the extender")
            ann = pod.metadata.annotations
            assert pod.spec.node_name == node
            chosen = plugin.gpus[int(ann[ANNOTATION_GPU_INDEX])]
            assert ann[ANNOTATION_GPU_UUID] == chosen.uuid
            stub = kubelet.plugin(regs["iadeep.io/gpu-mem"])
            available = [dev.ID for dev in next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10))).devices]
            pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
                pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=8)]), timeout=10)
            ids = list(pref.container_responses[0].deviceIDs)
            assert len(ids) == 8 and all(i.startswith(chosen.uuid + "-mem-") for i in ids)
            env = stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids)]),
                                timeout=30).container_responses[0].envs
            assert env["NVIDIA_VISIBLE_DEVICES"] == chosen.uuid and env["IADEEP_GPU_INDEX"] == str(chosen.index)
            assert env["IADEEP_GPU_MEM_LIMIT_MIB"] == "8192"
            assert core.read_namespaced_pod("trainer", k8s_namespace).metadata.annotations[ANNOTATION_BIND_PHASE] == "allocated"
        finally:
            plugin.stop()
            kubelet.stop()
            api.close()
