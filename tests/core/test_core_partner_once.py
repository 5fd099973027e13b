"""A gang that would share several GPUs with one partner: with ``partner_once`` it pays that
partner's price once, not once per GPU shared (:class:`iadeep.policy.iadeep.IADeep`, module
docstring, step 3)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView, JobRequest, Placement, make_policy
from iadeep.policy.iadeep import finish_times

HOUR = 3600.0


def _partner_on_four(model, left_s: float) -> tuple[ClusterView, int, int]:
    """One node of 4 GPUs, a 4-GPU LM/10 gang (handle 0) alone on each with ``left_s`` of work."""
    r18, lm = model.type_id(JobType("ResNet-18", 64)), model.type_id(JobType("LM", 10))
    types = np.array([lm])
    view = ClusterView(0.0, ("n0",), np.zeros(4, dtype=np.int64), np.arange(4), np.full(4, 24.0), np.full(4, 4.0),
                       np.array([[0, -1]] * 4), types, types.copy(), np.array([4]), np.array([left_s]), np.zeros(1),
                       np.ones(1))
    return view, r18, lm


@pytest.mark.parametrize("pod_gpus", [0, 4])
def test_a_gang_pays_a_partner_on_all_its_gpus_once(model, pod_gpus):
    """A 4-GPU ResNet-18/64 job asks for the 4 GPUs of the gang: its wait is the gang's 20 h, its
    cost its own delay once plus the gang's ``4 x`` delay, once per GPU without ``partner_once``
    (4 x 4) and once with it (as pods on one node and as any 4 GPUs)."""
    view, r18, lm = _partner_on_four(model, 20 * HOUR)
    a, b = float(model.norm[r18, lm]), float(model.norm[lm, r18])
    remaining = 2 * HOUR
    t_new, t_part = finish_times(np.array(remaining), np.array(20 * HOUR), np.array(a), np.array(b))
    own, part = float(t_new) - remaining, 4 * (float(t_part) - 20 * HOUR)
    assert own >= 0 and part > 0
    job = JobRequest(1, "new", r18, 4, 4.0, remaining, pod_gpus=pod_gpus)
    gains = {}
    for once in (False, True):
        decision = make_policy("iadeep", model, predictor="oracle", partner_once=once).reserve(job, view)
        saving = re.search(r"predicted saving (-?\d+) job-seconds", decision.reason)
        gains[once] = float(saving.group(1)) if isinstance(decision, Placement) else None
    wait = 20 * HOUR
    if wait - own - 4 * part > 0:  # both place; the saving says which price was paid
        assert gains[False] == pytest.approx(wait - own - 4 * part, abs=1.0)
    else:
        assert gains[False] is None  # the partner paid four times: it waits
    assert gains[True] == pytest.approx(wait - own - part, abs=1.0)


def test_the_experiment_turns_it_on_under_strict_fifo_only():
    """Strict FIFO prices a gang's partner once; kube-scheduler's queue (the extender's) and
    backfill keep the price per GPU shared."""
    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment._steps import policy_flags

    assert policy_flags(ExperimentConfig(queue="fifo")).get("partner_once") is True
    for queue in ("kube", "backfill"):
        assert "partner_once" not in policy_flags(ExperimentConfig(queue=queue))
