"""Binds to a node whose device plugin serves ``Allocate`` take turns (iadeep.extender._admission).

The kubelet's ``Allocate`` names device IDs, never the pod, so two pods of the same size waiting
for it on one node cannot be told apart (two pods can swap GPUs on the real node). The
first tests drive the gate alone; the last ones run the extender's bind against the real
kube-apiserver and the real device plugin (emulated GPUs), with the test playing the kubelet over
the plugin's gRPC socket, as ``test_extender_deviceplugin_e2e.py`` does."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from extender_support import ThreadServer, gpu_pod, node

from iadeep.extender import ANNOTATION_BIND_PHASE, ANNOTATION_GPU_UUID, create_app
from iadeep.extender._admission import AdmissionBusy, AdmissionGate
from iadeep.extender._bind import PodStatus
from iadeep.state import GpuInfo, NodeInventory

R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}
NOBODY = "nobody-schedules-this"


def _pod(uid: str, *, node: str = "n1", phase: str = "Pending", bind_phase: str = "allocating") -> PodStatus:
    return PodStatus(uid, "ns", f"pod-{uid}", phase, node, bind_phase=bind_phase)


# -- the gate alone --------------------------------------------------------------------------------

def test_a_pod_holds_its_node_until_it_is_served_running_ended_or_deleted() -> None:
    gate = AdmissionGate()
    gate.reset([_pod("a"), _pod("b", node="n2"), _pod("c", bind_phase="allocated"), _pod("d", node="")])
    assert set(gate.waiting("n1")) == {"a"} and set(gate.waiting("n2")) == {"b"}
    gate.observe("MODIFIED", _pod("a", bind_phase="allocated"))  # the device plugin served it
    gate.observe("MODIFIED", _pod("b", node="n2", phase="Running"))  # admitted (annotation patch lost)
    assert gate.waiting("n1") == {} and gate.waiting("n2") == {}
    for event, pod in [("ADDED", _pod("e")), ("DELETED", _pod("e")), ("ADDED", _pod("f")),
                       ("MODIFIED", _pod("f", phase="Failed"))]:  # rejected at admission: never served
        gate.observe(event, pod)
    assert gate.waiting("n1") == {}
    gate.observe("BOOKMARK", None)


def test_a_bind_waits_for_the_pod_ahead_and_fails_naming_it_when_the_wait_runs_out() -> None:
    gate = AdmissionGate()
    gate.observe("ADDED", _pod("a"))
    with pytest.raises(AdmissionBusy, match=r"n1: pod\(s\) ns/pod-a \(\d+\.\d s\) bound there still wait"):
        with gate.turn("n1", "b", wait_s=0.2):
            pass
    with gate.turn("n2", "b", wait_s=0.2) as turn:  # another node is free
        assert turn.node == "n2"
    with gate.turn("n1", "a", wait_s=0.2):  # a pod never waits for itself (a retried bind)
        pass

    served_at: list[float] = []

    def serve() -> None:
        time.sleep(0.3)
        served_at.append(time.monotonic())
        gate.observe("MODIFIED", _pod("a", bind_phase="allocated"))

    threading.Thread(target=serve).start()
    with gate.turn("n1", "b", wait_s=60) as turn:
        entered = time.monotonic()
        turn.bound("b", "ns", "pod-b")
    assert served_at and entered >= served_at[0]
    assert set(gate.waiting("n1")) == {"b"}


def test_binds_to_one_node_take_turns_and_each_waits_for_the_one_before() -> None:
    gate = AdmissionGate()
    order: list[str] = []

    def bind(uid: str) -> None:
        with gate.turn("n1", uid, wait_s=60) as turn:
            order.append(uid)
            turn.bound(uid, "ns", f"pod-{uid}")

    threads = [threading.Thread(target=bind, args=(u,)) for u in "xyz"]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60  # bounds a hang only
    while len(order) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(order) == 1  # the others wait for the first to be served
    for _ in range(2):
        gate.observe("MODIFIED", _pod(order[-1], bind_phase="allocated"))
        n = len(order)
        while len(order) == n and time.monotonic() < deadline:
            time.sleep(0.01)
    for t in threads:
        t.join(60)
    assert sorted(order) == ["x", "y", "z"]


def test_a_waiting_bind_reads_the_pod_ahead_when_no_event_tells() -> None:
    """The plugin's annotation may reach the follower before the bind recorded the pod, or the
    follower may be reconnecting: the wait reads the pod ahead itself."""
    reads: list[str] = []
    served = {"a": False}

    def still_allocating(ns: str, name: str, uid: str) -> bool:
        reads.append(uid)
        return not served[uid]

    gate = AdmissionGate(still_allocating, poll_s=0.05)
    gate.observe("ADDED", _pod("a"))
    threading.Timer(0.2, lambda: served.update(a=True)).start()
    with gate.turn("n1", "b", wait_s=60):
        pass
    assert reads and set(reads) == {"a"} and gate.waiting("n1") == {}


# -- the extender with the real API server and device plugin ------------------------------------

client = pytest.importorskip("kubernetes.client")


@pytest.fixture
def plugin_node(control_plane, k8s_client, store, etcd_settings):
    """A node no kwok manages (its pods stay Pending: only the test's kubelet acts), with the real
    device plugin (2 emulated 16-GiB GPUs) publishing its inventory and the test as its kubelet."""
    from iadeep.deviceplugin import DevicePluginService, DevicePluginSettings, EmulatedBackend
    from iadeep.deviceplugin import KubernetesPodApi as DevicePluginPods
    from iadeep.testing.kubelet import KubeletPeer

    core = client.CoreV1Api(k8s_client)
    name = f"adm{uuid.uuid4().hex[:6]}"
    core.create_node(node(name, gpus=2, gpu_mem_gib=16))
    with tempfile.TemporaryDirectory(prefix="adm-") as d:
        kubelet = KubeletPeer(Path(d)).start()
        settings = DevicePluginSettings(node=name, socket_dir=Path(d), backend="emulated", poll_s=0.2,
                                        etcd=etcd_settings)
        plugin = DevicePluginService(settings, backend=EmulatedBackend(name, 2, 16), store=store,
                                     pods=DevicePluginPods(control_plane.api_client())).start()
        try:
            regs = {}
            for _ in range(2):
                r = kubelet.registration()
                regs[r.resource_name] = r.endpoint
            assert store.inventories()[name].allocates  # the plugin says it serves Allocate
            yield name, plugin, kubelet.plugin(regs["iadeep.io/gpu-mem"])
        finally:
            plugin.stop()
            kubelet.stop()
            core.delete_node(name)


def _admit(stub, size: int) -> dict[str, str]:
    """What the kubelet does at a container's admission: preferred allocation, then Allocate."""
    from iadeep.testing.kubelet import pb2

    available = [dev.ID for dev in next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10))).devices]
    pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)]), timeout=10)
    ids = list(pref.container_responses[0].deviceIDs)
    resp = stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids)]),
                         timeout=30)
    return dict(resp.container_responses[0].envs)


def test_two_pods_of_one_size_bound_at_once_to_a_device_plugin_node_each_get_their_own_gpu(
        k8s_client, k8s_namespace, store, make_service, api, plugin_node) -> None:
    """12 GiB each on 16-GiB GPUs: each needs its own GPU, and the plugin cannot tell the two
    requests apart. Both binds are sent at once; the second is bound only after the kubelet
    served the first, so whichever pod it admits first is the only candidate."""
    name, plugin, stub = plugin_node
    core = client.CoreV1Api(k8s_client)
    pods = [core.create_namespaced_pod(k8s_namespace, gpu_pod(n, mem=12, namespace=k8s_namespace, scheduler=NOBODY,
                                                               annotations=R18)) for n in ("twin-a", "twin-b")]
    served: dict[str, dict[str, str]] = {}
    # a bind waits at most half its budget: 60 s leaves the test's kubelet 30 s on a loaded machine
    with ThreadServer(create_app(service=make_service(pod_api=api, call_budget_s=60, admission_wait_s=30))) as srv, \
            httpx.Client(timeout=90) as http, ThreadPoolExecutor(2) as ex:
        binds = [ex.submit(http.post, f"{srv.url}/iadeep/bind",
                           json={"PodName": p.metadata.name, "PodNamespace": k8s_namespace,
                                 "PodUID": p.metadata.uid, "Node": name}) for p in pods]
        for _ in range(2):  # the kubelet admits each pod as it arrives bound
            deadline = time.monotonic() + 60
            while True:
                bound = [p for p in core.list_namespaced_pod(k8s_namespace).items
                         if p.spec.node_name == name and p.metadata.name not in served]
                if bound or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert len(bound) == 1, [p.metadata.name for p in bound]  # never two waiting at once
            served[bound[0].metadata.name] = _admit(stub, 12)
        assert [b.result().json() for b in binds] == [{"Error": ""}] * 2
    uuids = set()
    for pod_name, env in served.items():
        ann = core.read_namespaced_pod(pod_name, k8s_namespace).metadata.annotations
        assert ann[ANNOTATION_BIND_PHASE] == "allocated"
        assert env["NVIDIA_VISIBLE_DEVICES"] == ann[ANNOTATION_GPU_UUID] and env["IADEEP_POD"].endswith(pod_name)
        uuids.add(ann[ANNOTATION_GPU_UUID])
    assert len(uuids) == 2


def test_a_bind_behind_a_pod_never_served_fails_naming_it_and_holds_nothing(
        k8s_client, k8s_namespace, store, make_service, api, plugin_node) -> None:
    name, _, _ = plugin_node
    core = client.CoreV1Api(k8s_client)
    first, second = (core.create_namespaced_pod(k8s_namespace, gpu_pod(n, mem=4, namespace=k8s_namespace,
                                                                        scheduler=NOBODY, annotations=R18))
                     for n in ("first", "second"))

    def body(p):
        return {"PodName": p.metadata.name, "PodNamespace": k8s_namespace, "PodUID": p.metadata.uid, "Node": name}

    with ThreadServer(create_app(service=make_service(pod_api=api, admission_wait_s=1))) as srv:
        assert httpx.post(f"{srv.url}/iadeep/bind", json=body(first), timeout=30).json() == {"Error": ""}
        err = httpx.post(f"{srv.url}/iadeep/bind", json=body(second), timeout=30).json()["Error"]
        assert f"{k8s_namespace}/first" in err and "still wait for the device plugin's Allocate" in err, err
        assert core.read_namespaced_pod("second", k8s_namespace).spec.node_name is None
        assert [a.pod_uid for a in store.assignments(name)] == [first.metadata.uid]
        # a pod the kubelet rejected (Failed) never holds the node
        status = {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}}
        core.patch_namespaced_pod_status("first", k8s_namespace, status)
        assert httpx.post(f"{srv.url}/iadeep/bind", json=body(second), timeout=30).json() == {"Error": ""}


def test_nodes_without_a_device_plugin_are_not_gated(k8s_client, k8s_namespace, store, make_service, api) -> None:
    """kwok-style inventories (no kubelet calls Allocate: pods stay allocating) are not gated: with
    no wait allowed (``admission_wait_s=0``, so a gated bind behind an allocating pod fails at once)
    the second pod binds while the first is still allocating."""
    core = client.CoreV1Api(k8s_client)
    name = f"kw{uuid.uuid4().hex[:6]}"
    core.create_node(node(name, gpus=2, gpu_mem_gib=16))
    store.put_inventory(NodeInventory(name, tuple(GpuInfo(i, 16.0, f"GPU-{name}-{i}") for i in range(2))))
    pods = [core.create_namespaced_pod(k8s_namespace, gpu_pod(n, mem=4, namespace=k8s_namespace, scheduler=NOBODY,
                                                               annotations=R18)) for n in ("k1", "k2")]
    try:
        with ThreadServer(create_app(service=make_service(pod_api=api, admission_wait_s=0))) as srv:
            for p in pods:
                assert httpx.post(f"{srv.url}/iadeep/bind", timeout=30, json={
                    "PodName": p.metadata.name, "PodNamespace": k8s_namespace, "PodUID": p.metadata.uid,
                    "Node": name}).json() == {"Error": ""}
        assert core.read_namespaced_pod("k1", k8s_namespace).metadata.annotations[ANNOTATION_BIND_PHASE] == "allocating"
    finally:
        core.delete_node(name)
