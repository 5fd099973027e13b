"""The services' images (``make images``: images/*/Dockerfile built by buildah without daemon or
registry) imported into the real node's containerd and run as pods; and ``k8s/local`` deployed
for real (the extender and the ``iadeep-scheduler`` profile on the real node)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from node_support import host_pod, wait_phase

from iadeep.dev import SERVICES, ControlPlane, ControlPlaneError, Node, images_archive, service_image
from iadeep.dev._cluster import free_port
from iadeep.dev._deploy import LocalDeployment, deploy_local, prepare_throughputs
from iadeep.dev._images import kube_scheduler_image
from iadeep.testing import wait_for
from iadeep.testing.controlplane import _required

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def images(real_node: Node) -> list[str]:
    try:
        archive = images_archive()
    except ControlPlaneError as exc:
        if _required():
            pytest.fail(f"{exc} (required under CI)", pytrace=False)
        pytest.skip(str(exc))
    assert archive is not None
    return real_node.import_images([archive])


def _get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_every_service_image_is_imported_with_its_entry_point(real_node: Node, images: list[str]) -> None:
    for s in ("base", *SERVICES):
        assert service_image(s) in images
    for s in SERVICES:
        config = real_node.ctr("images", "check", f"name=={service_image(s)}")
        assert "complete" in config, config


def test_the_extender_runs_from_its_image_and_answers_readyz_on_loopback(
    control_plane: ControlPlane, real_node: Node, images, k8s_client, k8s_namespace, throughputs_path: Path
) -> None:
    core = client.CoreV1Api(k8s_client)
    port = free_port()
    data = prepare_throughputs(throughputs_path, real_node.paths.root)
    env = {
        "IADEEP_EXTENDER_HOST": "127.0.0.1",
        "IADEEP_EXTENDER_PORT": str(port),
        "IADEEP_EXTENDER_THROUGHPUTS_FILE": "/data/simulation_throughputs.json",
        "IADEEP_ETCD_ENDPOINTS": f"http://127.0.0.1:{control_plane.ports['etcd']}",
        "IADEEP_ETCD_PREFIX": f"/t-{k8s_namespace}",
        "IADEEP_EXTENDER_KUBE__IN_CLUSTER": "true",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.ports["kube-apiserver"]),
    }
    pod = host_pod("extender", service_image("extender"), [])
    container = pod["spec"]["containers"][0]
    del container["command"]  # the image's own entry point: iadeep extender serve
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] = [{"name": "data", "mountPath": "/data", "readOnly": True}]
    container["securityContext"] = {"runAsUser": 65532, "runAsNonRoot": True, "readOnlyRootFilesystem": True}
    pod["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}]
    pod["spec"]["restartPolicy"] = "Always"
    core.create_namespaced_pod(k8s_namespace, pod)
    wait_phase(core, k8s_namespace, "extender", {"Running", "Failed", "Succeeded"}, timeout=180)
    status, body = wait_for(
        lambda: _safe_get(f"http://127.0.0.1:{port}/readyz"),
        lambda r: r[0] == 200,
        timeout=120,
        what=f"extender /readyz (logs: {_logs(core, k8s_namespace, 'extender')})",
    )
    assert body.strip() == "ok"
    # It is the container answering: stopping the pod stops the answers.
    core.delete_namespaced_pod("extender", k8s_namespace, grace_period_seconds=1)
    wait_for(lambda: _safe_get(f"http://127.0.0.1:{port}/readyz"), lambda r: r[0] == -1, timeout=60, what="the port closed")


def _safe_get(url: str) -> tuple[int, str]:
    try:
        return _get(url)
    except OSError as exc:
        return -1, str(exc)


def _logs(core, namespace: str, name: str) -> str:
    try:
        return core.read_namespaced_pod_log(name, namespace, tail_lines=20)
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return f"<no logs: {exc}>"


def test_k8s_local_deploys_the_extender_and_iadeep_scheduler_onto_the_real_node(
    control_plane: ControlPlane, controlplane_binaries, real_node: Node, images, k8s_client, throughputs_path: Path
) -> None:
    # The upstream kube-scheduler image cannot be pulled: one is made from the built binary.
    archive = real_node.paths.images / "kube-scheduler.tar"
    name = kube_scheduler_image(controlplane_binaries.kube_scheduler, "v1.36.3", archive)
    assert name in real_node.import_images([archive])
    d = LocalDeployment(
        apiserver_port=control_plane.ports["kube-apiserver"],
        etcd_endpoints=f"http://127.0.0.1:{control_plane.ports['etcd']}",
        etcd_prefix="/iadeep-local-test",
        extender_port=free_port(),
        scheduler_port=free_port(),
        throughputs_dir=prepare_throughputs(throughputs_path, real_node.paths.root),
    )
    deploy_local(d, kubectl=real_node.kubectl, kubeconfig=control_plane.kubeconfig, workdir=real_node.paths.root)
    apps = client.AppsV1Api(k8s_client)
    core = client.CoreV1Api(k8s_client)
    for dep in ("iadeep-extender", "iadeep-scheduler"):
        wait_for(
            lambda dep=dep: apps.read_namespaced_deployment(dep, "iadeep-system").status,
            lambda s: (s.ready_replicas or 0) >= 1,
            timeout=240,
            what=f"deployment {dep} ready ({_pod_summary(core)})",
        )
    pods = core.list_namespaced_pod("iadeep-system").items
    assert {p.spec.node_name for p in pods} == {real_node.name}
    assert all(c.image.startswith("localhost/iadeep/") for p in pods for c in p.spec.containers)
    assert _get(f"{d.extender_url.rsplit('/', 1)[0]}/readyz") == (200, "ok")
    # The scheduler profile is live: a plain pod asking for iadeep-scheduler gets scheduled by it.
    ns = "iadeep-local-probe"
    control_plane.create_namespace(ns)
    body = host_pod("probe", service_image("base"), ["iadeep", "--help"], schedulerName="iadeep-scheduler")
    core.create_namespaced_pod(ns, body)
    pod = wait_phase(core, ns, "probe", {"Succeeded", "Failed"}, timeout=180)
    assert pod.status.phase == "Succeeded", pod.status
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=probe").items
    assert any(e.reason == "Scheduled" and e.reporting_component == "iadeep-scheduler" for e in events) or any(
        e.reason == "Scheduled" and (e.source.component if e.source else "") == "iadeep-scheduler" for e in events
    ), [(e.reason, e.reporting_component, e.source) for e in events]


def _pod_summary(core) -> str:
    try:
        pods = core.list_namespaced_pod("iadeep-system").items
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return str(exc)
    return "; ".join(f"{p.metadata.name}: {p.status.phase} {[(c.name, c.state) for c in p.status.container_statuses or []]}" for p in pods)

