"""The Helm chart ``charts/iadeep`` on the real node, through its whole life in one flow (one
cluster start, shared with the other real-node tests): ``helm install`` with the local values of
the ``iadeep_rollout`` DAG's ``method: helm`` (:func:`iadeep.orchestration.local_values`) makes
every component Ready and a GPU pod gets the GPU the extender chose through the device plugin;
``helm upgrade`` with a new image tag rolls every component (new pods of the new tag, Ready, and
the GPU path works again); ``helm uninstall`` leaves none of the release's objects, no device-plugin
socket and no GPU reservation behind (neither in etcd nor on the Node)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from node_support import host_pod, pod_log, wait_not_terminating, wait_phase

from iadeep.dev import ControlPlane, Node
from iadeep.dev._binaries import Binaries
from iadeep.dev._images import kube_scheduler_image
from iadeep.orchestration import (label_real_nodes, local_values, prepare_local_rollout, rollout_values, template, uninstall,
                                  upgrade_install, wait_ready)
from iadeep.orchestration._helm import local_scheduler_tag
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing import wait_for
from iadeep.testing.controlplane import helm_binary

pytestmark = pytest.mark.slow

SYSTEM = "iadeep-system"
GPU_MEM = "iadeep.io/gpu-mem"
ANN_UUID, ANN_PHASE, RESERVATIONS = "iadeep.io/gpu-uuid", "iadeep.io/bind-phase", "iadeep.io/gpu-reservations"
WORKLOADS = {("Deployment", "iadeep-extender"), ("Deployment", "iadeep-scheduler"), ("DaemonSet", "iadeep-deviceplugin"),
             ("DaemonSet", "iadeep-coordinator"), ("Deployment", "iadeep-tuner")}
NEW_TAG = "rolled"


@pytest.fixture(scope="module")
def helm() -> Path:
    """The helm binary of ``make helm``; skips without it (fails under CI)."""
    return helm_binary()


def _pods(core: Any) -> dict[str, tuple[str, str]]:
    """app name -> (pod UID, image) of the release's running pods (one each on the one node)."""
    out = {}
    for p in core.list_namespaced_pod(SYSTEM, label_selector="app.kubernetes.io/instance=iadeep").items:
        if p.metadata.deletion_timestamp is None:
            out[p.metadata.labels["app.kubernetes.io/name"]] = (p.metadata.uid, p.spec.containers[0].image)
    return out


def _ready(api: Any, docs: list[dict], core: Any) -> dict[str, str]:
    try:
        return wait_ready(api, docs, timeout_s=300)
    except TimeoutError as exc:
        detail = "\n".join(f"{p.metadata.name} {p.status.phase} {[c.state for c in p.status.container_statuses or []]}"
                           for p in core.list_namespaced_pod(SYSTEM).items)
        raise AssertionError(f"{exc}\n{detail}") from None


def _gpu_pod_gets_its_gpu(core: Any, namespace: str, name: str, busybox: str) -> None:
    pod = host_pod(name, busybox, ["env"])
    pod["spec"]["schedulerName"] = "iadeep-scheduler"
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU_MEM: "4"}, "requests": {GPU_MEM: "4"}}
    core.create_namespaced_pod(namespace, pod)
    done = wait_phase(core, namespace, name, {"Succeeded", "Failed"}, timeout=180)
    assert done.status.phase == "Succeeded", f"{name}: {done.status}"
    env = dict(line.split("=", 1) for line in pod_log(core, namespace, name).splitlines() if "=" in line)
    ann = done.metadata.annotations
    assert ann[ANN_PHASE] == "allocated", name  # the kubelet called the plugin's Allocate
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["IADEEP_GPU_UUID"] == ann[ANN_UUID], name


def _gone(api: Any, doc: dict) -> bool:
    """True when the object of ``doc`` no longer exists (404)."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    res = DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    try:
        res.get(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
    except NotFoundError:
        return True
    return False


def test_helm_install_upgrade_uninstall_on_the_real_node(control_plane: ControlPlane, real_node: Node, images: list[str],
                                                       k8s_client: Any, throughputs_path: Path, helm: Path,
                                                       controlplane_binaries: Binaries,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    core = client.CoreV1Api(k8s_client)
    tmp = tmp_path_factory.mktemp("helm")
    # The images of the rollout (no registry): the cluster's own kube-scheduler at the tag k8s/local
    # names, and every image again under a new tag for the upgrade.
    kube_scheduler_image(controlplane_binaries.kube_scheduler, local_scheduler_tag(), tmp / "kube-scheduler.tar")
    real_node.import_images([tmp / "kube-scheduler.tar"])
    for name in ("extender", "deviceplugin", "coordinator", "tuner", "kube-scheduler"):
        old = f"localhost/iadeep/{name}:{local_scheduler_tag() if name == 'kube-scheduler' else 'dev'}"
        real_node.ctr("images", "tag", "--force", old, f"localhost/iadeep/{name}:{NEW_TAG}")
    wait_not_terminating(core, SYSTEM)  # an earlier module's rollout may still be deleting it
    ns = f"gpu-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(ns)
    etcd = StateSettings(endpoints=[f"http://127.0.0.1:{control_plane.ports['etcd']}"], prefix=f"/t-{ns}")
    cluster, _ = prepare_local_rollout(tmp, kubeconfig=control_plane.kubeconfig, etcd_endpoints=etcd.endpoints[0],
                                       etcd_prefix=etcd.prefix, throughputs_file=throughputs_path)
    store = EtcdStateStore(etcd)
    values = rollout_values(["extender", "deviceplugin", "coordinator", "tuner"], image=None, tag=None, base=local_values(cluster))
    docs = template(values, helm=helm)
    installed = False
    try:
        assert label_real_nodes(k8s_client) == [real_node.name]
        # -- install: every component Ready, a GPU pod gets its GPU through the plugin
        upgrade_install(values, kubeconfig=control_plane.kubeconfig, helm=helm)
        installed = True
        ready = _ready(k8s_client, docs, core)
        assert ready == {f"{k}/{SYSTEM}/{n}": "ready" for k, n in WORKLOADS}
        before = _pods(core)
        assert {app: image.rsplit(":", 1)[1] for app, (_, image) in before.items()} == {
            "iadeep-extender": "dev", "iadeep-deviceplugin": "dev", "iadeep-coordinator": "dev", "iadeep-tuner": "dev",
            "iadeep-scheduler": local_scheduler_tag()}
        _gpu_pod_gets_its_gpu(core, ns, "before-upgrade", real_node.busybox_image())

        # -- upgrade with a new image tag: every component rolls onto it
        rolled = rollout_values(["extender", "deviceplugin", "coordinator", "tuner"], image=None, tag=NEW_TAG,
                                scheduler_image=f"localhost/iadeep/kube-scheduler:{NEW_TAG}", base=local_values(cluster))
        rolled_docs = template(rolled, helm=helm)
        upgrade_install(rolled, kubeconfig=control_plane.kubeconfig, helm=helm)
        _ready(k8s_client, rolled_docs, core)
        after = wait_for(lambda: _pods(core), lambda p: len(p) == len(before) and all(p[a][0] != before[a][0] for a in before),
                         timeout=120, what="every component's pod replaced")
        assert {app: image.rsplit(":", 1)[1] for app, (_, image) in after.items()} == dict.fromkeys(before, NEW_TAG)
        _gpu_pod_gets_its_gpu(core, ns, "after-upgrade", real_node.busybox_image())
        wait_for(store.assignments, lambda a: not a, timeout=60, what="the ended GPU pods' reservations released")

        # -- uninstall: no object, socket or reservation left
        uninstall(kubeconfig=control_plane.kubeconfig, helm=helm)
        installed = False
        left = [f"{d['kind']}/{d['metadata']['name']}" for d in rolled_docs if not _gone(k8s_client, d)]
        assert not left, left
        wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(SYSTEM).items], lambda p: not p, timeout=120,
                 what=f"the pods of {SYSTEM} gone")
        sockets = sorted(p.name for p in real_node.device_plugin_dir.iterdir() if p.is_socket())
        assert sockets == ["kubelet.sock"], sockets
        assert store.assignments() == []
        reservations = json.loads((core.read_node(real_node.name).metadata.annotations or {}).get(RESERVATIONS) or "[]")
        assert all(not g.get("pods") and not g.get("used_gib") for g in reservations), reservations
    finally:
        store.close()
        core.delete_namespace(ns, grace_period_seconds=0)
        if installed:
            uninstall(kubeconfig=control_plane.kubeconfig, helm=helm)
        wait_for(lambda: [p.metadata.name for n in (ns, SYSTEM) for p in core.list_namespaced_pod(n).items],
                 lambda left: not left, timeout=120, what=f"the pods of {ns} and {SYSTEM} gone")
        (tmp / "values.yaml").write_text(yaml.safe_dump(values))  # kept with the test's files for a look after a failure
