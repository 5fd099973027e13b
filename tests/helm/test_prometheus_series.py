"""Debian's Prometheus scraping the real services, as a live run does (:mod:`iadeep.experiment._prometheus`):
the extender (its app on loopback, on an in-memory store holding two pods co-located on one GPU)
and the coordinator are scraped through the file-discovered targets, and the report's panels come
back with the values the services hold; the report's plot is drawn from them. Skips without the
``prometheus`` binary (``apt-get install prometheus``)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from metrics_support import metric_names, scrape, serving

from iadeep._host._net import free_port
from iadeep.coordinator import CoordinatorService, CoordinatorSettings
from iadeep.experiment._prometheus import PANELS, LocalPrometheus, collect_series, prometheus_binary
from iadeep.extender import ExtenderService, ExtenderSettings, create_app
from iadeep.interference import InterferenceModel
from iadeep.report import plot_service_series
from iadeep.state import GpuInfo, JobRecord, MemoryStateStore, NodeInventory
from iadeep.testing import wait_for
from iadeep.tuner import TunerClient


@pytest.fixture(scope="module")
def prometheus_bin() -> Path:
    found = prometheus_binary()
    if found is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus; or IADEEP_PROMETHEUS)")
    return found


def test_the_report_panels_name_only_exported_metrics() -> None:
    names = {n for _, queries in PANELS.values() for _, expr in queries for n in metric_names(expr)}
    assert names == {"iadeep_extender_request_seconds_bucket", "iadeep_pod_gpu_memory_gib", "iadeep_gpu_jobs",
                     "iadeep_coordinator_rounds_total", "iadeep_coordinator_sessions_total"}


def test_prometheus_records_the_services_series_for_the_report(prometheus_bin: Path, throughputs_path: Path,
                                                                 tmp_path: Path) -> None:
    model = InterferenceModel.from_file(throughputs_path)
    store = MemoryStateStore()
    store.put_inventory(NodeInventory("node-a", (GpuInfo(0, 16.0, "GPU-a0"), GpuInfo(1, 16.0, "GPU-a1"))))
    for uid in ("p1", "p2"):  # two pods sharing GPU 0
        store.reserve(JobRecord(uid, "ns", uid, "ResNet-18", 64, 1, 4.0), "node-a", [0], colocation_limit=2, now_s=time.time())
    ext_settings = ExtenderSettings(throughputs_file=throughputs_path, annotate_nodes=False,
                                    cache={"pod_watch": False, "sweep_interval_s": 0})
    extender = ExtenderService(ext_settings, store=store, pod_api=None, model=model)
    coord_settings = CoordinatorSettings(node="node-a", tuner_url=f"http://127.0.0.1:{free_port()}", throughputs_file=throughputs_path)
    coordinator = CoordinatorService(coord_settings, store=MemoryStateStore(), tuner=TunerClient(coord_settings.tuner_url), model=model)
    prom = LocalPrometheus(tmp_path / "prometheus", prometheus_bin, scrape_interval_s=0.5).start()
    try:
        with serving(create_app(ext_settings, service=extender)) as ext_url, serving(coordinator.app()) as coord_url:
            wait_for(lambda: scrape(ext_url), lambda text: 'iadeep_gpu_jobs{gpu="0",node="node-a"} 2.0' in text, timeout=30,
                     what="the extender's copy of the store")
            start = time.time()
            prom.set_targets({"iadeep-extender": [ext_url.removeprefix("http://")],
                              "iadeep-coordinator": [coord_url.removeprefix("http://")]}, labels={"run": "t"})
            wait_for(prom.targets_up, lambda up: up == {"iadeep-extender": 1, "iadeep-coordinator": 1}, timeout=60,
                     what="both targets scraped")
            # binds (refused: this extender has no Kubernetes API) still take time the histogram records
            for _ in range(3):
                httpx.post(f"{ext_url}/iadeep/bind", json={"PodName": "x", "PodNamespace": "ns", "PodUID": "u", "Node": "node-a"},
                           timeout=10, trust_env=False)
                time.sleep(0.5)
            doc = collect_series(prom, start, time.time())
    finally:
        prom.stop()
    panels = doc["panels"]
    assert set(panels) == set(PANELS)
    assert doc["targets_up"] == {"iadeep-extender": 1, "iadeep-coordinator": 1}
    # before the first scrape `or vector(0)` reads 0; from then on what the services hold
    reservations = [v for _, v in panels["reservations"]["series"]["reservations"]]
    assert reservations[-1] == 2.0 and set(reservations) <= {0.0, 2.0}
    assert {v for _, v in panels["co-located jobs per GPU"]["series"]["max"]} == {2.0}
    assert {v for _, v in panels["tuning rounds"]["series"]["rounds"]} == {0.0}
    p95 = panels["bind latency"]["series"]["p95"]
    assert p95 and all(0 < v < 10 for _, v in p95)
    assert all(0 <= t <= doc["end"] - doc["start"] + 1 for t, _ in p95)  # seconds since the run's start
    png = plot_service_series({"iadeep": doc}, tmp_path / "services.png")
    assert png.stat().st_size > 10_000


def test_prometheus_scrapes_the_tuner_and_the_emulator_of_a_live_run(prometheus_bin: Path, throughputs_path: Path,
                                                                      tmp_path: Path) -> None:
    """The other jobs of a live run (:data:`iadeep.experiment._prometheus.JOBS`): the tuner's and
    the emulator's real apps are scraped, and a session opened on the tuner reaches Prometheus."""
    from iadeep.emulator import EmulatorService, EmulatorSettings
    from iadeep.experiment._prometheus import JOBS
    from iadeep.tuner import TunerService
    from iadeep.tuner import create_app as create_tuner_app

    assert {"iadeep-tuner", "iadeep-emulator"} <= set(JOBS)
    model = InterferenceModel.from_file(throughputs_path)
    tuner = TunerService(model, f"sqlite:///{tmp_path / 'tuner.db'}")
    emulator = EmulatorService(EmulatorSettings(), store=MemoryStateStore(), kube=None, model=model)  # type: ignore[arg-type]
    prom = LocalPrometheus(tmp_path / "prometheus", prometheus_bin, scrape_interval_s=0.5).start()
    try:
        with serving(create_tuner_app(tuner)) as tuner_url, serving(emulator.app()) as emu_url:
            httpx.post(f"{tuner_url}/sessions", timeout=30, trust_env=False, json={"name": "n.0.1", "jobs": [
                {"key": "a", "model": "ResNet-50", "base_batch_size": 64, "batch_size": 64}]}).raise_for_status()
            start = time.time()
            prom.set_targets({"iadeep-tuner": [tuner_url.removeprefix("http://")],
                              "iadeep-emulator": [emu_url.removeprefix("http://")]}, labels={"run": "t"})
            wait_for(prom.targets_up, lambda up: up == {"iadeep-tuner": 1, "iadeep-emulator": 1}, timeout=60,
                     what="both targets scraped")
            opened = wait_for(lambda: prom.query_range("sum(iadeep_tuner_sessions_opened_total)", start, time.time(), 0.5),
                              lambda r: bool(r), timeout=30, what="the tuner's sessions in Prometheus")
            nodes = wait_for(lambda: prom.query_range("iadeep_emulator_nodes", start, time.time(), 0.5),
                             lambda r: bool(r), timeout=30, what="the emulator's series in Prometheus")
    finally:
        prom.stop()
    assert float(opened[0]["values"][-1][1]) == 1.0
    assert nodes and nodes[0]["metric"]["job"] == "iadeep-emulator" and nodes[0]["metric"]["run"] == "t"
