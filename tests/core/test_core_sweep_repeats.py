"""A sweep's repeats: every policy run several times a setting, each run with its own measurement
noise and the same jobs (``iadeep experiment sweep --repeats``), and the guard over their means."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from iadeep.cli import app
from iadeep.experiment import ExperimentConfig
from iadeep.experiment._steps import fetch_inputs
from iadeep.experiment import by_chance, guard_figures, guard_lines, noise_seed, run_setting

JOB_COLUMNS = ["job_id", "submit_s", "duration_s", "num_gpus", "model", "batch_size"]


def test_the_repeats_of_a_setting_differ_in_their_noise_only(tmp_path, dataset_cache, monkeypatch):
    """Run 0 is the plain run; every run has the same jobs; the rows hold the runs' mean and range;
    without measurement noise every run is the same, with it iadeep's tuning makes them differ."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    base = ExperimentConfig(jobs=60, policies=("iadeep", "gandiva"), queue="kube", out=str(tmp_path / "three"))
    paths = fetch_inputs(base, progress=False)
    rows = {r["policy"]: r for r in run_setting(base, paths, 40000, 2.0, 0, repeats=3)}
    single = {r["policy"]: r for r in run_setting(ExperimentConfig(**{**base.__dict__, "out": str(tmp_path / "one")}),
                                                  paths, 40000, 2.0, 0)}
    setting = tmp_path / "three" / "40000-2-0"
    for policy, row in rows.items():
        assert row["repeats"] == 3 and single[policy]["repeats"] == 1
        runs = [json.loads((setting / sub / f"metrics-{policy}.json").read_text())["avg_jct_s"]
                for sub in (".", "noise-1", "noise-2")]
        assert runs[0] == single[policy]["avg_jct_s"]  # run 0: the experiment's own seed
        assert row["avg_jct_lo_s"] == min(runs) and row["avg_jct_hi_s"] == max(runs)
        assert row["avg_jct_s"] == pytest.approx(sum(runs) / 3, rel=1e-12)
        jobs = [pd.read_csv(setting / sub / f"jobs-{policy}.csv")[JOB_COLUMNS].sort_values("job_id", ignore_index=True)
                for sub in (".", "noise-1", "noise-2")]
        for other in jobs[1:]:
            pd.testing.assert_frame_equal(jobs[0], other)
    assert rows["iadeep"]["avg_jct_lo_s"] < rows["iadeep"]["avg_jct_hi_s"]  # its tuning sessions measure with noise
    quiet = ExperimentConfig(**{**base.__dict__, "measurement_noise": 0.0, "out": str(tmp_path / "quiet")})
    for row in run_setting(quiet, paths, 40000, 2.0, 0, repeats=3):
        assert row["avg_jct_lo_s"] == row["avg_jct_hi_s"], row["policy"]
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        run_setting(base, paths, 40000, 2.0, 0, repeats=0)


def test_each_run_has_a_noise_seed_of_its_own():
    assert noise_seed(7, 0) == 7
    seeds = {noise_seed(s, r) for s in (0, 1, 7) for r in range(1, 6)}
    assert len(seeds) == 15 and noise_seed(7, 3) == noise_seed(7, 3)
    assert all(0 <= s < 2**32 for s in seeds)


def test_the_guard_reads_the_runs_of_each_setting():
    """The figures are of the means; the band is iadeep's greatest over its least run; perfect
    prediction is named slower where every run of it is slower than every learned run."""
    runs = {  # setting -> policy -> the avg JCTs of three runs
        "s1": {"iadeep": (10, 12, 14), "iadeep@oracle": (15, 16, 17), "gandiva": (12, 12, 12), "antman": (20, 20, 20)},
        "s2": {"iadeep": (10, 10, 10), "iadeep@oracle": (9, 11, 12), "gandiva": (10, 10, 10), "antman": (10, 10, 10)},
        "s3": {"iadeep": (8, 9, 10), "iadeep@oracle": (5, 6, 7), "gandiva": (10, 10, 10), "antman": (10, 10, 10)},
    }
    rows = [{"setting": s, "policy": p, "avg_jct_s": sum(v) / 3, "avg_jct_lo_s": min(v), "avg_jct_hi_s": max(v),
             "repeats": 3} for s, by in runs.items() for p, v in by.items()]
    guard = guard_figures(pd.DataFrame(rows))
    assert guard["repeats"] == 3
    assert guard["worst_vs_packing"] == pytest.approx(1.0) and guard["median_vs_packing"] == pytest.approx(1.0)
    assert guard["noise_band_max"] == pytest.approx(1.4) and guard["noise_band_setting"] == "s1"
    assert guard["noise_band_median"] == pytest.approx(1.25)  # 1.4, 1.0, 1.25
    assert guard["oracle_worse_every_run"] == "s1 1.33"  # s2 overlaps
    assert guard["oracle_better_every_run"] == 1  # s3
    assert by_chance(3) == pytest.approx(1 / 20) and by_chance(1) == pytest.approx(1 / 2)
    text = " ".join(guard_lines(guard, "kube", ("iadeep", "antman", "gandiva")))
    assert "3 runs a setting" in text and "up to x1.40 (s1)" in text
    assert "(0.2 settings expected by chance alone): s1 1.33; faster in every run: 1 setting" in text
    single = guard_figures(pd.DataFrame([{**r, "repeats": 1} for r in rows]))
    assert single["repeats"] == 1 and single["noise_band_max"] is None and single["oracle_worse_every_run"] is None
    assert "runs a setting" not in " ".join(guard_lines(single, "kube", ("iadeep", "antman", "gandiva")))


def test_the_sweep_command_takes_repeats(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    monkeypatch.setenv("COLUMNS", "300")
    argv = ["experiment", "sweep", "--jobs", "40", "--loads", "2", "--seeds", "0", "--start-jobs", "40000", "--queue", "kube",
            "--policies", "iadeep,antman,gandiva", "--oracle"]
    res = CliRunner().invoke(app, [*argv, "--repeats", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert (df["repeats"] == 2).all() and (df["avg_jct_lo_s"] <= df["avg_jct_hi_s"]).all()
    guard = json.loads((tmp_path / "guard.json").read_text())
    assert guard["repeats"] == 2 and guard["noise_band_max"] >= 1.0
    assert "2 runs a setting" in " ".join(res.output.split())
    bad = CliRunner().invoke(app, [*argv, "--repeats", "0", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "'--repeats': must be >= 1, got 0" in " ".join(bad.output.split())
