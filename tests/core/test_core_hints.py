"""The queueing hint of a :class:`~iadeep.policy.Wait` (``holds_up_to_behind``) and the simulator's
use of it: skipping a retry the policy promised to answer with a wait must not change any decision.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from iadeep.policy import Wait, make_policy
from iadeep.sim import ClusterSpec, SimSettings, simulate

HOUR = 3600.0


def _counted(policy, *, strip: bool):
    """Count ``policy.place`` calls; with ``strip`` drop every hint (the simulator then asks on every event)."""
    calls = {"n": 0}
    place = policy.place

    def counted(job, view):
        calls["n"] += 1
        decision = place(job, view)
        return replace(decision, holds_up_to_behind=-1) if strip and isinstance(decision, Wait) else decision

    policy.place = counted
    return calls


@pytest.fixture(scope="module")
def crowded(philly_path):
    """300 real Philly jobs (1-8 GPUs) at mean offered load 2 on 20 GPUs: gangs often find too few
    eligible GPUs, the waits that carry a hint."""
    from iadeep.traces import TraceOptions, load_trace

    opts = TraceOptions(start_job=10_000, n_jobs=300, max_gpus=8, target_load=2.0, cluster_gpus=20, seed=0)
    return load_trace("philly", philly_path, opts)


@pytest.mark.parametrize("queue", ["fifo", "kube"])
def test_skipping_the_retries_a_wait_covers_changes_no_decision(model, crowded, queue):
    """The same real slice (learned predictions, measurement noise) with and without the hints:
    every job starts and ends at the same time on the same GPUs, with the same partners, batch
    sizes, tuning trials and preemptions; the hints saved calls."""
    workload = crowded
    out, calls = {}, {}
    for strip in (False, True):
        policy = make_policy("iadeep", model)
        calls[strip] = _counted(policy, strip=strip)
        out[strip] = simulate(workload, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(queue=queue)).jobs
    cols = ["job_id", "start_s", "end_s", "placement", "partners", "final_batch_size", "colocations", "tuning_trials", "evictions"]
    pd.testing.assert_frame_equal(out[False][cols], out[True][cols])
    assert calls[False]["n"] < calls[True]["n"]


def test_a_waiting_head_is_asked_again_when_a_job_queues_behind_it(model):
    """Twenty GPUs held by LM gangs nothing can share with; a 30-min ResNet-50 reaches the head at
    600 s with nobody behind it, so it waits (no queue is held back: no preemption), and its wait
    promises to hold only while nobody queues behind (``holds_up_to_behind = 0``). A job arriving at
    3600 s changes no GPU, yet the head must be asked again: one job is now held back behind a wait
    of a day, so the head preempts a 4-GPU gang and starts at 3600 s, not when a gang ends."""
    rows = [("lm8", 0, 12 * 24 * HOUR, 8, "LM", 10)]
    rows += [(f"lm4-{i}", 0, 26 * HOUR, 4, "LM", 5) for i in range(3)]
    rows += [("head", 600, 0.5 * HOUR, 1, "ResNet-50", 128), ("behind", 3600, 0.5 * HOUR, 1, "ResNet-50", 128)]
    jobs = pd.DataFrame([{"job_id": j, "submit_time": t, "duration": d, "num_gpus": k, "model": m, "batch_size": b}
                         for j, t, d, k, m, b in rows])
    policy = make_policy("iadeep", model, predictor="oracle")
    waits = []
    place = policy.place

    def recorded(job, view):
        decision = place(job, view)
        if isinstance(decision, Wait) and job.job_id == "head":
            waits.append((view.now_s, job.jobs_behind, decision.holds_up_to_behind))
        return decision

    policy.place = recorded
    out = simulate(jobs, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(measurement_noise=0.0)).jobs.set_index("job_id")
    assert waits == [(600.0, 0, 0)]
    assert out.loc["head", "start_s"] == 3600
    assert out["evictions"].sum() == 1


def test_a_head_is_asked_again_when_more_jobs_behind_would_make_it_preempt(model):
    """Two GPUs, each held by one LM job nothing below can share with: ``x`` frees its GPU at
    2414 s, ``v`` holds the other for 5 h. A 30-min ResNet-50 reaches the head at 600 s with one
    job behind it. The rule preempts when ``W (1 + b) > (R + c) + R b``, i.e. ``W > R + c / (1 + b)``
    with ``R`` = 1800 s, ``c`` = 30 s and ``b`` = min(jobs behind, GPUs with room) = min(B, 2):
    at 600 s ``W`` = 1814 s <= 1815 s (b = 1), so it waits, a wait that holds only while one job
    is behind; at 602 s a second job arrives: ``W`` = 1812 s > 1810 s (b = 2), so the head must be
    asked again and preempts ``v`` (it would hold its GPU far longer than the head's run)."""
    rows = [("x", 0, 2414.0, 1, "LM", 10), ("v", 0, 5 * HOUR, 1, "LM", 10), ("head", 600, 0.5 * HOUR, 1, "ResNet-50", 128),
            ("b1", 600, 0.5 * HOUR, 1, "ResNet-50", 128), ("b2", 602, 0.5 * HOUR, 1, "ResNet-50", 128)]
    jobs = pd.DataFrame([{"job_id": j, "submit_time": t, "duration": d, "num_gpus": k, "model": m, "batch_size": b}
                         for j, t, d, k, m, b in rows])
    out = simulate(jobs, make_policy("iadeep", model, predictor="oracle"), model, ClusterSpec(1, 2, 24.0),
                   SimSettings(measurement_noise=0.0)).jobs.set_index("job_id")
    assert out.loc["v", "evictions"] == 1
    assert out.loc["head", "start_s"] == 602
