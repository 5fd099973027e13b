"""Simulator invariants on a real Philly slice, for every policy."""

import numpy as np
import pandas as pd
import pytest

from iadeep.policy import Placement, make_policy, policy_names
from iadeep.policy.antman import AntMan
from iadeep.sim import ClusterSpec, SimSettings, Simulator, simulate


@pytest.fixture(scope="module")
def results(model, workload):
    return {name: simulate(workload, make_policy(name, model), model, ClusterSpec(), SimSettings(seed=3)) for name in policy_names()}


@pytest.mark.parametrize("name", policy_names())
def test_every_job_finishes_once_and_no_faster_than_dedicated(results, workload, name):
    jobs = results[name].jobs
    assert len(jobs) == len(workload) and jobs["job_id"].is_unique
    assert set(jobs["job_id"]) == set(workload["job_id"])
    assert jobs["end_s"].notna().all()
    assert (jobs["jct_s"] >= jobs["duration_s"] * (1 - 1e-9)).all()
    assert (jobs["start_s"] >= jobs["submit_s"]).all()
    s = results[name].summary()
    assert 0 < s["gpu_utilisation"] <= 1 and s["mean_slowdown"] >= 1


def test_exclusive_never_colocates(results):
    assert (results["exclusive"].jobs["colocations"] == 0).all()
    assert (results["exclusive"].jobs["tuning_trials"] == 0).all()


def test_sharing_policies_do_colocate(results):
    for name in ("iadeep", "antman", "gandiva"):
        assert (results[name].jobs["colocations"] > 0).any(), name


def test_iadeep_tunes_with_trials(results):
    jobs = results["iadeep"].jobs
    assert jobs["tuning_trials"].sum() > 0


def test_same_seed_same_results_changed_seed_changes(model, workload, results):
    again = simulate(workload, make_policy("iadeep", model), model, ClusterSpec(), SimSettings(seed=3))
    pd.testing.assert_frame_equal(again.jobs, results["iadeep"].jobs)
    other = simulate(workload, make_policy("iadeep", model), model, ClusterSpec(), SimSettings(seed=4))
    assert not np.allclose(other.jobs["end_s"], results["iadeep"].jobs["end_s"])


def test_memory_overcommit_is_detected(model, workload):
    """The capacity check can fail: a policy that ignores memory is stopped with an error."""

    class Greedy(AntMan):
        name = "greedy-test"
        colocation_limit = 8

        def place(self, job, view):
            return Placement(job.job_id, tuple(range(job.num_gpus)))

    with pytest.raises(RuntimeError, match="over-committed|full GPU"):
        Simulator(workload, Greedy(model), model, ClusterSpec(1, 8, 24.0)).run()


def test_job_too_large_for_cluster_is_a_clear_error(model, workload):
    big = workload.copy()
    big.loc[big.index[0], "num_gpus"] = 64
    with pytest.raises(ValueError, match="needs 64 GPUs"):
        Simulator(big, make_policy("exclusive", model), model, ClusterSpec())


@pytest.mark.parametrize("name", policy_names())
def test_timeline_ends_with_the_last_job(results, name):
    r = results[name]
    assert r.timeline["t_s"].max() == pytest.approx(r.jobs["end_s"].max())
    assert r.timeline["queue_len"].iloc[-1] == 0


@pytest.mark.parametrize("name", ["iadeep", "gandiva"])
def test_undo_never_thrashes(model, philly_path, name):
    """A packing measured bad is remembered: no job is undone more often than there are partner types.

    iadeep runs without head-of-line preemption here: a preemption is an eviction too, and its own
    bound (a job's preemption budget) is tested in ``tests/core/test_core_robust.py``."""
    from iadeep.traces import TraceOptions, load_trace

    jobs = load_trace("philly", philly_path, TraceOptions(n_jobs=1500, max_gpus=8, seed=0))
    options = {"preempt": False} if name == "iadeep" else {}
    r = simulate(jobs, make_policy(name, model, **options), model, ClusterSpec(6, 8, 24.0), SimSettings(record_timeline=False))
    assert r.jobs["evictions"].max() <= len(model.types)
    assert r.jobs["evictions"].sum() <= len(model.types) ** 2
