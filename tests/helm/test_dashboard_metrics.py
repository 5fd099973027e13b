"""The chart's Grafana dashboard and the Prometheus scrape configurations ask only for what the
services export: every metric name in the dashboard's PromQL expressions is one the extender's or
the coordinator's ``/metrics`` serves (their real ASGI apps, in process, on the in-memory store),
the plain ``prometheus.yml`` scrapes each service that serves ``/metrics`` at its default port,
and each of those services serves its own ``iadeep_<service>_*`` families."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from metrics_support import exported, metric_names, scrape, serving

from iadeep._host._net import free_port
from iadeep.coordinator import CoordinatorService, CoordinatorSettings
from iadeep.extender import ExtenderService, ExtenderSettings, create_app
from iadeep.interference import InterferenceModel
from iadeep.deviceplugin import DevicePluginService, DevicePluginSettings
from iadeep.emulator import EmulatorService, EmulatorSettings
from iadeep.orchestration import CHART, SCRAPE_JOBS, SCRAPED_SERVICES, LocalCluster, write_scrape_targets
from iadeep.state import MemoryStateStore
from iadeep.tuner import TunerClient, TunerService, TunerSettings
from iadeep.tuner import create_app as create_tuner_app

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = CHART / "dashboards" / "iadeep.json"
PROMETHEUS_YML = REPO / "tools" / "prometheus" / "prometheus.yml"

@pytest.fixture(scope="module")
def model(throughputs_path: Path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)


@pytest.fixture(scope="module")
def extender_metrics(throughputs_path: Path, model: InterferenceModel) -> str:
    """``GET /metrics`` of the extender app (its lifespan starts the service on an in-memory store)."""
    settings = ExtenderSettings(throughputs_file=throughputs_path, annotate_nodes=False, cache={"pod_watch": False,
                                                                                                  "sweep_interval_s": 0})
    svc = ExtenderService(settings, store=MemoryStateStore(), pod_api=None, model=model)
    with serving(create_app(settings, service=svc)) as url:
        return scrape(url)


@pytest.fixture(scope="module")
def coordinator_metrics(throughputs_path: Path, model: InterferenceModel) -> str:
    """``GET /metrics`` of the coordinator app (not started: its metrics exist from construction)."""
    settings = CoordinatorSettings(node="node-a", tuner_url=f"http://127.0.0.1:{free_port()}", throughputs_file=throughputs_path)
    svc = CoordinatorService(settings, store=MemoryStateStore(), tuner=TunerClient(settings.tuner_url), model=model)
    with serving(svc.app()) as url:
        return scrape(url)


def test_every_scraped_service_serves_its_own_metrics(throughputs_path: Path, model: InterferenceModel,
                                                     tmp_path: Path) -> None:
    """The tuner's, the device plugin's and the emulator's real apps (built, not started: their
    metrics exist from construction) serve ``iadeep_<service>_*`` families on ``/metrics``."""
    tuner = TunerService(model, f"sqlite:///{tmp_path / 'tuner.db'}")
    plugin = DevicePluginService(DevicePluginSettings(node="node-a", socket_dir=tmp_path, backend="emulated"),
                                 backend=None, store=MemoryStateStore(), pods=None)  # type: ignore[arg-type]
    emulator = EmulatorService(EmulatorSettings(), store=MemoryStateStore(), kube=None, model=model)  # type: ignore[arg-type]
    for service, app in (("tuner", create_tuner_app(tuner)), ("deviceplugin", plugin.app()), ("emulator", emulator.app())):
        with serving(app) as url:
            names = exported(scrape(url))
        assert any(n.startswith(f"iadeep_{service}_") for n in names), (service, sorted(names))
        assert not {n for n in names if n.startswith("iadeep_") and not n.startswith(f"iadeep_{service}_")}, service


def _dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def test_the_expression_reader_finds_the_metric_names() -> None:
    assert metric_names('histogram_quantile(0.95, sum by (le, phase) (rate(x_bucket{verb="bind", a=~"{b}"}[$__rate_interval])))') == {"x_bucket"}
    assert metric_names("count(a) or vector(0)") == {"a"}
    assert metric_names("sum(rate(a_total[5m])) * 60 / on (node) group_left (gpu) b") == {"a_total", "b"}
    assert metric_names('increase(c[1h:5m]) offset 1h > bool 0') == {"c"}
    with pytest.raises(ValueError, match="unbalanced"):
        metric_names("sum(a{b='c')")


def test_every_dashboard_query_names_only_exported_metrics(extender_metrics: str, coordinator_metrics: str) -> None:
    have = exported(extender_metrics) | exported(coordinator_metrics)
    exprs = _dashboard_exprs()
    assert {t for t, _ in exprs} >= {"Bind latency", "Reservations", "Co-located jobs per GPU", "Tuning rounds"}
    used = {}
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        used.update(dict.fromkeys(names, title))
    unknown = {n: t for n, t in used.items() if n not in have}
    assert not unknown, f"dashboard panels name metrics no service exports: {unknown}"
    # the four panels of the issue, each on its own series
    assert {"iadeep_extender_request_seconds_bucket", "iadeep_pod_gpu_memory_gib", "iadeep_gpu_jobs",
            "iadeep_coordinator_rounds_total"} <= set(used)


def test_the_prometheus_config_scrapes_each_service_that_serves_metrics(tmp_path: Path) -> None:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == set(SCRAPE_JOBS) >= set(SCRAPED_SERVICES.values())
    # each job's static target is its service's default port on loopback (the settings' own default)
    defaults = {"iadeep-extender": ExtenderSettings, "iadeep-coordinator": CoordinatorSettings,
                "iadeep-tuner": TunerSettings, "iadeep-deviceplugin": DevicePluginSettings,
                "iadeep-emulator": EmulatorSettings}
    assert set(defaults) == set(SCRAPE_JOBS)
    for name, settings in defaults.items():
        port = settings.model_fields["port"].default
        assert SCRAPE_JOBS[name] == port, name
        assert [t for sc in jobs[name]["static_configs"] for t in sc["targets"]] == [f"127.0.0.1:{port}"], name
    # a local cluster's ports, written where the configuration's file discovery looks
    c = LocalCluster(apiserver_port=6443, etcd_endpoints="http://127.0.0.1:2379", throughputs_dir=tmp_path)
    written = write_scrape_targets(c, tmp_path / "targets", labels={"run": "r1"})
    for service, name in SCRAPED_SERVICES.items():
        job = jobs[name]
        assert job.get("metrics_path", "/metrics") == "/metrics"
        globs = [g for fc in job["file_sd_configs"] for g in fc["files"]]
        (mine,) = [p for p in written if any(p.match(g) for g in globs)]
        assert json.loads(mine.read_text()) == [{"targets": [f"127.0.0.1:{c.ports[service]}"],
                                                 "labels": {"service": service, "run": "r1"}}]
