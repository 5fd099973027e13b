"""The kubernetes backend end to end: a 30-job Philly slice on the local control plane (kwok GPU
nodes, the real kube-scheduler with the iadeep-scheduler profile, kube-controller-manager running
the Jobs, our extender and the GPU emulator as processes), compared with the simulator."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from iadeep.experiment import ExperimentConfig
from iadeep.experiment._compare import run_compare
from iadeep.experiment._live import LiveSettings

pytestmark = pytest.mark.slow

SPEEDUP = 200.0  # the slice's makespan is about 1.3 h: about 25 s of replay


@pytest.fixture(scope="module")
def compared(controlplane_binaries, dataset_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("parity")
    # 2 nodes x 4 GPUs at a mean offered load of 2: most jobs co-locate or queue
    cfg = ExperimentConfig(jobs=30, policies=("iadeep",), nodes=2, target_load=2.0, queue="kube", tuning=True,
                           speedup=SPEEDUP, out=str(out))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
        figures = run_compare(cfg)
    return out, figures["iadeep"]


def test_every_job_completes_and_every_reservation_is_released(compared):
    out, figures = compared
    live = pd.read_csv(out / "live" / "jobs-iadeep.csv", dtype={"job_id": str})
    assert len(live) == 30 and live["end_s"].notna().all()
    assert (live["start_s"] >= live["submit_s"] - 1e-6).all() and (live["end_s"] > live["start_s"]).all()
    # a job never runs faster than on a dedicated GPU (the emulator's rate is capped at 1); the
    # tolerance covers the bind-to-start lag and timestamp rounding at this speedup
    assert (live["end_s"] - live["start_s"] >= live["duration_s"] * 0.999 - 5 * SPEEDUP * 1e-3).all()
    metrics = json.loads((out / "live" / "metrics-iadeep.json").read_text())
    assert metrics["reservations_left"] == 0 and metrics["failed_jobs"] == 0
    # the Jobs arriving within ``ahead_s`` of the first were created before the arrival clock started
    sim = pd.read_csv(out / "sim" / "jobs-iadeep.csv")
    offsets = (sim["submit_s"] - sim["submit_s"].min()) / SPEEDUP
    assert metrics["prefilled_jobs"] == int((offsets < LiveSettings().ahead_s).sum()) > 0


def test_summary_has_the_simulators_schema(compared):
    out, _ = compared
    sim, live = (json.loads((out / b / "summary.json").read_text()) for b in ("sim", "live"))

    def keys(doc, path=()):
        if isinstance(doc, dict):
            return {k2 for k, v in doc.items() if k != "config" for k2 in keys(v, (*path, k))} | {path}
        return {path}

    assert keys(live) == keys(sim)
    assert live["config"]["backend"] == "kubernetes" and sim["config"]["backend"] == "simulator"
    for f in ("report.md", "jct_cdf.png", "normalised.png", "queue_length.png", "jobs-iadeep.csv", "timeline-iadeep.csv"):
        assert (out / "live" / f).stat().st_size > 0, f


def test_parity_report_is_written_with_its_figures(compared):
    out, figures = compared
    table = pd.read_csv(out / "parity-iadeep.csv", dtype={"job_id": str})
    assert len(table) == 30 and table["jct_live_s"].notna().all() and table["jct_sim_s"].notna().all()
    assert {"avg_jct_diff_rel", "p99_jct_diff_rel", "makespan_diff_rel", "pairs_identical", "partners_match"} <= set(figures)
    assert "iadeep" in (out / "parity.md").read_text()
    # the harness apart from the policy: overheads in wall and emulated seconds, the live
    # coordinator's rounds, and the simulator re-run on the live arrivals with trials that long
    h = figures["harness"]
    assert h["submit_lag"]["emulated_s_median"] == pytest.approx(h["submit_lag"]["wall_s_median"] * SPEEDUP)
    assert h["bind_latency"]["wall_s_median"] > 0
    rounds = figures["tuning_rounds"]
    assert rounds["rounds"] > 0 and rounds["round_s_mean"] > 0
    # the run's clock was held (decisions, completions, sessions took no emulated time), so the
    # re-run keeps the configured trials instead of trials as long as the live rounds' wall time
    clock = figures["clock"]
    assert clock["held"] and 0 < clock["held_s"] < clock["wall_s"]
    assert figures["on_live_arrivals"]["trial_s"] == pytest.approx(ExperimentConfig().trial_s)
    assert "clock was held" in (out / "parity.md").read_text()
    la = pd.read_csv(out / "sim-live-arrivals" / "jobs-iadeep.csv", dtype={"job_id": str}).set_index("job_id")
    live = pd.read_csv(out / "live" / "jobs-iadeep.csv", dtype={"job_id": str}).set_index("job_id")
    assert la["submit_s"].to_dict() == pytest.approx(live["submit_s"].to_dict())  # the arrivals the live run achieved
    print(json.dumps(figures, indent=2))  # the measured figures, for the README


def test_the_live_report_plots_the_services_series_prometheus_recorded(compared):
    from iadeep.experiment._prometheus import PANELS, prometheus_binary

    if prometheus_binary() is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus): live runs record no series")
    out, _ = compared
    doc = json.loads((out / "live" / "prometheus-iadeep.json").read_text())
    panels = doc["panels"]
    assert set(panels) == set(PANELS)
    # every service of the run was scraped (with tuning: the tuner and the coordinator too)
    assert doc["targets_up"] == {"iadeep-extender": 1, "iadeep-emulator": 1, "iadeep-tuner": 1, "iadeep-coordinator": 1}
    # 30 jobs on 8 GPUs at load 2: jobs were bound, held reservations and shared GPUs; the
    # coordinator measured rounds of the co-located pairs
    assert max(v for _, v in panels["reservations"]["series"]["reservations"]) >= 2
    assert max(v for _, v in panels["co-located jobs per GPU"]["series"]["max"]) == 2
    assert panels["bind latency"]["series"]["p95"]
    rounds = [v for _, v in panels["tuning rounds"]["series"]["rounds"]]
    assert rounds == sorted(rounds) and rounds[-1] > 0  # a counter, and it counted
    assert "![services' metrics](services.png)" in (out / "live" / "report.md").read_text()
    assert (out / "live" / "services.png").stat().st_size > 10_000
