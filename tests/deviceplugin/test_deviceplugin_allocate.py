"""Allocate against pods on the real local control plane (kube-apiserver, kwok node), annotated
exactly as the extender's bind annotates them: concurrent Allocates for several pods bound to one
node each get the GPU the extender chose; a multi-container pod gets one share per container;
the bind phase turns ``allocated``; GetPreferredAllocation keeps a container on its pod's GPU."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from iadeep.deviceplugin import KubernetesPodApi, mem_device_ids
from iadeep.testing.kubelet import pb2

ALLOC = "iadeep.io/bind-phase"


def bound_pod(core, ns: str, node: str, name: str, gpu, containers: dict[str, int], assume_ns: int) -> None:
    """A pod as the extender leaves it after bind (annotations of iadeep.extender._bind, nodeName set)."""
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={
            "iadeep.io/gpu-index": str(gpu.index), "iadeep.io/gpu-uuid": gpu.uuid,
            "iadeep.io/gpu-mem-gib": str(sum(containers.values())), "iadeep.io/assume-time": str(assume_ns),
            ALLOC: "allocating", "iadeep.io/node": node}),
        spec=client.V1PodSpec(node_name=node, containers=[
            client.V1Container(name=c, image="busybox", resources=client.V1ResourceRequirements(
                limits={"iadeep.io/gpu-mem": str(units)}, requests={"iadeep.io/gpu-mem": str(units)}))
            for c, units in containers.items()]))
    core.create_namespaced_pod(ns, body)


def phase(core, ns: str, name: str) -> str:
    return core.read_namespaced_pod(name, ns).metadata.annotations[ALLOC]


def setup(control_plane, k8s_client, kubelet, make_plugin):
    node = control_plane.add_nodes(1, gpus=2, gpu_mem_gib=16, prefix=f"dp-{uuid.uuid4().hex[:6]}-")[0]
    svc = make_plugin(node=node, pods=KubernetesPodApi(k8s_client))
    regs = {}
    for _ in range(2):
        r = kubelet.registration()
        regs[r.resource_name] = r.endpoint
    return node, svc, kubelet.plugin(regs["iadeep.io/gpu-mem"])


def allocate(stub, *id_lists):
    req = pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids) for ids in id_lists])
    return stub.Allocate(req, timeout=30)


def test_concurrent_allocates_each_get_the_gpu_the_extender_chose(control_plane, k8s_client, k8s_namespace,
                                                                  kubelet, make_plugin) -> None:
    core = client.CoreV1Api(k8s_client)
    node, svc, stub = setup(control_plane, k8s_client, kubelet, make_plugin)
    g0, g1 = svc.gpus
    now = time.time_ns()
    pods = {"p0": g0, "p1": g1, "p2": g0, "p3": g1}  # same size, bound within a microsecond of each other
    for i, (name, gpu) in enumerate(pods.items()):
        bound_pod(core, k8s_namespace, node, name, gpu, {"main": 4}, now + i * 1000)
    free = {g.uuid: mem_device_ids(g) for g in (g0, g1)}
    taken = {name: [free[gpu.uuid].pop() for _ in range(4)] for name, gpu in pods.items()}  # as the kubelet picks
    with ThreadPoolExecutor(4) as ex:
        answers = list(ex.map(lambda ids: allocate(stub, ids).container_responses[0].envs, taken.values()))
    for sent, env in zip(taken.values(), answers):  # the GPU whose units the kubelet counted
        assert {i.rsplit("-mem-", 1)[0] for i in sent} == {env["NVIDIA_VISIBLE_DEVICES"]}
    served = {a["IADEEP_POD"].split("/")[1]: a for a in answers}
    assert set(served) == set(pods)  # every pod once: no pod served twice, none forgotten
    for name, env in served.items():
        assert env["NVIDIA_VISIBLE_DEVICES"] == pods[name].uuid == env["IADEEP_GPU_UUID"]
        assert env["IADEEP_GPU_INDEX"] == str(pods[name].index)
        assert env["IADEEP_GPU_MEM_LIMIT_MIB"] == "4096"
        assert phase(core, k8s_namespace, name) == "allocated"


def test_preferred_allocation_keeps_the_container_on_its_pods_gpu(control_plane, k8s_client, k8s_namespace,
                                                                  kubelet, make_plugin) -> None:
    core = client.CoreV1Api(k8s_client)
    node, svc, stub = setup(control_plane, k8s_client, kubelet, make_plugin)
    g0, g1 = svc.gpus
    bound_pod(core, k8s_namespace, node, "old", g1, {"main": 5}, time.time_ns() - 10**9)
    bound_pod(core, k8s_namespace, node, "new", g0, {"main": 5}, time.time_ns())
    available = mem_device_ids(g0) + mem_device_ids(g1)
    pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=5)]), timeout=10)
    ids = list(pref.container_responses[0].deviceIDs)
    assert len(ids) == 5 and all(i.startswith(g1.uuid) for i in ids)  # the oldest pod's GPU
    env = allocate(stub, ids).container_responses[0].envs
    assert env["IADEEP_POD"].endswith("/old") and env["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
    assert phase(core, k8s_namespace, "new") == "allocating"


def test_multi_container_pod_gets_one_share_per_container(control_plane, k8s_client, k8s_namespace,
                                                          kubelet, make_plugin) -> None:
    core = client.CoreV1Api(k8s_client)
    node, svc, stub = setup(control_plane, k8s_client, kubelet, make_plugin)
    g1 = svc.gpus[1]
    bound_pod(core, k8s_namespace, node, "two", g1, {"trainer": 4, "sidecar": 6}, time.time_ns())
    ids = mem_device_ids(g1)
    first = allocate(stub, ids[:4]).container_responses[0].envs
    assert first["IADEEP_GPU_MEM_LIMIT_MIB"] == "4096" and first["IADEEP_POD_GPU_MEM_LIMIT_MIB"] == "10240"
    assert phase(core, k8s_namespace, "two") == "allocating"  # one container still to serve
    second = allocate(stub, ids[4:10]).container_responses[0].envs
    assert second["IADEEP_GPU_MEM_LIMIT_MIB"] == "6144" and second["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
    assert phase(core, k8s_namespace, "two") == "allocated"
