"""The main job end to end (small): summary.json schema, files, plots, CLI output and errors."""

import json

from typer.testing import CliRunner

from iadeep.cli import app
from iadeep.experiment import ExperimentConfig, run_experiment

KEYS = {"avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s", "makespan_s", "gpu_utilisation", "mean_slowdown",
        "jct_jobs", "censored_jobs", "unschedulable_jobs"}


def test_run_experiment_writes_summary_and_plots(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    cfg = ExperimentConfig(jobs=80, out=str(tmp_path / "run"))
    summary = run_experiment(cfg, progress=False)
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc == json.loads(json.dumps(summary))
    assert doc["trace"]["name"] == "philly" and doc["trace"]["jobs"] == 80
    assert doc["trace"]["sha256"] == "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"
    assert doc["cluster"]["nodes"] == 5 and doc["seed"] == 0
    assert set(doc["policies"]) == {"iadeep", "exclusive", "antman", "gandiva"}
    for metrics in doc["policies"].values():
        assert set(metrics) == KEYS
        assert metrics["p50_jct_s"] <= metrics["p95_jct_s"] <= metrics["p99_jct_s"]
    for name in ("jct_cdf.png", "normalised.png", "queue_length.png", "report.md", "jobs-iadeep.csv"):
        assert (tmp_path / "run" / name).stat().st_size > 0
    assert (tmp_path / "run" / "jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_prints_summary_and_rejects_bad_input(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "run", "--jobs", "40", "--policies", "iadeep,exclusive", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "offered load mean" in res.output and "iadeep" in res.output and "exclusive" in res.output
    bad = runner.invoke(app, ["experiment", "run", "--trace", "nope", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown trace 'nope'" in bad.output
    bad = runner.invoke(app, ["experiment", "run", "--jobs", "20", "--policies", "iadeep,nope", "--out", str(tmp_path / "y")])
    assert bad.exit_code == 2 and "unknown policy 'nope'" in bad.output


def test_sweep_compares_every_setting(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    res = CliRunner().invoke(app, ["experiment", "sweep", "--start-jobs", "40000,60000", "--loads", "1", "--seeds", "0,1",
                                   "--jobs", "40", "--policies", "iadeep,exclusive", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(tmp_path / "sweep.csv")
    assert len(df) == 2 * 2 * 2 and set(df["policy"]) == {"iadeep", "exclusive"}
    assert (df[df.policy == "iadeep"]["avg_jct_vs_iadeep"] == 1.0).all()
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_guard_figures_name_the_worst_setting():
    """The guard divides iadeep's avg JCT by the better packing baseline's, per setting."""
    import pandas as pd

    from iadeep.experiment._sweep import guard_figures

    rows = []
    floors = {"s1": 1.0, "s2": 2.4, "s3": 1.0}  # mean dedicated run time per setting
    for setting, (i, a, g, e) in {"s1": (2.0, 4.0, 2.5, 6.0), "s2": (3.0, 2.0, 2.4, 4.0), "s3": (1.0, 1.25, 1.5, 2.5)}.items():
        rows += [{"setting": setting, "policy": p, "avg_jct_s": v, "avg_dedicated_s": floors[setting]} for p, v in
                 (("iadeep", i), ("antman", a), ("gandiva", g), ("exclusive", e))]
    guard = guard_figures(pd.DataFrame(rows))
    assert guard["worst_vs_packing"] == 1.5 and guard["worst_setting"] == "s2"  # 3.0 / min(2.0, 2.4)
    assert guard["median_vs_packing"] == 0.8  # ratios 0.8, 1.5, 0.8
    assert guard["above_packing"] == "s2 1.50"  # the only one above 1.05
    assert guard["worst_vs_exclusive"] == 0.75 and guard["met"] == "no"
    # s2: 2.4 / 4.0 = 0.6 > 0.5: no policy reaches half of exclusive's avg JCT there
    assert guard["floor_vs_exclusive"] == 0.6 and guard["unreachable_vs_exclusive"] == "s2"


def test_the_dedicated_floor_bounds_every_policy_on_a_real_slice(tmp_path):
    """No policy's avg JCT is below the mean dedicated run time (progress is capped at dedicated
    speed), and the floor counts the same jobs as the JCT statistics."""
    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment._steps import build_workload, fetch_inputs
    from iadeep.experiment._sweep import dedicated_floor
    from iadeep.interference import InterferenceModel
    from iadeep.policy import make_policy
    from iadeep.sim import ClusterSpec, SimSettings, simulate

    cfg = ExperimentConfig(jobs=60, target_load=2.0, seed=0, out=str(tmp_path))
    paths = fetch_inputs(cfg, progress=False)
    workload, _ = build_workload(cfg, paths["trace"])
    model = InterferenceModel.from_file(paths["throughputs"])
    for name in ("iadeep", "gandiva", "exclusive"):
        result = simulate(workload, make_policy(name, model), model, ClusterSpec(), SimSettings(seed=0, record_timeline=False))
        floor = dedicated_floor(result.jobs)
        assert result.summary()["avg_jct_s"] >= floor > 0
        assert (result.jobs["jct_s"] >= result.jobs["duration_s"] - 1e-6).all()
