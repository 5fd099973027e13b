"""Traces as they are, through the simulator and the experiment: censored jobs, infeasible jobs,
GPU shares and models, strict JSON (issue 10)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from iadeep.cli import app
from iadeep.policy import make_policy
from iadeep.sim import (
    ClusterSpec,
    InfeasibleJobError,
    NodeGroup,
    SimSettings,
    Simulator,
    feasibility,
    simulate,
    type_speeds,
)

OPENB_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _env(monkeypatch, dataset_cache) -> None:
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))


def _strict_load(path: Path):
    """Parse as strict JSON: NaN / Infinity are rejected."""

    def no_constant(name: str):
        raise ValueError(f"{path.name}: non-standard JSON constant {name}")

    return json.loads(path.read_text(), parse_constant=no_constant)


def _table(rows: list[dict]) -> pd.DataFrame:
    base = {"gpu_milli": np.nan, "gpu_spec": "", "censored": False, "model": "ResNet-18", "batch_size": 32, "app": "r"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_wider_than_cluster_is_dropped_and_counted_not_a_traceback(tmp_path, dataset_cache, monkeypatch):
    """The issue's input: 1 node x 2 GPUs, the default Philly slice, exclusive."""
    _env(monkeypatch, dataset_cache)
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["experiment", "run", "--nodes", "1", "--gpus-per-node", "2", "--policies", "exclusive",
                                   "--jobs", "60", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    doc = _strict_load(out / "summary.json")
    assert doc["trace"]["dropped"]["wider_than_cluster"] > 0
    assert doc["trace"]["jobs"] == 60
    assert "wider_than_cluster" in (out / "report.md").read_text()
    jobs = pd.read_csv(out / "jobs-exclusive.csv")
    assert jobs["num_gpus"].max() <= 2 and jobs["end_s"].notna().all()


def test_simulator_raises_a_typed_error_naming_the_job(model):
    jobs = _table([{"job_id": "a", "submit_time": 0.0, "duration": 10.0, "num_gpus": 1},
                   {"job_id": "wide", "submit_time": 1.0, "duration": 10.0, "num_gpus": 3}])
    with pytest.raises(InfeasibleJobError) as ei:
        Simulator(jobs, make_policy("exclusive", model), model, ClusterSpec(1, 2, 24.0))
    assert ei.value.job_id == "wide" and ei.value.reason == "wider_than_cluster"
    assert "job wide" in str(ei.value) and isinstance(ei.value, ValueError)
    # skip: the job is reported unschedulable; the other one runs.
    r = simulate(jobs, make_policy("exclusive", model), model, ClusterSpec(1, 2, 24.0), infeasible="skip")
    by = r.jobs.set_index("job_id")
    assert bool(by.loc["wide", "unschedulable"]) and math.isnan(by.loc["wide", "end_s"])
    assert by.loc["a", "end_s"] == pytest.approx(10.0)
    s = r.summary()
    assert s["unschedulable_jobs"] == 1 and s["jct_jobs"] == 1 and s["avg_jct_s"] == pytest.approx(10.0)


def test_gpu_model_constraint_counts_as_wider_than_cluster(model):
    cluster = ClusterSpec(groups=(NodeGroup(1, 2, 16.0, "T4"), NodeGroup(1, 4, 32.0, "V100M32")))
    jobs = _table([{"job_id": "t4x2", "submit_time": 0.0, "duration": 5.0, "num_gpus": 2, "gpu_spec": "T4"},
                   {"job_id": "t4x3", "submit_time": 0.0, "duration": 5.0, "num_gpus": 3, "gpu_spec": "T4"},
                   {"job_id": "any5", "submit_time": 0.0, "duration": 5.0, "num_gpus": 5},
                   {"job_id": "a100", "submit_time": 0.0, "duration": 5.0, "num_gpus": 1, "gpu_spec": "A100"}])
    assert feasibility(jobs, model, cluster).tolist() == ["", "wider_than_cluster", "", "wider_than_cluster"]


def test_censored_jobs_occupy_gpus_and_leave_jct_stats(model):
    """A censored job holds its GPU for its observed time; JCT statistics exclude it by default."""
    jobs = _table([{"job_id": "long", "submit_time": 0.0, "duration": 100.0, "num_gpus": 1, "censored": True},
                   {"job_id": "next", "submit_time": 1.0, "duration": 10.0, "num_gpus": 1}])
    r = simulate(jobs, make_policy("exclusive", model), model, ClusterSpec(1, 1, 24.0))
    by = r.jobs.set_index("job_id")
    assert by.loc["next", "start_s"] == pytest.approx(100.0)  # waited for the censored job's GPU
    s = r.summary()
    assert s["censored_jobs"] == 1 and s["jct_jobs"] == 1
    assert s["avg_jct_s"] == pytest.approx(110.0 - 1.0)
    both = r.summary(include_censored=True)
    assert both["jct_jobs"] == 2 and both["avg_jct_s"] == pytest.approx((100.0 + 109.0) / 2)
    assert s["makespan_s"] == both["makespan_s"] == pytest.approx(110.0)


def test_gpu_shares_pack_up_to_one_gpu_and_run_at_trace_speed(model):
    """openb semantics: shares on a GPU sum to at most 1000; share holders do not interfere."""
    jobs = _table([{"job_id": f"s{k}", "submit_time": 0.0, "duration": 50.0, "num_gpus": 1, "gpu_milli": 400.0,
                    "model": "ResNet-18", "batch_size": 32} for k in range(3)])
    r = simulate(jobs, make_policy("antman", model), model, ClusterSpec(1, 1, 24.0), SimSettings(measurement_noise=0.0))
    by = r.jobs.set_index("job_id")
    # two shares of 400 fit together (800 <= 1000), the third waits for one of them
    assert sorted(by["start_s"].round(6).tolist()) == [0.0, 0.0, 50.0]
    assert by["end_s"].max() == pytest.approx(100.0)  # every share ran at its trace speed
    # shares of 600: no two fit on the GPU, one at a time
    big = simulate(jobs.assign(gpu_milli=600.0), make_policy("antman", model), model, ClusterSpec(1, 1, 24.0),
                   SimSettings(measurement_noise=0.0))
    assert sorted(big.jobs["start_s"].round(6).tolist()) == [0.0, 50.0, 100.0]


def test_gpu_model_speeds_from_gavel(model, throughputs_path):
    speeds = type_speeds(throughputs_path, model)
    assert np.allclose(speeds["v100"], 1.0)
    t = model.type_id(__import__("iadeep.jobtypes", fromlist=["JobType"]).JobType("ResNet-18", 32))
    jobs = _table([{"job_id": "j", "submit_time": 0.0, "duration": 100.0, "num_gpus": 1, "gpu_spec": "K80"}])
    cluster = ClusterSpec(groups=(NodeGroup(1, 1, 12.0, "K80"), NodeGroup(1, 1, 32.0, "V100M32")))
    r = simulate(jobs, make_policy("exclusive", model), model, cluster, speeds=speeds)
    assert r.jobs["end_s"].iloc[0] == pytest.approx(100.0 / speeds["k80"][t])
    v = simulate(jobs.assign(gpu_spec="V100M32"), make_policy("exclusive", model), model, cluster, speeds=speeds)
    assert v.jobs["end_s"].iloc[0] == pytest.approx(100.0)


def test_every_json_a_run_writes_is_strict(tmp_path, dataset_cache, monkeypatch):
    """All jobs submitted at once (offered load undefined) and every job censored (no JCT)."""
    _env(monkeypatch, dataset_cache)
    pods = tmp_path / "pods.csv"
    pods.write_text(OPENB_HEADER + "p0,1,1,1,500,,LS,Running,0,100,0\np1,1,1,2,1000,,LS,Succeeded,0,60,0\n")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["experiment", "run", "--trace", "openb", "--trace-file", str(pods), "--target-load", "0",
                                   "--policies", "iadeep,exclusive", "--out", str(out)])
    assert res.exit_code == 0, res.output
    files = sorted(out.glob("*.json"))
    assert {f.name for f in files} >= {"summary.json", "workload.json", "metrics-iadeep.json", "metrics-exclusive.json"}
    for f in files:
        _strict_load(f)
    doc = _strict_load(out / "summary.json")
    assert doc["trace"]["offered_load_mean"] is None
    assert "same instant" in doc["trace"]["null_reasons"]["offered_load_mean"]
    assert doc["trace"]["flagged"] == {"censored": 1}  # p0 Running at the snapshot (100)
    pol = doc["policies"]["exclusive"]
    assert pol["censored_jobs"] == 1 and pol["jct_jobs"] == 1
    report = (out / "report.md").read_text()
    assert "censored" in report and "excluded from" in report


def test_preemption_frees_only_gpus_that_suit_the_head(model):
    """Heterogeneous cluster: the head (12.9 GiB) must not be placed on a freed 4 GiB GPU."""
    jobs = _table([
        {"job_id": "a-long-small", "submit_time": 0.0, "duration": 20000.0, "num_gpus": 1, "model": "ResNet-18", "batch_size": 32},
        {"job_id": "b-long-big", "submit_time": 0.0, "duration": 10000.0, "num_gpus": 1, "model": "Transformer", "batch_size": 256},
        {"job_id": "c-head", "submit_time": 1.0, "duration": 100.0, "num_gpus": 1, "model": "ResNet-50", "batch_size": 128},
        {"job_id": "d-behind", "submit_time": 1.0, "duration": 100.0, "num_gpus": 1, "model": "ResNet-18", "batch_size": 32},
    ])
    cluster = ClusterSpec(groups=(NodeGroup(1, 1, 4.0, "small"), NodeGroup(1, 1, 16.0, "big")))
    r = simulate(jobs, make_policy("iadeep", model), model, cluster, SimSettings(measurement_noise=0.0))
    by = r.jobs.set_index("job_id")
    assert by["end_s"].notna().all()
    assert by.loc["c-head", "start_s"] < 100.0  # it did not wait for a long job: b-long-big was preempted
    assert by.loc["b-long-big", "evictions"] == 1 and by.loc["a-long-small", "evictions"] == 0


def test_jobs_too_big_for_the_gpus_are_dropped_before_the_window_is_cut(tmp_path, dataset_cache, throughputs_path,
                                                                        monkeypatch):
    """On 12-GiB GPUs a good share of the mix's job types cannot run. They are dropped before
    ``--start-job``/``--jobs`` cut the window, so the run still has the jobs asked for, at the target
    load (dropped after the cut, the same command gave 179 jobs at load 0.95)."""
    from iadeep.interference import InterferenceModel
    from iadeep.jobtypes import JobType

    _env(monkeypatch, dataset_cache)
    out = tmp_path / "small"
    res = CliRunner().invoke(app, ["experiment", "run", "--gpu-mem-gib", "12", "--policies", "exclusive",
                                   "--start-job", "0", "--jobs", "200", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = _strict_load(out / "workload.json")
    assert doc["jobs"] == 200 and doc["offered_load_mean"] == pytest.approx(1.0, abs=1e-6)
    assert doc["dropped"]["exceeds_gpu_memory"] > 0
    jobs = pd.read_csv(out / "workload.csv")
    model = InterferenceModel.from_file(str(throughputs_path), "v100")
    mem = [model.mem_gib[model.type_id(JobType(m, int(b)))] for m, b in zip(jobs["model"], jobs["batch_size"])]
    assert len(jobs) == 200 and max(mem) <= 12.0
    # the window holds the first 200 jobs that fit, with the mix they have on GPUs where every job fits
    big = tmp_path / "big"
    assert CliRunner().invoke(app, ["experiment", "run", "--gpu-mem-gib", "64", "--policies", "exclusive",
                                    "--start-job", "0", "--jobs", "400", "--out", str(big)]).exit_code == 0
    wide = pd.read_csv(big / "workload.csv")
    fits = wide[[model.mem_gib[model.type_id(JobType(m, int(b)))] <= 12.0
                 for m, b in zip(wide["model"], wide["batch_size"])]]
    assert len(fits) >= 200 and set(fits["job_id"].head(200)) == set(jobs["job_id"])
    merged = fits.head(200).merge(jobs, on="job_id", suffixes=("_big", "_small"))
    assert (merged["model_big"] == merged["model_small"]).all() and (merged["batch_size_big"] == merged["batch_size_small"]).all()


def test_a_window_past_the_traces_end_says_it_has_fewer_jobs(tmp_path, dataset_cache, monkeypatch):
    """A window near the trace's end with fewer jobs than ``--jobs`` says so."""
    _env(monkeypatch, dataset_cache)
    res = CliRunner().invoke(app, ["experiment", "run", "--start-job", "82150", "--jobs", "50", "--policies", "exclusive",
                                   "--out", str(tmp_path / "end")], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    n = _strict_load(tmp_path / "end" / "workload.json")["jobs"]
    assert 0 < n < 50 and f"only {n} of the 50 jobs asked for: the trace has no more after job 82150" in res.output
    full = CliRunner().invoke(app, ["experiment", "run", "--jobs", "20", "--policies", "exclusive", "--out", str(tmp_path / "full")])
    assert full.exit_code == 0 and "jobs asked for" not in full.output


def test_infeasible_keep_reports_unschedulable_jobs(tmp_path, dataset_cache, monkeypatch):
    _env(monkeypatch, dataset_cache)
    out = tmp_path / "k"
    res = CliRunner().invoke(app, ["experiment", "run", "--nodes", "1", "--gpus-per-node", "2", "--policies", "exclusive",
                                   "--jobs", "200", "--infeasible", "keep", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = _strict_load(out / "summary.json")
    wide = doc["trace"]["infeasible_kept"]["wider_than_cluster"]
    assert wide > 0 and "wider_than_cluster" not in doc["trace"]["dropped"]
    pol = doc["policies"]["exclusive"]
    assert pol["unschedulable_jobs"] == wide and pol["jct_jobs"] + wide == doc["trace"]["jobs"] == 200
    jobs = pd.read_csv(out / "jobs-exclusive.csv")
    assert (jobs.loc[jobs["unschedulable"], "num_gpus"] > 2).all() and jobs.loc[~jobs["unschedulable"], "end_s"].notna().all()
    said = " ".join(res.output.split())
    assert f"{wide} of the 200 jobs can never run on this cluster" in said and "the statistics above leave them out" in said
    report = (out / "report.md").read_text()
    assert f"- jobs that can never run on the cluster, kept: `wider_than_cluster` {wide} (" in report
    assert "![normalised to exclusive](normalised.png)" in report  # a run without iadeep: its first policy


def test_a_run_where_no_job_can_ever_run_is_an_error_not_empty_statistics(tmp_path, dataset_cache, monkeypatch):
    _env(monkeypatch, dataset_cache)
    res = CliRunner().invoke(app, ["experiment", "run", "--gpu-mem-gib", "0.5", "--policies", "exclusive", "--jobs", "30",
                                   "--infeasible", "keep", "--out", str(tmp_path / "none")])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "none of the 30 jobs can run on 5 x 4 GPUs x 0.5 GiB (exceeds_gpu_memory 30)" in said and "--infeasible drop" in said
    assert not (tmp_path / "none" / "summary.json").exists()
