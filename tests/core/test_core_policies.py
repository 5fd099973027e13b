"""Behaviour every registered policy must have, on views built by the real simulator."""

import numpy as np
import pytest

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.policy import JobRequest, Placement, Wait, make_policy, policy_names
from iadeep.sim import ClusterSpec, SimSettings, Simulator


def _busy_sim(model: InterferenceModel, name: str, workload):
    """A simulator part-way through the workload (several GPUs occupied)."""
    sim = Simulator(workload.head(30), make_policy(name, model), model, ClusterSpec(2, 4, 24.0), SimSettings())
    for h in range(12):
        sim.status[h] = 1
        sim.queue.add(h, float(sim.submit[h]), 0.0)
    sim._schedule()
    return sim


@pytest.mark.parametrize("name", policy_names())
def test_place_fits_capacity_and_does_not_mutate(model, workload, name):
    sim = _busy_sim(model, name, workload)
    view = sim.view()
    before = {k: v.copy() for k, v in sim._ro.items()}
    job = sim._request(20, 0, 0)
    decision = sim.policy.place(job, view)
    for k, v in sim._ro.items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(ValueError):
        view.slots[0, 0] = 99  # the view is read-only
    if isinstance(decision, Placement):
        assert len(decision.gpus) == job.num_gpus == len(set(decision.gpus))
        for g in decision.gpus:
            assert (view.slots[g] >= 0).sum() < sim.policy.limit
            assert view.gpu_mem_used_gib[g] + job.mem_gib <= view.gpu_mem_total_gib[g] + 1e-9
    else:
        assert isinstance(decision, Wait) and decision.reason


@pytest.mark.parametrize("name", policy_names())
def test_place_is_deterministic(model, workload, name):
    a, b = _busy_sim(model, name, workload), _busy_sim(model, name, workload)
    assert a.policy.place(a._request(20, 0, 0), a.view()) == b.policy.place(b._request(20, 0, 0), b.view())


@pytest.mark.parametrize("name", policy_names())
def test_filter_and_score_follow_extender_rules(model, workload, name):
    sim = _busy_sim(model, name, workload)
    view = sim.view()
    job = sim._request(20, 0, 0)
    res = sim.policy.filter(job, view, list(view.node_names) + ["no-such-node"])
    assert "no-such-node" in res.failed and "inventory" in res.failed["no-such-node"]
    assert set(res.feasible) | set(res.failed) == set(view.node_names) | {"no-such-node"}
    assert all(reason for reason in res.failed.values())
    scores = sim.policy.score(job, view, res.feasible)
    assert set(scores) == set(res.feasible)
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
    # assess (what the extender answers with) is filter and score in one pass
    for h in range(12, 30):
        job = sim._request(h, 0, 0)
        res = sim.policy.filter(job, view)
        assert sim.policy.assess(job, view) == (res, sim.policy.score(job, view, res.feasible))


def test_memory_and_oom_pairs_are_refused(model):
    """A GPU holding ResNet-50 (batch 128) refuses partners measured to run out of memory."""
    from iadeep.policy import ClusterView

    big = model.type_id(JobType("ResNet-50", 128))
    lm = model.type_id(JobType("LM", 20))
    slots = np.array([[0, -1]])
    view = ClusterView(0.0, ("n0",), np.array([0]), np.array([0]), np.array([24.0]), np.array([model.mem_gib[big]]), slots,
                       np.array([big, lm]), np.array([big, lm]), np.array([1, 1]), np.array([100.0, 100.0]), np.zeros(2),
                       np.array([1.0, 0.0]))
    for name in ("antman", "gandiva", "iadeep"):
        pol = make_policy(name, model)
        decision = pol.place(JobRequest(1, "j1", lm, 1, float(model.mem_gib[lm]), 100.0), view)
        assert isinstance(decision, Wait) and "out of memory" in decision.reason


def test_unknown_policy_lists_known(model):
    with pytest.raises(KeyError, match="known: iadeep"):
        make_policy("nope", model)


def test_iadeep_filter_agrees_with_place(model, workload):
    """When place() says wait, filter() passes no node (the extender's filter and bind agree)."""
    sim = _busy_sim(model, "iadeep", workload)
    view = sim.view()
    for h in range(12, 30):
        job = sim._request(h, 0, 0)
        decision = sim.policy.place(job, view)
        res = sim.policy.filter(job, view)
        if isinstance(decision, Wait):
            assert not res.feasible and decision.reason in res.failed.values()
        else:
            owners = {view.node_names[view.gpu_node[g]] for g in decision.gpus}
            assert owners & set(res.feasible) or job.num_gpus > 4
