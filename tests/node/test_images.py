"""The services' images (``make images``: images/*/Dockerfile built by buildah without daemon or
registry) imported into the real node's containerd and run as pods."""

from __future__ import annotations

import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from node_support import host_pod, wait_phase

from iadeep.dev import SERVICES, ControlPlane, Node, images_archive, service_image
from iadeep._host._net import free_port
from iadeep.dev._deploy import prepare_throughputs
from iadeep.testing import wait_for

pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _archive_configs(archive: Path) -> dict[str, dict]:
    """Image name -> OCI image config, read from the archive ``make images`` wrote."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict:
            f = tar.extractfile(f"./blobs/sha256/{digest.split(':', 1)[1]}") or tar.extractfile(
                f"blobs/sha256/{digest.split(':', 1)[1]}"
            )
            assert f is not None
            return json.loads(f.read())

        index_file = tar.extractfile("./index.json") or tar.extractfile("index.json")
        assert index_file is not None
        index = json.loads(index_file.read())
        return {
            m["annotations"]["io.containerd.image.name"]: blob(blob(m["digest"])["config"]["digest"])
            for m in index["manifests"]
        }


def test_every_service_image_is_imported_with_its_entry_point(real_node: Node, images: list[str]) -> None:
    archive = images_archive()
    assert archive is not None
    configs = _archive_configs(archive)
    for s in SERVICES:
        assert service_image(s) in images
        assert configs[service_image(s)]["config"]["Entrypoint"] == ["iadeep", s, "serve"]
        # One base: every service image starts with the base image's layers.
        base_layers = configs[service_image("base")]["rootfs"]["diff_ids"]
        assert configs[service_image(s)]["rootfs"]["diff_ids"][: len(base_layers)] == base_layers
        assert "complete" in real_node.ctr("images", "check", f"name=={service_image(s)}")
    assert configs[service_image("base")]["config"]["Entrypoint"] == ["iadeep"]


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
    # As the Deployment runs it: non-root, read-only root filesystem, a writable /tmp.
    container["volumeMounts"] = [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    container["securityContext"] = {"runAsUser": 65532, "runAsNonRoot": True, "readOnlyRootFilesystem": True}
    pod["spec"]["volumes"] = [
        {"name": "data", "hostPath": {"path": str(data), "type": "Directory"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    pod["spec"]["restartPolicy"] = "Always"
    core.create_namespaced_pod(k8s_namespace, pod)
    wait_phase(core, k8s_namespace, "extender", {"Running", "Failed", "Succeeded"}, timeout=180)
    try:
        status, body = wait_for(
            lambda: _safe_get(f"http://127.0.0.1:{port}/readyz"), lambda r: r[0] == 200, timeout=120, what="extender /readyz"
        )
    except AssertionError as exc:
        pod_now = core.read_namespaced_pod("extender", k8s_namespace)
        raise AssertionError(f"{exc}\nstatus: {pod_now.status}\nlogs: {_logs(core, k8s_namespace, 'extender')}") from None
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
        return core.read_namespaced_pod_log(name, namespace, tail_lines=20, _preload_content=False).data.decode()
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return f"<no logs: {exc}>"
