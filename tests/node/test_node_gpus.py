"""GPUs on the real node: the device plugin runs as a pod from its image (emulated GPUs, chosen
explicitly: this machine has none) and registers with the real kubelet; kube-scheduler's
``iadeep-scheduler`` profile sends GPU pods through our extender (also a pod from its image) onto
the real node; the kubelet calls the plugin's GetPreferredAllocation/Allocate and starts the
containers with the GPU the extender chose in their environment. Every component here is the
real one (kubelet, containerd, runc, kube-scheduler, apiserver, etcd, our images); only the GPUs
are emulated, so nothing checks that CUDA sees the UUID.

The services use the least-privilege RBAC of ``k8s/extender/rbac.yaml`` and
``k8s/node/rbac.yaml`` (copied to this module's namespace)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from node_support import host_pod, pod_log, rbac_for, wait_phase

from iadeep.dev import ControlPlane, Node, service_image
from iadeep.dev._deploy import prepare_throughputs
from iadeep.dev._node import KUBELET_DEVICE_PLUGINS
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing import free_port, wait_for

pytestmark = pytest.mark.slow

K8S = Path(__file__).resolve().parents[2] / "k8s"
GPU_MEM, GPU_COUNT = "iadeep.io/gpu-mem", "iadeep.io/gpu-count"
GPUS, GPU_GIB = 2, 16
ANN_INDEX, ANN_UUID, ANN_PHASE = "iadeep.io/gpu-index", "iadeep.io/gpu-uuid", "iadeep.io/bind-phase"


def _service_pod(name: str, service: str, account: str, env: dict[str, str], mounts: list[tuple[str, Path, str]]) -> dict:
    """A hostNetwork pod of a service's image (its own entry point), reaching the API server on
    127.0.0.1 with its service account; ``mounts``: (name, host path, container path)."""
    pod = host_pod(name, service_image(service), [])
    pod["spec"]["restartPolicy"] = "Always"
    pod["spec"]["serviceAccountName"] = account
    c = pod["spec"]["containers"][0]
    del c["command"]
    c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if service == "deviceplugin":  # as the DaemonSet: the node's name from the downward API
        c["env"].append({"name": "IADEEP_DEVICEPLUGIN_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    c["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}] + [{"name": n, "mountPath": p} for n, _, p in mounts]
    pod["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}] + [
        {"name": n, "hostPath": {"path": str(h), "type": "Directory"}} for n, h, _ in mounts
    ]
    return pod


def _gpu_pod(name: str, image: str, mem_gib: int) -> dict:
    """A pod of ``iadeep-scheduler`` asking for ``mem_gib`` GiB of GPU memory; prints its environment."""
    pod = host_pod(name, image, ["env"])
    pod["spec"]["schedulerName"] = "iadeep-scheduler"
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU_MEM: str(mem_gib)}, "requests": {GPU_MEM: str(mem_gib)}}
    return pod


def _capacity(core: Any, node: str) -> dict[str, str]:
    cap = core.read_node(node).status.capacity or {}
    return {k: cap.get(k) for k in (GPU_MEM, GPU_COUNT)}


def _env_of(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def _tail_log(core: Any, namespace: str, name: str) -> str:
    try:
        return core.read_namespaced_pod_log(name, namespace, tail_lines=30, _preload_content=False).data.decode()
    except client.ApiException as exc:
        return f"<no log: {exc.reason}>"


class Stack:
    """What the module's fixture started: namespace, the store the services share, the pods."""

    def __init__(self, namespace: str, store: EtcdStateStore, core: Any, busybox: str) -> None:
        self.namespace, self.store, self.core, self.busybox = namespace, store, core, busybox

    def run_gpu_pods(self, names: list[str], mem_gib: int) -> dict[str, tuple[Any, dict[str, str]]]:
        """Create the pods at once; wait until each Succeeded; (pod, its printed environment) by name."""
        for n in names:
            self.core.create_namespaced_pod(self.namespace, _gpu_pod(n, self.busybox, mem_gib))
        out = {}
        for n in names:
            pod = wait_phase(self.core, self.namespace, n, {"Succeeded", "Failed"}, timeout=180)
            assert pod.status.phase == "Succeeded", f"{n}: {pod.status}"
            out[n] = (pod, _env_of(pod_log(self.core, self.namespace, n)))
        return out


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, real_node: Node, images: list[str], k8s_client,
          throughputs_path: Path) -> Iterator[Stack]:
    """Extender + device plugin as pods on the real node, kube-scheduler with the shipped
    two-profile configuration pointed at the extender; all removed afterwards."""
    core = client.CoreV1Api(k8s_client)
    rbac = client.RbacAuthorizationV1Api(k8s_client)
    ns = f"gpu-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(ns)
    objects: list[dict] = []
    for manifest in (K8S / "extender" / "rbac.yaml", K8S / "node" / "rbac.yaml"):
        docs, _ = rbac_for(manifest, ns, f"-{ns}")
        objects += docs
    utils.create_from_yaml(k8s_client, yaml_objects=objects)
    etcd = StateSettings(endpoints=[f"http://127.0.0.1:{control_plane.ports['etcd']}"], prefix=f"/t-{ns}")
    api = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(control_plane.ports["kube-apiserver"]),
           "IADEEP_ETCD_ENDPOINTS": etcd.endpoints[0], "IADEEP_ETCD_PREFIX": etcd.prefix}
    ext_port = free_port()
    data = prepare_throughputs(throughputs_path, real_node.paths.root)
    core.create_namespaced_pod(ns, _service_pod("extender", "extender", "iadeep-extender", {
        **api, "IADEEP_EXTENDER_HOST": "127.0.0.1", "IADEEP_EXTENDER_PORT": str(ext_port),
        "IADEEP_EXTENDER_KUBE__IN_CLUSTER": "true", "IADEEP_EXTENDER_THROUGHPUTS_FILE": "/data/simulation_throughputs.json",
    }, [("data", data, "/data")]))
    core.create_namespaced_pod(ns, _service_pod("deviceplugin", "deviceplugin", "iadeep-deviceplugin", {
        **api, "IADEEP_DEVICEPLUGIN_BACKEND": "emulated", "IADEEP_DEVICEPLUGIN_EMULATED__COUNT": str(GPUS),
        "IADEEP_DEVICEPLUGIN_EMULATED__MEM_GIB": str(GPU_GIB), "IADEEP_DEVICEPLUGIN_KUBE__IN_CLUSTER": "true",
        "IADEEP_DEVICEPLUGIN_HOST": "127.0.0.1", "IADEEP_DEVICEPLUGIN_PORT": str(free_port()),
        "IADEEP_DEVICEPLUGIN_SOCKET_DIR": "/var/lib/kubelet/device-plugins", "IADEEP_DEVICEPLUGIN_POLL_S": "0.5",
    }, [("device-plugins", KUBELET_DEVICE_PLUGINS, "/var/lib/kubelet/device-plugins")]))
    config = yaml.safe_load((K8S / "extender" / "kube-scheduler-config.control-plane.yaml").read_text())
    for ext in config["extenders"]:
        ext["urlPrefix"] = f"http://127.0.0.1:{ext_port}/iadeep"
    control_plane.restart_scheduler(config)
    store = EtcdStateStore(etcd)
    try:
        for name in ("extender", "deviceplugin"):
            try:
                wait_for(lambda n=name: core.read_namespaced_pod(n, ns),
                         lambda p: any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []),
                         timeout=120, what=f"pod {name} Ready")
            except AssertionError:
                statuses = [(c.state, c.last_state) for c in core.read_namespaced_pod(name, ns).status.container_statuses or []]
                raise AssertionError(f"pod {name} not Ready: {statuses}\nlog:\n{_tail_log(core, ns, name)}") from None
        yield Stack(ns, store, core, real_node.busybox_image())
    finally:
        store.close()
        control_plane.restart_scheduler()  # its own configuration: the extender goes away
        core.delete_namespace(ns, grace_period_seconds=0)
        wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(ns).items], lambda left: not left,
                 timeout=120, what=f"the pods of {ns} gone")
        for d in objects:
            if d["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(d["metadata"]["name"])
            elif d["kind"] == "ClusterRole":
                rbac.delete_cluster_role(d["metadata"]["name"])


def _full_capacity(stack: Stack) -> dict[str, str]:
    """gpu-mem: GiB of all GPUs; gpu-count: co-location slots, GPUs x the limit the extender
    publishes (its pod has no readiness probe here: it may not have published yet)."""
    placement = wait_for(stack.store.placement, lambda p: p is not None, timeout=120,
                         what="the extender's placement policy in etcd")
    return {GPU_MEM: str(GPUS * GPU_GIB), GPU_COUNT: str(GPUS * placement.colocation_limit)}


def test_the_device_plugin_pod_registers_with_the_real_kubelet(stack: Stack, real_node: Node) -> None:
    full = _full_capacity(stack)
    wait_for(lambda: _capacity(stack.core, real_node.name), lambda c: c == full,
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
    wait_for(lambda: _capacity(stack.core, real_node.name)[GPU_MEM], lambda c: c is not None, timeout=60,
             what="GPU resources in the node's capacity")
    def sockets() -> dict[str, int]:
        # name -> creation time (ns); not the inode: ext4 hands a freed inode number out again
        return {p.name: p.stat().st_mtime_ns for p in real_node.device_plugin_dir.iterdir()
                if p.is_socket() and p.name != "kubelet.sock"}

    def registrations() -> int:  # the plugin's log lines (read through the restarted kubelet: 404 while it starts)
        try:
            return pod_log(stack.core, stack.namespace, "deviceplugin").count("registered iadeep.io/gpu-mem and")
        except client.ApiException:
            return -1

    before, registered = sockets(), registrations()
    assert before and registered >= 1
    real_node.restart_kubelet()
    # The kubelet removed the plugin's sockets on start; the plugin serves on new ones and registers anew.
    wait_for(registrations, lambda n: n > registered, timeout=60, what="the plugin registered again")
    now = sockets()
    assert now.keys() == before.keys() and all(now[k] > before[k] for k in now), (before, now)
    full = _full_capacity(stack)
    wait_for(lambda: _capacity(stack.core, real_node.name), lambda c: c == full, timeout=60, what="the capacity back")
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
        body = _gpu_pod(name, stack.busybox, mem_gib)
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
            env = wait_for(lambda n=n: _env_of(pod_log(stack.core, stack.namespace, n)),
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
