"""The undo rule both drivers call (:func:`iadeep.policy.undo_rule`) and the simulator's order of
applying it: the policy decides (``TuningDecision.evict`` and ``avoid``), the simulator bans the
pair and re-queues the newest job when the session ends, as the live system does (the coordinator
records the undo at the end of its session; the extender then bans and evicts)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView, JobRequest, Placement, Undo, Wait, make_policy, undo_rule
from iadeep.sim import ClusterSpec, SimSettings, Simulator


def test_undo_rule_evicts_the_newest_and_bans_every_type_below_the_threshold():
    u = undo_rule(0.8, ["old", "new"], [("ResNet-50", 64), ("LM", 5)], 1.0)
    assert u == Undo("new", (("ResNet-50", 64), ("LM", 5)), 0.8, 1.0, "co-location undone: best measured progress 0.80 < 1")


@pytest.mark.parametrize("progress, below", [(1.0, 1.0), (1.3, 1.0), (math.nan, 1.0), (0.2, None), (0.9, 0.9)])
def test_undo_rule_keeps_the_co_location_at_or_above_the_threshold_or_unmeasured(progress, below):
    assert undo_rule(progress, [1, 2], [3, 4], below) is None


def test_undo_rule_needs_a_co_location_and_matching_types():
    assert undo_rule(0.1, [7], [3], 1.0) is None  # one job alone: nothing to undo
    with pytest.raises(ValueError):
        undo_rule(0.1, [1, 2], [3], 1.0)


def _jobs(rows) -> pd.DataFrame:
    return pd.DataFrame([{"job_id": j, "submit_time": s, "duration": d, "num_gpus": 1, "model": m, "batch_size": b}
                         for j, s, d, m, b in rows])


def _survivor_and_newcomer(model, *, gpus: int = 1) -> pd.DataFrame:
    """A 50,000-s A3C job, a 5,000-s ResNet-50/32 job 200 s later (a pair below taking turns), and
    ``gpus - 1`` 300-s ResNet-18 jobs at 0 s beside them on the other GPUs."""
    a3c = next(t.batch_size for t in model.types if t.model == "A3C")
    rows = [("survivor", 0, 50_000, "A3C", a3c), ("newcomer", 200, 5_000, "ResNet-50", 32)]
    rows += [(f"short-{i}", 0, 300, "ResNet-18", 64) for i in range(gpus - 1)]
    return _jobs(rows)


def test_the_simulator_bans_the_pair_when_the_session_ends_not_when_it_starts(model):
    """A3C and ResNet-50/32 share a GPU worse than taking turns (Gavel's measurements), and no
    batch sizes the session measures make up for it; the newcomer is co-located for its own sake (its wait would be the survivor's
    50,000 s), the session measures it, and the policy undoes it. The policy's decision carries the
    ban (``avoid``) without applying it; the simulator applies it ``trials x trial_s`` after the
    session began, together with the eviction. (On this one GPU the banned newcomer would be locked
    out; ``waive_lockout=False`` takes the lockout rule, tested below, out of the way.)"""
    trial_s = 20.0
    policy = make_policy("iadeep", model, predictor="oracle", bad_pairs_when_waiting=True, preempt=False,
                         waive_lockout=False)
    sim = Simulator(_survivor_and_newcomer(model), policy, model, ClusterSpec(1, 1, 32.0),
                    SimSettings(trial_s=trial_s, measurement_noise=0.0))
    tuned, banned = [], []
    tune, avoid = policy.tune, policy.avoid

    def recording_tune(gpu, view, measure):
        decision = tune(gpu, view, measure)
        tuned.append((sim.now, decision, policy.avoided.copy()))
        return decision

    def recording_avoid(types):
        banned.append((sim.now, list(types)))
        return avoid(types)

    policy.tune, policy.avoid = recording_tune, recording_avoid
    out = sim.run().jobs.set_index("job_id")
    assert out.loc["newcomer", "evictions"] >= 1 and out.loc["survivor", "evictions"] == 0
    t0, decision, avoided_then = next((t, d, a) for t, d, a in tuned if d is not None and d.evict)
    a3c = next(i for i, t in enumerate(model.types) if t.model == "A3C")
    r50 = model.type_id(JobType("ResNet-50", 32))
    assert set(decision.avoid) == {a3c, r50} and decision.type_ids == {}
    assert not avoided_then.any()  # the policy decided; it did not ban by itself
    assert banned[0] == (pytest.approx(t0 + decision.trials * trial_s), list(decision.avoid))
    assert policy.avoided[a3c, r50] and policy.avoided[r50, a3c]


def _run(model, gpus: int, **options):
    policy = make_policy("iadeep", model, predictor="oracle", preempt=False, **options)
    sim = Simulator(_survivor_and_newcomer(model, gpus=gpus), policy, model, ClusterSpec(1, gpus, 32.0),
                    SimSettings(trial_s=20.0, measurement_noise=0.0))
    return policy, sim.run().jobs.set_index("job_id")


def test_a_job_the_ban_would_lock_out_stays_and_the_ban_stands(model):
    """On one GPU the survivor holds the only GPU for 50,000 s: with the ban in force the newcomer
    would wait that long, far more than the pair costs, so the simulator, asking the policy when
    it carries the undo out, keeps it (no eviction) and bans the pair; it ends in less than half
    the time it takes when evicted, and the two jobs' mean JCT is lower."""
    policy, kept = _run(model, 1)
    _, evicted = _run(model, 1, waive_lockout=False)
    a3c = next(i for i, t in enumerate(model.types) if t.model == "A3C")
    r50 = model.type_id(JobType("ResNet-50", 32))
    assert kept.loc["newcomer", "evictions"] == 0 and evicted.loc["newcomer", "evictions"] >= 1
    assert policy.avoided[a3c, r50] and policy.avoided[r50, a3c]
    assert kept.loc["newcomer", "jct_s"] < 0.5 * evicted.loc["newcomer", "jct_s"]
    assert kept["jct_s"].mean() < evicted["jct_s"].mean()


def _two_gpus(model, second: tuple[str, float], survivor_left_s: float = 50_000.0):
    """GPU 0: the survivor (A3C, ``survivor_left_s`` left) and the newcomer (ResNet-50/32, 5,000 s
    left, placed last); GPU 1: one job of ``second = (model name, s left)``. Handles 0, 1, 2."""
    a3c = next(i for i, t in enumerate(model.types) if t.model == "A3C")
    r50 = model.type_id(JobType("ResNet-50", 32))
    other = next(i for i, t in enumerate(model.types) if t.model == second[0])
    types = np.array([a3c, r50, other])
    view = ClusterView(0.0, ("n0",), np.zeros(2, dtype=np.int64), np.arange(2), np.full(2, 32.0), np.zeros(2),
                       np.array([[0, 1], [2, -1]]), types, types, np.ones(3, dtype=np.int64),
                       np.array([survivor_left_s, 5_000.0, second[1]]), np.zeros(3), np.ones(3))
    return view, (a3c, r50)


@pytest.mark.parametrize("second, survivor_left_s, kept", [
    (("A3C", 40_000.0), 50_000.0, True),  # both GPUs hold a banned partner for 40,000 s or more
    (("ResNet-18", 300.0), 50_000.0, False),  # GPU 1 holds no banned partner: not locked out
    (("A3C", 40_000.0), 600.0, False),  # locked out for 600 s: less than the pair costs
])
def test_an_undo_keeps_the_newest_job_only_while_the_ban_would_lock_it_out(model, second, survivor_left_s, kept):
    policy = make_policy("iadeep", model, predictor="oracle")
    view, undone = _two_gpus(model, second, survivor_left_s)
    lock = policy.lockout_s(undone[1], view, exclude=1, also=(undone[0],))
    assert lock == (pytest.approx(min(survivor_left_s, second[1])) if second[0] == "A3C" else 0.0)
    assert policy.keeps(1, undone, view) is kept
    assert not policy.avoided.any()  # keeps() asks as if the undo's ban were in force, without banning
    assert make_policy("iadeep", model, predictor="oracle", waive_lockout=False).keeps(1, undone, view) is False


@pytest.mark.parametrize("left_s, placed", [(40_000.0, True), (600.0, False)])
def test_reserve_places_a_locked_out_job_beside_a_banned_partner_when_waiting_costs_more(model, left_s, placed):
    """Both GPUs hold an A3C job (``left_s`` left) and (A3C, ResNet-50/32) is banned: a ResNet-50
    job of 5,000 s is placed beside one when the lockout outlasts the pair's cost, else it waits;
    without the rule it always waits."""
    a3c = next(i for i, t in enumerate(model.types) if t.model == "A3C")
    r50 = model.type_id(JobType("ResNet-50", 32))
    types = np.array([a3c, a3c, r50])
    view = ClusterView(0.0, ("n0",), np.zeros(2, dtype=np.int64), np.arange(2), np.full(2, 32.0), np.zeros(2),
                       np.array([[0, -1], [1, -1]]), types, types, np.ones(3, dtype=np.int64),
                       np.array([left_s, left_s + 100.0, 5_000.0]), np.zeros(3), np.array([1.0, 1.0, 0.0]))
    job = JobRequest(2, "newcomer", r50, 1, 4.0, 5_000.0)
    for waive in (True, False):
        policy = make_policy("iadeep", model, predictor="oracle", waive_lockout=waive)
        policy.avoid([a3c, r50])
        decision = policy.reserve(job, view)
        if waive and placed:
            assert isinstance(decision, Placement) and decision.gpus == (0,), decision  # the sooner-ending partner
        else:
            assert isinstance(decision, Wait), decision
