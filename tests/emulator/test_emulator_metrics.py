"""The emulator's HTTP side against the real local control plane (one kwok GPU node): served by
the command's own listener, ``/readyz`` turns 200 once nodes and pods were listed, and after a
pod's emulated work is done ``/metrics`` counts its completion (status ``Succeeded`` written
through the API), its completion lag and the measurements written. Needs ``make controlplane``
(skips without it, fails under ``CI=1``)."""

from __future__ import annotations

import socket

import httpx
import pytest
from kubernetes import client

from iadeep._host._net import free_port
from iadeep._prometheus import samples
from iadeep.emulator import EmulatorService, EmulatorSettings, KubeApi
from iadeep.emulator._cli import _serve_http
from iadeep.state import MemoryStateStore
from iadeep.testing import wait_for


def _pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {
                "iadeep.io/gpu-index": "0", "iadeep.io/model": "ResNet-50", "iadeep.io/batch-size": "64",
                "iadeep.io/duration-s": "20", "iadeep.io/emulated": "true", "iadeep.io/emulation-speedup": "100"}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}


def test_metrics_count_a_pod_completed_through_the_api(control_plane, k8s_client, k8s_namespace, model) -> None:
    core = client.CoreV1Api(k8s_client)
    (node,) = [n.metadata.name for n in core.list_node(label_selector="iadeep.io/gpu-node=true").items]
    store = MemoryStateStore()
    settings = EmulatorSettings(measurement_noise=0.0, follow_batch_sizes=False, progress_interval_s=0)
    svc = EmulatorService(settings, store=store, kube=KubeApi(kubeconfig=str(control_plane.kubeconfig)), model=model)
    port = free_port()
    server = _serve_http(svc.app(), "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}"

    def metrics() -> dict:
        r = httpx.get(url + "/metrics", timeout=10)
        assert r.status_code == 200
        return samples(r.text)

    try:
        first = wait_for(lambda: _get(url + "/readyz"), lambda r: r is not None, what="the emulator's listener")
        assert first.status_code == 503 and "not listed" in first.json()["status"]  # not started yet
        svc.start()
        wait_for(lambda: _get(url + "/readyz"), lambda r: r is not None and r.status_code == 200, what="/readyz 200")
        assert metrics()[("iadeep_emulator_nodes", ())] == 1
        core.create_namespaced_pod(k8s_namespace, _pod("job", node))
        done = wait_for(metrics, lambda m: m[("iadeep_emulator_pods_completed_total", ())] == 1, timeout=60,
                        what="the pod's completion in /metrics")
        pod = core.read_namespaced_pod("job", k8s_namespace)
        assert pod.status.phase == "Succeeded"
        assert done[("iadeep_emulator_completion_lag_seconds_count", ())] == 1
        assert done[("iadeep_emulator_completion_lag_seconds_sum", ())] >= 0
        assert done[("iadeep_emulator_jobs_running", ())] == 0
        # its start changed its GPU's set: one measurement (its end leaves no job there to measure)
        assert done[("iadeep_emulator_measurements_total", ())] == len(store.measurements(pod.metadata.uid)) == 1
        assert done[("iadeep_emulator_errors_total", ())] == 0
    finally:
        server.should_exit = True
        svc.stop()


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None


def test_a_port_taken_is_an_error_naming_the_address(model) -> None:
    """The listener of ``iadeep emulator serve`` on a port another process holds: an ``OSError``
    naming the address and the settings (the command prints it in one line, exit code 2), not an
    emulator running without its health and metrics endpoints."""
    svc = EmulatorService(EmulatorSettings(), store=MemoryStateStore(), kube=None, model=model)  # type: ignore[arg-type]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{port}.*IADEEP_EMULATOR_HOST/_PORT"):
            _serve_http(svc.app(), "127.0.0.1", port)
