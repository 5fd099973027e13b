"""Jobs at a trace's edge through the simulator and the experiment: a job of 0 s completes at once and
counts in the completed jobs and the JCT statistics unless the user drops it; censored jobs of 0 s stay."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from iadeep.cli import app
from iadeep.policy import make_policy, policy_names
from iadeep.sim import ClusterSpec, simulate

OPENB_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _table(rows: list[dict]) -> pd.DataFrame:
    base = {"gpu_milli": np.nan, "gpu_spec": "", "censored": False, "model": "ResNet-18", "batch_size": 32, "app": "r"}
    return pd.DataFrame([{**base, **r} for r in rows])


@pytest.mark.parametrize("policy", policy_names())
def test_a_job_of_zero_seconds_completes_at_once_and_counts(model, policy: str) -> None:
    jobs = _table([{"job_id": "a", "submit_time": 0.0, "duration": 100.0, "num_gpus": 1},
                   {"job_id": "zero", "submit_time": 5.0, "duration": 0.0, "num_gpus": 1},
                   {"job_id": "edge", "submit_time": 6.0, "duration": 0.0, "num_gpus": 1, "censored": True}])
    with np.errstate(all="raise"):
        r = simulate(jobs, make_policy(policy, model), model, ClusterSpec(1, 2, 24.0))
    by = r.jobs.set_index("job_id")
    assert by.loc["zero", "end_s"] == by.loc["zero", "start_s"] == 5.0 and by.loc["zero", "jct_s"] == 0.0
    assert math.isnan(by.loc["zero", "slowdown"])  # JCT / 0 s: undefined, not inf
    s = r.summary()
    assert s["jct_jobs"] == 2 and s["censored_jobs"] == 1
    assert s["avg_jct_s"] == pytest.approx((by.loc["a", "jct_s"] + 0.0) / 2)
    assert s["mean_slowdown"] == pytest.approx(by.loc["a", "slowdown"])  # over the jobs that have one
    assert r.summary(include_censored=True)["jct_jobs"] == 3


def test_experiment_summary_says_what_was_done_with_zero_second_jobs(tmp_path, dataset_cache, monkeypatch) -> None:
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    pods = tmp_path / "pods.csv"
    pods.write_text(OPENB_HEADER + "p0,1,1,1,500,,LS,Succeeded,0,100,0\n"  # 100 s
                    "p1,1,1,1,500,,LS,Failed,10,20,20\n"  # 0 s: completes at once
                    "p2,1,1,1,500,,LS,Running,30,200,200\n"  # scheduled at the snapshot (200): censored, 0 s
                    "p3,1,1,1,500,,LS,Succeeded,40,90,50\n")  # 40 s
    docs = {}
    for drop in (False, True):
        out = tmp_path / f"run-{drop}"
        args = ["experiment", "run", "--trace", "openb", "--trace-file", str(pods), "--target-load", "0",
                "--policies", "exclusive", "--out", str(out)] + (["--drop-zero-duration"] if drop else [])
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        docs[drop] = json.loads((out / "summary.json").read_text()), (out / "report.md").read_text(), out
    kept, report, out = docs[False]
    assert kept["trace"]["zero_duration"] == "kept" and kept["trace"]["jobs"] == 4
    assert kept["trace"]["flagged"] == {"censored": 1, "zero_duration": 1} and "zero_duration" not in kept["trace"]["dropped"]
    jobs = pd.read_csv(out / "jobs-exclusive.csv").set_index("job_id")
    assert jobs.loc["p1", "end_s"] == jobs.loc["p1", "start_s"]
    assert kept["policies"]["exclusive"]["jct_jobs"] == 3  # p0, p1 and p3; p2 is censored
    assert kept["policies"]["exclusive"]["avg_jct_s"] == pytest.approx(jobs.loc[["p0", "p1", "p3"], "jct_s"].mean())
    assert "jobs of 0 s: kept" in report
    dropped, report, _ = docs[True]
    assert dropped["trace"]["zero_duration"] == "dropped" and dropped["trace"]["jobs"] == 3
    assert dropped["trace"]["dropped"]["zero_duration"] == 1 and dropped["trace"]["flagged"] == {"censored": 1}
    assert dropped["policies"]["exclusive"]["jct_jobs"] == 2
    assert "jobs of 0 s: dropped" in report
