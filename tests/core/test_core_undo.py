"""The undo rule both drivers call (:func:`iadeep.policy.undo_rule`) and the simulator's order of
applying it: the policy decides (``TuningDecision.evict`` and ``avoid``), the simulator bans the
pair and re-queues the newest job when the session ends, as the live system does (the coordinator
records the undo at the end of its session; the extender then bans and evicts)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from iadeep.jobtypes import JobType
from iadeep.policy import Undo, make_policy, undo_rule
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


def test_the_simulator_bans_the_pair_when_the_session_ends_not_when_it_starts(model):
    """A3C and ResNet-50/32 share a GPU worse than taking turns (Gavel's measurements), and no
    batch sizes the session measures make up for it; the newcomer is co-located for its own sake (its wait would be the survivor's
    50,000 s), the session measures it, and the policy undoes it. The policy's decision carries the
    ban (``avoid``) without applying it; the simulator applies it ``trials x trial_s`` after the
    session began, together with the eviction."""
    trial_s = 20.0
    policy = make_policy("iadeep", model, predictor="oracle", bad_pairs_when_waiting=True, preempt=False)
    jobs = _jobs([("survivor", 0, 50_000, "A3C", next(t.batch_size for t in model.types if t.model == "A3C")),
                  ("newcomer", 200, 5_000, "ResNet-50", 32)])
    sim = Simulator(jobs, policy, model, ClusterSpec(1, 1, 32.0), SimSettings(trial_s=trial_s, measurement_noise=0.0))
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
