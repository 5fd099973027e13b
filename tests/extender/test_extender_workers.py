"""``iadeep extender serve`` with two worker processes, called by the real kube-scheduler: the
workers share etcd's reservations (no GPU over capacity), their Prometheus counters add up, and
both serve requests."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
from extender_support import SCHEDULER, ProcessServer, extender_args, free_port, gpu_pod, publish, wait_for

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")


def _env(etcd_settings, throughputs_path, control_plane, **extra: str) -> dict[str, str]:
    """``iadeep extender serve`` with two workers on the test's etcd prefix and control plane."""
    return {
        "IADEEP_ETCD_ENDPOINTS": ",".join(etcd_settings.endpoints),
        "IADEEP_ETCD_PREFIX": etcd_settings.prefix,
        "IADEEP_EXTENDER_THROUGHPUTS_FILE": str(throughputs_path),
        "IADEEP_EXTENDER_KUBE__KUBECONFIG": str(control_plane.kubeconfig),
        "IADEEP_EXTENDER_WORKERS": "2",
        "IADEEP_EXTENDER_LOG_LEVEL": "warning",
        **extra,
    }


def _metric(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


def test_two_workers_share_the_state_and_the_metrics(k8s_client, k8s_namespace, control_plane, store, etcd_settings,
                                                      throughputs_path, extender_port, tmp_path):
    names = control_plane.add_nodes(2, gpus=2, gpu_mem_gib=16, prefix=f"w{uuid.uuid4().hex[:6]}-")
    publish(store, names)
    env = _env(etcd_settings, throughputs_path, control_plane,
               IADEEP_EXTENDER_POLICY="exclusive")  # one pod per GPU: the outcome does not hang on predictions
    server = ProcessServer(env, extender_port, tmp_path / "extender.log").start()
    try:
        def spawned() -> list[psutil.Process]:  # uvicorn's workers (not multiprocessing's resource tracker)
            kids = psutil.Process(server.proc.pid).children(recursive=True)
            return [p for p in kids if "spawn_main" in " ".join(p.cmdline())]

        workers = wait_for(spawned, lambda ws: len(ws) == 2, timeout=20, what="two worker processes")
        core = client.CoreV1Api(k8s_client)
        # 4 GPUs, one pod each: four of six pods run, on four different GPUs, two stay Pending
        for i in range(6):
            core.create_namespaced_pod(k8s_namespace, gpu_pod(f"t{i}", mem=7, namespace=k8s_namespace,
                                                              scheduler=SCHEDULER))
        pods = wait_for(lambda: core.list_namespaced_pod(k8s_namespace).items,
                        lambda ps: sum(p.status.phase == "Running" for p in ps) == 4, timeout=60, what="4 pods Running")
        running = {p.metadata.uid: p for p in pods if p.status.phase == "Running"}
        held = store.assignments()
        assert sorted(a.pod_uid for a in held) == sorted(running)
        assert len({(a.node, a.gpu) for a in held}) == 4  # no GPU taken twice
        for a in held:
            assert running[a.pod_uid].spec.node_name == a.node
        time.sleep(2)
        assert sum(p.status.phase == "Running" for p in core.list_namespaced_pod(k8s_namespace).items) == 4

        # fresh connections spread over both workers; the counters of both add up in /metrics
        body = extender_args(gpu_pod("probe", mem=1, namespace=k8s_namespace, uid="probe-uid"), names)
        metrics = httpx.get(f"{server.url}/metrics").text
        filters_before = _metric(metrics, 'iadeep_extender_requests_total{outcome="ok",verb="filter"}')

        def probe(_: int) -> int:
            with httpx.Client() as c:  # a new connection each
                return c.post(f"{server.url}/iadeep/filter", json=body).status_code

        with ThreadPoolExecutor(8) as ex:
            assert set(ex.map(probe, range(200))) == {200}
        metrics = httpx.get(f"{server.url}/metrics").text
        assert _metric(metrics, 'iadeep_extender_requests_total{outcome="ok",verb="filter"}') == filters_before + 200
        assert _metric(metrics, 'iadeep_extender_binds_total{outcome="bound"}') == 4
        folders = list(Path(tempfile.gettempdir()).glob(f"iadeep-extender-metrics-{server.proc.pid}-*"))
        assert len(folders) == 1
        served = {p.pid: _filters_served(folders[0], p.pid) for p in workers}
        assert sum(served.values()) == filters_before + 200 and min(served.values()) >= 1, served

        # SIGTERM: the workers stop and the shared metrics folder goes with them
        assert server.stop() == 0
        assert not folders[0].exists()
        assert not any(_running(p) for p in workers)
    finally:
        server.kill()


def _filters_served(folder: Path, pid: int) -> float:
    """Filter calls answered by one worker: its own counter file, read by prometheus_client."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    own = Path(tempfile.mkdtemp())
    for f in folder.glob(f"*_{pid}.db"):
        shutil.copy(f, own / f.name)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(own))
    value = registry.get_sample_value("iadeep_extender_requests_total", {"verb": "filter", "outcome": "ok"})
    shutil.rmtree(own)
    return value or 0.0


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_die_with_a_killed_server_and_its_folder_is_reclaimed(control_plane, etcd_settings, store,
                                                                      throughputs_path, tmp_path):
    publish(store, ["k0"])
    env = _env(etcd_settings, throughputs_path, control_plane)
    port = free_port()
    first = ProcessServer(env, port, tmp_path / "first.log").start()
    workers = psutil.Process(first.proc.pid).children(recursive=True)
    folders = list(Path(tempfile.gettempdir()).glob(f"iadeep-extender-metrics-{first.proc.pid}-*"))
    assert len(folders) == 1
    first.proc.kill()  # the server only, by SIGKILL: no cleanup of its own
    first.proc.wait(timeout=10)
    wait_for(lambda: [p for p in workers if _running(p)], lambda alive: not alive, timeout=15,
             what="the workers to exit after their server died")
    assert folders[0].exists()  # nobody could remove it ...
    second = ProcessServer(env, port, tmp_path / "second.log").start()
    try:
        assert not folders[0].exists()  # ... until the next server started
        assert httpx.get(f"{second.url}/readyz").status_code == 200
    finally:
        assert second.stop() == 0
