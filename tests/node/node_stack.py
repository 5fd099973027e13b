"""The middleware rolled out onto the real node, shared by the modules that run GPU pods there: the
k8s/ kustomizations through ``k8s/local`` rendered, applied and waited for by the code of the
``iadeep_rollout`` DAG (:mod:`iadeep.orchestration`), and what the tests read of it."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client
from node_support import host_pod, pod_log, wait_not_terminating, wait_phase

from iadeep.dev import ControlPlane, Node
from iadeep.dev._binaries import Binaries
from iadeep.dev._images import kube_scheduler_image
from iadeep.orchestration import COMPONENTS, LocalCluster, apply, label_real_nodes, prepare_local_rollout, render, wait_ready
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing import wait_for

K8S = Path(__file__).resolve().parents[2] / "k8s"
SYSTEM = "iadeep-system"
SCHEDULER = "iadeep-scheduler"
GPU_MEM, GPU_COUNT = "iadeep.io/gpu-mem", "iadeep.io/gpu-count"
ANN_INDEX, ANN_UUID, ANN_PHASE = "iadeep.io/gpu-index", "iadeep.io/gpu-uuid", "iadeep.io/bind-phase"


def gpu_pod(name: str, image: str, mem_gib: int) -> dict:
    """A pod of ``iadeep-scheduler`` asking for ``mem_gib`` GiB of GPU memory; prints its environment."""
    pod = host_pod(name, image, ["env"])
    pod["spec"]["schedulerName"] = SCHEDULER
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU_MEM: str(mem_gib)}, "requests": {GPU_MEM: str(mem_gib)}}
    return pod


def capacity(core: Any, node: str) -> dict[str, str]:
    cap = core.read_node(node).status.capacity or {}
    return {k: cap.get(k) for k in (GPU_MEM, GPU_COUNT)}


def env_of(log: str) -> dict[str, str]:
    """``NAME=value`` lines of a pod's log (the ``env`` command's output) as a mapping."""
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def tail_log(core: Any, namespace: str, name: str) -> str:
    try:
        return core.read_namespaced_pod_log(name, namespace, tail_lines=30, _preload_content=False).data.decode()
    except client.ApiException as exc:
        return f"<no log: {exc.reason}>"


def http_get(url: str) -> tuple[int, str]:
    try:
        resp = httpx.get(url, timeout=10, trust_env=False)  # a loopback URL: never through a proxy
        return resp.status_code, resp.text
    except httpx.HTTPError as exc:
        return -1, repr(exc)


def _kubectl_delete(docs: list[dict], kubeconfig: Path) -> None:
    subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
                   input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120, check=False)


def with_scheduler_gates(docs: list[dict], gates: Mapping[str, bool]) -> list[dict]:
    """``docs`` with ``--feature-gates`` of ``gates`` on ``iadeep-scheduler``'s kube-scheduler (the
    flag the comment in k8s/extender/scheduler.yaml shows; nothing changes for ``{}``)."""
    if not gates:
        return docs
    flag = "--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER]
    (container,) = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"]
    container["command"] = [*container["command"], flag]
    return docs


class Stack:
    """What the module's rollout started: the rendered objects, the cluster's values, the store the
    services share, a namespace for the GPU pods."""

    def __init__(self, namespace: str, store: EtcdStateStore, core: Any, busybox: str, cluster: LocalCluster,
                 docs: list[dict], ready: dict[str, str]) -> None:
        self.namespace, self.store, self.core, self.busybox = namespace, store, core, busybox
        self.cluster, self.docs, self.ready = cluster, docs, ready

    @property
    def node_env(self) -> dict[str, str]:
        """The ``iadeep-node`` ConfigMap as rendered (the services' configuration)."""
        return next(d["data"] for d in self.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "iadeep-node")

    @property
    def gpus(self) -> tuple[int, int]:
        """(emulated GPUs, GiB each) the device plugin was configured with."""
        env = self.node_env
        return int(env["IADEEP_DEVICEPLUGIN_EMULATED__COUNT"]), int(env["IADEEP_DEVICEPLUGIN_EMULATED__MEM_GIB"])

    def pods(self, app: str) -> list[Any]:
        return self.core.list_namespaced_pod(SYSTEM, label_selector=f"app.kubernetes.io/name={app}").items

    def run_gpu_pods(self, names: list[str], mem_gib: int) -> dict[str, tuple[Any, dict[str, str]]]:
        """Create the pods at once; wait until each Succeeded; (pod, its printed environment) by name."""
        for n in names:
            self.core.create_namespaced_pod(self.namespace, gpu_pod(n, self.busybox, mem_gib))
        out = {}
        for n in names:
            pod = wait_phase(self.core, self.namespace, n, {"Succeeded", "Failed"}, timeout=180)
            assert pod.status.phase == "Succeeded", f"{n}: {pod.status}"
            out[n] = (pod, env_of(pod_log(self.core, self.namespace, n)))
        return out


@contextlib.contextmanager
def rolled_out(control_plane: ControlPlane, real_node: Node, k8s_client: Any, throughputs_path: Path,
               controlplane_binaries: Binaries, tmp: Path, *, scheduler_gates: Mapping[str, bool]) -> Iterator[Stack]:
    """One rollout of every component (``k8s/local`` over k8s/extender and k8s/node) onto the real
    node, as the ``iadeep_rollout`` DAG does it with ``local``, ``iadeep-scheduler`` with
    ``scheduler_gates`` (:func:`with_scheduler_gates`); everything it created is removed after."""
    core = client.CoreV1Api(k8s_client)
    # iadeep-scheduler's image (no registry here): the cluster's own kube-scheduler, at the tag k8s/local names.
    (sched,) = [i for i in yaml.safe_load((K8S / "local" / "kustomization.yaml").read_text())["images"]
                if i["name"].endswith("/kube-scheduler")]
    kube_scheduler_image(controlplane_binaries.kube_scheduler, sched["newTag"], tmp / "kube-scheduler.tar")
    real_node.import_images([tmp / "kube-scheduler.tar"])
    ns = f"gpu-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(ns)
    etcd = StateSettings(endpoints=[f"http://127.0.0.1:{control_plane.ports['etcd']}"], prefix=f"/t-{ns}")
    # The DAG's steps with local=true: render (+ the local overlay), apply (+ the real node labelled a
    # GPU node), wait_ready.
    cluster, overlay = prepare_local_rollout(tmp, kubeconfig=control_plane.kubeconfig, etcd_endpoints=etcd.endpoints[0],
                                             etcd_prefix=etcd.prefix, throughputs_file=throughputs_path)
    docs = with_scheduler_gates(render(list(COMPONENTS), kustomization=overlay), scheduler_gates)
    store = EtcdStateStore(etcd)
    try:
        assert label_real_nodes(k8s_client) == [real_node.name]
        wait_not_terminating(core, SYSTEM)  # an earlier module's rollout may still be deleting it
        apply(docs, kubeconfig=str(control_plane.kubeconfig))
        try:
            ready = wait_ready(k8s_client, docs, timeout_s=300)
        except TimeoutError as exc:
            pods = core.list_namespaced_pod(SYSTEM).items
            detail = "\n".join(f"{p.metadata.name} {p.status.phase} {[(c.state, c.last_state) for c in p.status.container_statuses or []]}"
                               f"\nlog:\n{tail_log(core, SYSTEM, p.metadata.name)}" for p in pods)
            raise AssertionError(f"{exc}\n{detail}") from None
        yield Stack(ns, store, core, real_node.busybox_image(), cluster, docs, ready)
    finally:
        store.close()
        core.delete_namespace(ns, grace_period_seconds=0)
        _kubectl_delete(docs, control_plane.kubeconfig)
        wait_for(lambda: [p.metadata.name for n in (ns, SYSTEM) for p in core.list_namespaced_pod(n).items],
                 lambda left: not left, timeout=120, what=f"the pods of {ns} and {SYSTEM} gone")


def full_capacity(stack: Stack) -> dict[str, str]:
    """gpu-mem: GiB of all GPUs; gpu-count: co-location slots, GPUs x the limit the extender
    publishes (waited for: the plugin follows it within a lease renewal)."""
    placement = wait_for(stack.store.placement, lambda p: p is not None, timeout=120,
                         what="the extender's placement policy in etcd")
    gpus, gib = stack.gpus
    return {GPU_MEM: str(gpus * gib), GPU_COUNT: str(gpus * placement.colocation_limit)}
