"""The preemption rule's shortcut: an upper bound of the expected wait from a few remembered GPUs.

``IADeep._preempt_or_wait`` first asks :meth:`IADeep._wait_within` whether the expected wait
passes its check on the GPUs it remembered as freeing up soonest (kept across calls,
``IADeep._soonest``) and computes every GPU's time until free only when that is not shown. The
answer must never differ from the full computation's: checked at every call on a real Philly slice
(every ``True`` against ``expected_wait_s``), and the whole run's decisions and queueing hints
against a run without the shortcut. Planted bugs in the bound (an idle GPU counted, ``need``
ignored, a GPU's time until free from its first occupant alone) must fail the check.
"""

from __future__ import annotations

import pytest

from iadeep.policy import Placement, Preemption, make_policy
from iadeep.policy.iadeep import IADeep
from iadeep.sim import ClusterSpec, SimSettings, Simulator


@pytest.fixture(scope="module")
def busy(philly_path):
    """400 real Philly jobs (1-8 GPUs) at mean offered load 3 on 20 GPUs: a queue behind the head,
    gangs waiting for several GPUs."""
    from iadeep.traces import TraceOptions, load_trace

    opts = TraceOptions(start_job=60_000, n_jobs=400, max_gpus=8, target_load=3.0, cluster_gpus=20, seed=0)
    return load_trace("philly", philly_path, opts)


def _run(model, workload, *, check: bool = True, shortcut: bool = True, queue: str = "fifo", gang_placement: str = "pods"):
    """Run the slice under iadeep; return (every place decision, counts of the bound's answers)."""
    policy = make_policy("iadeep", model)
    seen = {"true": 0, "false": 0, "need>1": 0}
    within = policy._wait_within

    def checked(job, view, n_free, factor, ceiling):
        if not shortcut:
            return False
        ok = within(job, view, n_free, factor, ceiling)
        seen["true" if ok else "false"] += 1
        if ok and max(job.num_gpus - n_free, 1) + job.gpus_ahead > 1:
            seen["need>1"] += 1
        if ok and check:
            exact = policy.expected_wait_s(job, view, n_free)
            assert exact * factor <= ceiling, f"bound passed, exact wait {exact} x {factor} > {ceiling}"
        return ok

    policy._wait_within = checked
    sim = Simulator(workload, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(queue=queue, gang_placement=gang_placement))
    decisions = []
    place = policy.place

    def recorded(job, view):
        d = place(job, view)
        decisions.append((job.job_id, view.now_s, d.gpus, getattr(d, "victims", ())) if isinstance(d, (Placement, Preemption))
                         else (job.job_id, view.now_s, d.reason, d.holds_up_to_behind))
        return d

    policy.place = recorded
    result = sim.run()
    return decisions, seen, result.summary()


@pytest.mark.parametrize("queue", ["fifo", "kube"])
def test_the_bound_never_decides_otherwise(model, busy, queue):
    decisions, seen, summary = _run(model, busy, queue=queue)
    if queue == "fifo":  # the FIFO head's waits: the shortcut is taken (the kube queue has no jobs behind)
        assert seen["true"] > 50 and seen["false"] > 0, seen
    base, _, base_summary = _run(model, busy, shortcut=False, queue=queue)
    assert decisions == base
    assert summary == base_summary


def test_the_slice_reaches_waits_for_several_gpus(model, busy):
    """So that a bound ignoring ``need`` is exercised."""
    _, seen, _ = _run(model, busy)
    assert seen["need>1"] > 0, seen


def _idle_counted(self, job, view, n_free, factor, ceiling):
    return bool(self._soonest) and ceiling >= 0  # as if a remembered GPU were idle (time until free 0)


def _need_ignored(self, job, view, n_free, factor, ceiling):
    one = job.__class__(**{**job.__dict__, "num_gpus": 1, "gpus_ahead": 0, "pod_gpus": 0})
    return _ORIGINAL(self, one, view, 1, factor, ceiling)


def _first_occupant(self, job, view, n_free, factor, ceiling):
    """A GPU's time until free taken from its first occupant only (not the last to finish)."""
    need = max(job.num_gpus - n_free, 1) + job.gpus_ahead
    passed = 0
    for g in self._soonest:
        h = int(view.slots[g, 0])
        if h < 0:
            continue
        r = float(view.job_rate[h])
        left = float(view.job_work_left_s[h]) - r * (view.now_s - float(view.job_updated_s[h]))
        passed += max(left, 0.0) / max(r, 1e-6) * factor <= ceiling
    return passed >= need


_ORIGINAL = IADeep._wait_within


@pytest.mark.parametrize("plant", [_idle_counted, _need_ignored, _first_occupant])
def test_a_wrong_bound_is_caught(model, busy, monkeypatch, plant):
    """On any GPUs: with gangs placed as pods this slice reaches no wait where a bound ignoring
    ``need`` passes wrongly (the plant goes unnoticed there)."""
    monkeypatch.setattr(IADeep, "_wait_within", plant)
    with pytest.raises(AssertionError):
        decisions, _, summary = _run(model, busy, gang_placement="any-gpus")
        base, _, base_summary = _run(model, busy, shortcut=False, gang_placement="any-gpus")
        assert decisions == base and summary == base_summary
