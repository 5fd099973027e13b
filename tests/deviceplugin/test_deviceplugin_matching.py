"""The allocation rule over pods in their wire form (built with the Kubernetes client's models and
serialised as the API server sends them), through the kubelet peer's gRPC calls: oldest assume
time first, the device IDs' GPU preferred, one share per container, concurrent requests each get
their own pod, malformed annotations never matched. The same rule against the real kube-apiserver
is tests/deviceplugin/test_deviceplugin_allocate.py (needs ``make controlplane``)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from kubernetes import client

from iadeep.deviceplugin import device_gpu, mem_device_ids, slot_device_ids
from iadeep.deviceplugin._allocate import ALLOCATED, BIND_PHASE, parse_pod
from iadeep.state import PlacementPolicy
from iadeep.testing.kubelet import pb2

SERIALISE = client.ApiClient().sanitize_for_serialization


class PodsInMemory:
    """The pods of one API server, kept as wire dicts (the protocol of KubernetesPodApi)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()

    def add(self, name: str, node: str, gpu, containers: dict[str, int], assume_ns: int, slots: int = 0,
            **extra_ann) -> None:
        """A pod as the extender's bind leaves it; ``slots``: each container's ``iadeep.io/gpu-count``."""
        count = {"iadeep.io/gpu-count": str(slots)} if slots else {}
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, namespace="ns", uid=f"uid-{name}", annotations={
                "iadeep.io/gpu-index": str(gpu.index), "iadeep.io/gpu-uuid": gpu.uuid,
                "iadeep.io/gpu-mem-gib": str(sum(containers.values())), "iadeep.io/assume-time": str(assume_ns),
                BIND_PHASE: "allocating", "iadeep.io/node": node, **extra_ann}),
            spec=client.V1PodSpec(node_name=node, containers=[
                client.V1Container(name=c, image="x", resources=client.V1ResourceRequirements(
                    limits={"iadeep.io/gpu-mem": str(u), **count})) for c, u in containers.items()]))
        with self.lock:
            self.pods[name] = SERIALISE(pod)

    def allocating_pods(self, node):
        with self.lock:
            found = [parse_pod(p, node, "iadeep.io/gpu-mem") for p in self.pods.values()
                     if p["spec"]["nodeName"] == node]
        return [p for p in found if p is not None]

    def mark_allocated(self, pod):
        with self.lock:
            self.pods[pod.name]["metadata"]["annotations"][BIND_PHASE] = ALLOCATED

    def phase(self, name: str) -> str:
        return self.pods[name]["metadata"]["annotations"][BIND_PHASE]


def start(kubelet, make_plugin, pods):
    svc = make_plugin(pods=pods)
    regs = {}
    for _ in range(2):
        r = kubelet.registration()
        regs[r.resource_name] = r.endpoint
    return svc, kubelet.plugin(regs["iadeep.io/gpu-mem"]), kubelet.plugin(regs["iadeep.io/gpu-count"])


def allocate(stub, *id_lists):
    req = pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids) for ids in id_lists])
    return [dict(r.envs) for r in stub.Allocate(req, timeout=30).container_responses]


def test_concurrent_same_size_pods_each_get_their_own_gpu(kubelet, make_plugin) -> None:
    pods = PodsInMemory()
    svc, stub, _ = start(kubelet, make_plugin, pods)
    g0, g1 = svc.gpus
    layout = {f"p{i}": (g0 if i % 2 == 0 else g1) for i in range(8)}
    for i, (name, gpu) in enumerate(layout.items()):
        pods.add(name, "n1", gpu, {"main": 2}, 1_000 + i)
    free = {g.uuid: mem_device_ids(g) for g in (g0, g1)}
    ids = {name: [free[gpu.uuid].pop() for _ in range(2)] for name, gpu in layout.items()}
    calls = list(reversed(list(ids.values())))  # the kubelet's order need not be the pods' order
    with ThreadPoolExecutor(8) as ex:
        envs = [e[0] for e in ex.map(lambda v: allocate(stub, v), calls)]
    for sent, env in zip(calls, envs):  # the container runs on the GPU whose units the kubelet counted
        assert {i.rsplit("-mem-", 1)[0] for i in sent} == {env["NVIDIA_VISIBLE_DEVICES"]}
    served = {e["IADEEP_POD"]: e for e in envs}
    assert set(served) == {f"ns/{n}" for n in layout}
    for name, gpu in layout.items():
        assert served[f"ns/{name}"]["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert pods.phase(name) == "allocated"


def test_oldest_assume_time_first_and_preferred_ids_on_its_gpu(kubelet, make_plugin) -> None:
    pods = PodsInMemory()
    svc, stub, count = start(kubelet, make_plugin, pods)
    g0, g1 = svc.gpus
    pods.add("young", "n1", g0, {"main": 3}, 2_000, slots=1)
    pods.add("old", "n1", g1, {"main": 3}, 1_000, slots=1)
    pods.add("elsewhere", "n2", g1, {"main": 3}, 10)  # bound to another node: never matched here
    available = mem_device_ids(g0) + mem_device_ids(g1)
    pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=[],
                                                allocation_size=3)]), timeout=10)
    chosen = list(pref.container_responses[0].deviceIDs)
    assert len(chosen) == 3 and all(i.startswith(g1.uuid) for i in chosen)
    twice = mem_device_ids(g1)[0]  # a must-include ID named twice is preferred once
    pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=[twice, twice],
                                                allocation_size=3)]), timeout=10)
    again = list(pref.container_responses[0].deviceIDs)
    assert len(again) == len(set(again)) == 3 and again[0] == twice
    gpus = count.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=slot_device_ids(g0, 1) + slot_device_ids(g1, 1),
                                                allocation_size=1)]), timeout=10)
    assert list(gpus.container_responses[0].deviceIDs) == slot_device_ids(g1, 1)
    # IDs on no pod's GPU in particular (the kubelet ignored the preference): oldest first
    (env,) = allocate(stub, [mem_device_ids(g0)[0], mem_device_ids(g1)[0], mem_device_ids(g1)[1]])
    assert env["IADEEP_POD"] == "ns/old" and env["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
    (env,) = allocate(stub, mem_device_ids(g0)[:3])
    assert env["IADEEP_POD"] == "ns/young" and env["NVIDIA_VISIBLE_DEVICES"] == g0.uuid
    assert pods.phase("elsewhere") == "allocating"


def test_multi_container_pod_gets_one_share_per_container(kubelet, make_plugin) -> None:
    pods = PodsInMemory()
    svc, stub, _ = start(kubelet, make_plugin, pods)
    g1 = svc.gpus[1]
    pods.add("two", "n1", g1, {"trainer": 4, "sidecar": 6}, 1)
    ids = mem_device_ids(g1)
    first, second = allocate(stub, ids[:4], ids[4:10])  # one AllocateRequest, two containers
    assert (first["IADEEP_GPU_MEM_LIMIT_MIB"], second["IADEEP_GPU_MEM_LIMIT_MIB"]) == ("4096", "6144")
    assert first["IADEEP_POD_GPU_MEM_LIMIT_MIB"] == second["IADEEP_POD_GPU_MEM_LIMIT_MIB"] == "10240"
    assert first["NVIDIA_VISIBLE_DEVICES"] == second["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
    assert pods.phase("two") == "allocated"


def test_malformed_annotations_are_never_matched(kubelet, make_plugin) -> None:
    import grpc
    import pytest

    pods = PodsInMemory()
    svc, stub, _ = start(kubelet, make_plugin, pods)
    pods.add("bad", "n1", svc.gpus[0], {"main": 2}, 1, **{"iadeep.io/assume-time": "yesterday"})
    with pytest.raises(grpc.RpcError) as err:
        allocate(stub, mem_device_ids(svc.gpus[0])[:2])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "pods allocating here: none" in err.value.details()


def test_pods_co_located_on_one_gpu_get_their_own_slots_of_it(kubelet, make_plugin, etcd_store) -> None:
    """The core of the product on a real kubelet: two pods the extender put on one GPU each get
    a gpu-count device (a co-location slot) of that GPU, different ones, and the same GPU in
    their environment. The kubelet admits one pod at a time and allocates a container's
    resources in no fixed order (a Go map): here the first pod gets gpu-mem first, the second
    gpu-count first."""
    etcd_store.put_placement(PlacementPolicy("iadeep", 2, 1.0))  # the extender's co-location limit
    pods = PodsInMemory()
    svc, mem, count = start(kubelet, make_plugin, pods)
    g0, g1 = svc.gpus
    pods.add("a", "n1", g1, {"main": 6}, 1_000, slots=1)
    pods.add("b", "n1", g1, {"main": 8}, 2_000, slots=1)
    free_slots = [d.ID for d in next(iter(count.ListAndWatch(pb2.Empty(), timeout=10))).devices]  # as advertised
    assert free_slots == slot_device_ids(g0, 2) + slot_device_ids(g1, 2)
    free_mem = mem_device_ids(g0) + mem_device_ids(g1)

    def preferred(stub, free, size):
        r = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
            pb2.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=size)]), timeout=10)
        ids = list(r.container_responses[0].deviceIDs)
        for i in ids:
            free.remove(i)
        return ids

    def admit_slot():
        ids = preferred(count, free_slots, 1)
        assert allocate(count, ids) == [{}]  # the gpu-mem answer carries the GPU
        return ids

    def admit_mem(units):
        (env,) = allocate(mem, preferred(mem, free_mem, units))
        return env

    env_a, slot_a = admit_mem(6), admit_slot()
    slot_b, env_b = admit_slot(), admit_mem(8)
    assert slot_a != slot_b and {device_gpu(i) for i in slot_a + slot_b} == {g1.uuid}
    assert env_a["NVIDIA_VISIBLE_DEVICES"] == env_b["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
    assert (env_a["IADEEP_POD"], env_b["IADEEP_POD"]) == ("ns/a", "ns/b")
    assert pods.phase("a") == pods.phase("b") == "allocated"
    assert free_slots == slot_device_ids(g0, 2)  # GPU 0's slots (listed first) untouched


def test_metrics_count_the_kubelets_calls_and_the_devices_advertised(kubelet, make_plugin) -> None:
    """``/metrics`` of the plugin's HTTP app after real gRPC calls from the kubelet peer: an
    Allocate served, one refused (no pod waits for that size), the device lists streamed, both
    resources registered, the device IDs advertised by health."""
    from fastapi.testclient import TestClient

    from iadeep._prometheus import samples

    pods = PodsInMemory()
    svc, stub, _ = start(kubelet, make_plugin, pods)
    g0, _ = svc.gpus
    pods.add("p", "n1", g0, {"main": 2}, 1_000)
    next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10)))  # the first device list of a stream
    (env,) = allocate(stub, mem_device_ids(g0)[:2])
    assert env["IADEEP_POD"] == "ns/p"
    with pytest.raises(grpc.RpcError) as err:
        allocate(stub, mem_device_ids(g0)[2:5])  # 3 GiB: nobody waits for that
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with TestClient(svc.app()) as http:
        r = http.get("/metrics")
    assert r.status_code == 200
    got = samples(r.text)
    mem, count = "iadeep.io/gpu-mem", "iadeep.io/gpu-count"
    assert got[("iadeep_deviceplugin_allocations_total", (("outcome", "ok"), ("resource", mem)))] == 1
    assert got[("iadeep_deviceplugin_allocations_total", (("outcome", "no_matching_pod"), ("resource", mem)))] == 1
    assert got[("iadeep_deviceplugin_device_updates_total", (("resource", mem),))] >= 1
    assert got[("iadeep_deviceplugin_registrations_total", (("outcome", "ok"),))] == 1
    assert got[("iadeep_deviceplugin_registered", ())] == 1
    assert got[("iadeep_deviceplugin_gpus", ())] == 2
    assert got[("iadeep_deviceplugin_devices", (("health", "Healthy"), ("resource", mem)))] == 2 * 16
    assert got[("iadeep_deviceplugin_devices", (("health", "Unhealthy"), ("resource", mem)))] == 0
    assert got[("iadeep_deviceplugin_devices", (("health", "Healthy"), ("resource", count)))] == 2  # 1 slot per GPU
    assert got[("iadeep_deviceplugin_inventory_publications_total", (("outcome", "ok"),))] >= 1
