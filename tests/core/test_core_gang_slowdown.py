"""A job placed beside a gang that other jobs already slow: its price counts the time it keeps
the gang slowed after they leave (:meth:`iadeep.policy.iadeep.IADeep.pair_cost_s`, module
docstring: a gang's slowdown ends)."""

from __future__ import annotations

import numpy as np
import pytest

from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView, make_policy

HOUR = 3600.0


def _gang_view(model, *, gang_rate: float, partner_left_s: float) -> tuple[ClusterView, int, int]:
    """One node of 4 GPUs: a 4-GPU LM/10 gang (handle 0, 20 h of work left) on every GPU, slowed to
    ``gang_rate``; a ResNet-18/64 job (handle 1) beside it on GPU 0 with ``partner_left_s`` left."""
    lm, r18 = model.type_id(JobType("LM", 10)), model.type_id(JobType("ResNet-18", 64))
    slots = np.array([[0, 1], [0, -1], [0, -1], [0, -1]])
    types = np.array([lm, r18])
    view = ClusterView(0.0, ("n0",), np.zeros(4, dtype=np.int64), np.arange(4), np.full(4, 24.0),
                       np.full(4, 12.0), slots, types, types.copy(), np.array([4, 1]),
                       np.array([20 * HOUR, partner_left_s]), np.zeros(2), np.array([gang_rate, 1.0]))
    return view, lm, r18


@pytest.mark.parametrize("new_s", [10 * HOUR, 0.5 * HOUR, 1.5 * HOUR])
def test_a_job_beside_a_slowed_gang_pays_for_the_slowdown_it_extends(model, new_s):
    """The gang runs at ``b`` (its measured throughput beside ResNet-18/64, which itself runs
    unslowed beside LM) while the partner on GPU 0 stays its last hour. A ResNet-18/64 job of
    ``new_s`` on GPU 1 keeps it at ``b`` until ``new_s``: the gang finishes ``(1 - b)(new_s - 1 h)``
    later (0 when the new job leaves first), on each of its 4 GPUs. With the slowdown taken as
    lasting (``slowdown_ends=False``) the price is 0 whatever the new job's length. A gang
    nobody slows is priced the same either way: ``(1 - b) new_s`` per GPU."""
    view, lm, r18 = _gang_view(model, gang_rate=1.0, partner_left_s=HOUR)
    b = float(model.norm[lm, r18])
    assert float(model.norm[r18, lm]) == pytest.approx(1.0) and 0.5 < b < 0.8
    slowed, _, _ = _gang_view(model, gang_rate=b, partner_left_s=HOUR)
    alone = ClusterView(0.0, view.node_names, view.gpu_node, view.gpu_local_index, view.gpu_mem_total_gib,
                        view.gpu_mem_used_gib, np.array([[0, -1]] * 4), view.job_type[:1], view.job_type[:1],
                        view.job_num_gpus[:1], view.job_work_left_s[:1], view.job_updated_s[:1], view.job_rate[:1])
    for on in (True, False):
        pol = make_policy("iadeep", model, predictor="oracle", slowdown_ends=on)
        cost = float(pol.pair_cost_s(r18, new_s, np.array([0]), slowed)[0])
        assert cost == pytest.approx(4 * (1 - b) * max(new_s - HOUR, 0.0) if on else 0.0, abs=1e-6)
        assert float(pol.pair_cost_s(r18, new_s, np.array([0]), alone)[0]) == pytest.approx(4 * (1 - b) * new_s)


def test_the_experiment_turns_it_on_under_the_kube_queue_only():
    """kube-scheduler's queue (the extender's) prices a slowed gang's end; strict FIFO does not."""
    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment._steps import policy_flags

    assert policy_flags(ExperimentConfig(queue="kube")).get("slowdown_ends") is True
    assert "slowdown_ends" not in policy_flags(ExperimentConfig(queue="fifo"))
