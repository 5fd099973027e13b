"""GPUs on the real node, with the middleware rolled out as a user rolls it out: the k8s/
kustomizations through ``k8s/local`` (the values only the cluster knows written over it at rollout
time) rendered, applied and waited for by the code of the ``iadeep_rollout`` DAG
(:mod:`iadeep.orchestration`; the ``stack`` fixture, tests/node/node_stack.py). The extender and
``iadeep-scheduler`` (a second kube-scheduler with
the shipped profile), the device plugin and coordinator DaemonSets and the tuner then run as pods
of their images on the real node; the device plugin (emulated GPUs, chosen by ``k8s/local``: this
machine has none) registers with the real kubelet; ``iadeep-scheduler`` sends GPU pods through the
extender onto the real node; the kubelet calls the plugin's GetPreferredAllocation/Allocate and
starts the containers with the GPU the extender chose in their environment. Every component here is
the real one (kubelet, containerd, runc, kube-scheduler, apiserver, etcd, our images); only the
GPUs are emulated, so nothing checks that CUDA sees the UUID."""

from __future__ import annotations

import pytest
from kubernetes import client
from node_stack import (ANN_INDEX, ANN_PHASE, ANN_UUID, GPU_COUNT, GPU_MEM, SYSTEM, Stack, capacity, env_of, full_capacity,
                        gpu_pod, http_get, tail_log)
from node_support import pod_log, wait_phase

from iadeep.dev import Node
from iadeep.testing import wait_for

pytestmark = pytest.mark.slow


def test_the_rollout_brings_every_component_up_on_the_real_node(stack: Stack, real_node: Node) -> None:
    workloads = {f"{d['kind']}/{SYSTEM}/{d['metadata']['name']}" for d in stack.docs if d["kind"] in ("Deployment", "DaemonSet")}
    assert workloads == {f"{k}/{SYSTEM}/iadeep-{n}" for k, n in (("Deployment", "extender"), ("Deployment", "scheduler"),
                         ("DaemonSet", "deviceplugin"), ("DaemonSet", "coordinator"), ("Deployment", "tuner"))}
    assert stack.ready == dict.fromkeys(workloads, "ready")
    for app in ("extender", "scheduler", "deviceplugin", "coordinator", "tuner"):
        (pod,) = stack.pods(f"iadeep-{app}")
        assert pod.spec.node_name == real_node.name and pod.spec.host_network, app
        assert pod.spec.containers[0].image_pull_policy == "Never", app
    # Each service answers on its own loopback port, the one the rollout chose from the cluster's.
    for service in ("extender", "deviceplugin", "coordinator", "tuner"):
        status, body = http_get(stack.cluster.url(service, "/readyz"))
        assert status == 200, (service, stack.cluster.url(service, "/readyz"), body)


def test_the_device_plugin_pod_registers_with_the_real_kubelet(stack: Stack, real_node: Node) -> None:
    GPUS, GPU_GIB = stack.gpus
    full = full_capacity(stack)
    wait_for(lambda: capacity(stack.core, real_node.name), lambda c: c == full,
             timeout=60, what="GPU resources (GiB units, co-location slots) in the node's capacity")
    # The plugin's sockets are in the kubelet's folder, next to kubelet.sock.
    sockets = sorted(p.name for p in real_node.device_plugin_dir.iterdir() if p.is_socket())
    assert "kubelet.sock" in sockets and len(sockets) >= 3, sockets
    inventory = stack.store.inventories()[real_node.name]
    assert [g.mem_gib for g in inventory.gpus] == [GPU_GIB] * GPUS  # what the extender places on


def test_two_gpu_pods_created_at_once_each_get_the_gpu_the_extender_chose(stack: Stack, real_node: Node) -> None:
    # 12 GiB each on 16 GiB GPUs: they cannot share a GPU, so each needs its own answer.
    runs = stack.run_gpu_pods(["trainer-a", "trainer-b"], mem_gib=12)
    uuids = set()
    for name, (pod, env) in runs.items():
        ann = pod.metadata.annotations
        assert pod.spec.node_name == real_node.name
        assert ann[ANN_PHASE] == "allocated", name  # the plugin served it (the kubelet called Allocate)
        assert env["NVIDIA_VISIBLE_DEVICES"] == ann[ANN_UUID], name
        assert env["IADEEP_GPU_UUID"] == ann[ANN_UUID] and env["IADEEP_GPU_INDEX"] == ann[ANN_INDEX], name
        assert env["IADEEP_GPU_MEM_LIMIT_MIB"] == str(12 * 1024)
        assert env["IADEEP_POD"] == f"{stack.namespace}/{name}"
        uuids.add(ann[ANN_UUID])
    inventory = {g.uuid for g in stack.store.inventories()[real_node.name].gpus}
    assert uuids <= inventory and len(uuids) == 2


def test_after_a_kubelet_restart_the_device_plugin_registers_again(stack: Stack, real_node: Node) -> None:
    GPUS, GPU_GIB = stack.gpus
    (plugin,) = stack.pods("iadeep-deviceplugin")
    wait_for(lambda: capacity(stack.core, real_node.name)[GPU_MEM], lambda c: c is not None, timeout=60,
             what="GPU resources in the node's capacity")
    def sockets() -> dict[str, int]:
        # name -> creation time (ns); not the inode: ext4 hands a freed inode number out again
        return {p.name: p.stat().st_mtime_ns for p in real_node.device_plugin_dir.iterdir()
                if p.is_socket() and p.name != "kubelet.sock"}

    def registrations() -> int:  # the plugin's log lines (read through the restarted kubelet: 404 while it starts)
        try:
            return pod_log(stack.core, SYSTEM, plugin.metadata.name).count("registered iadeep.io/gpu-mem and")
        except client.ApiException:
            return -1

    before, registered = sockets(), registrations()
    assert before and registered >= 1
    real_node.restart_kubelet()
    # The kubelet removed the plugin's sockets on start; the plugin serves on new ones and registers anew.
    try:
        wait_for(registrations, lambda n: n > registered, timeout=60, what="the plugin registered again")
    except AssertionError as exc:
        st = stack.core.read_namespaced_pod(plugin.metadata.name, SYSTEM).status
        raise AssertionError(f"{exc}\n{[(c.restart_count, c.state, c.last_state) for c in st.container_statuses or []]}\n"
                             f"{tail_log(stack.core, SYSTEM, plugin.metadata.name)}") from None
    now = sockets()
    assert now.keys() == before.keys() and all(now[k] > before[k] for k in now), (before, now)
    full = full_capacity(stack)
    wait_for(lambda: capacity(stack.core, real_node.name), lambda c: c == full, timeout=60, what="the capacity back")
    # Only a registered plugin can serve Allocate: a new pod starts with its GPU.
    ((pod, env),) = stack.run_gpu_pods(["after-restart"], mem_gib=4).values()
    assert env["NVIDIA_VISIBLE_DEVICES"] == pod.metadata.annotations[ANN_UUID]


def test_two_pods_co_located_on_one_gpu_are_both_admitted(stack: Stack, real_node: Node) -> None:
    """The product's core on a real kubelet: a blocker takes 10 GiB of one GPU, so two pods of 7
    and 8 GiB (each also asking for a ``gpu-count``, as training jobs do) fit only together on
    the other GPU. The extender co-locates them there; the kubelet admits both (one
    co-location slot each: with one gpu-count device per GPU it rejects the third pod) and
    both run with that GPU's UUID in their environment."""
    def pod(name: str, mem_gib: int) -> dict:
        body = gpu_pod(name, stack.busybox, mem_gib)
        if name == "co-b":  # a short job: sharing for a minute beats waiting an hour for a free GPU
            body["metadata"]["annotations"] = {"iadeep.io/duration-s": "60"}
        c = body["spec"]["containers"][0]
        c["command"] = ["sh", "-c", "env; exec sleep 600"]
        for part in ("limits", "requests"):
            c["resources"][part][GPU_COUNT] = "1"
        return body

    names = {"blocker": 10, "co-a": 7, "co-b": 8}
    try:
        stack.core.create_namespaced_pod(stack.namespace, pod("blocker", names["blocker"]))
        wait_phase(stack.core, stack.namespace, "blocker", {"Running", "Failed"}, timeout=120)
        for n in ("co-a", "co-b"):
            stack.core.create_namespaced_pod(stack.namespace, pod(n, names[n]))
        runs = {}
        for n in names:
            p = wait_phase(stack.core, stack.namespace, n, {"Running", "Failed", "Succeeded"}, timeout=120)
            assert p.status.phase == "Running", f"{n} not admitted: {p.status.reason}: {p.status.message}"
            env = wait_for(lambda n=n: env_of(pod_log(stack.core, stack.namespace, n)),
                           lambda e: "IADEEP_GPU_UUID" in e, timeout=30, what=f"{n}'s environment")
            runs[n] = (p.metadata.annotations[ANN_UUID], env)
        shared = runs["co-a"][0]
        assert runs["co-b"][0] == shared != runs["blocker"][0]  # the extender co-located them
        for n, (ann_uuid, env) in runs.items():
            assert env["NVIDIA_VISIBLE_DEVICES"] == env["IADEEP_GPU_UUID"] == ann_uuid, n
            assert env["IADEEP_GPU_MEM_LIMIT_MIB"] == str(names[n] * 1024), n
    finally:
        for n in names:
            stack.core.delete_namespaced_pod(n, stack.namespace, grace_period_seconds=0)
        wait_for(lambda: {p.metadata.name for p in stack.core.list_namespaced_pod(stack.namespace).items} & set(names),
                 lambda left: not left, timeout=60, what="the co-location pods gone")
