"""``ClusterView.at``: a view moved to another clock keeps its clock-free derived entries (slot
occupancy, per-slot job types, eligibility answers), and the simulator's use of it: every view a
policy is handed must show what a view built afresh from the simulator's state would show. A
simulator that carried a view over a change of state (a placement, a release, a batch-size change)
hands the policy a stale occupancy or stale eligibility, which this test catches.
"""

from __future__ import annotations

import numpy as np
import pytest

from iadeep.policy import ClusterView, JobRequest, make_policy
from iadeep.sim import ClusterSpec, SimSettings, Simulator


def _view(now_s: float, slots: np.ndarray, rate: np.ndarray, left: np.ndarray) -> ClusterView:
    g = slots.shape[0]
    j = len(rate)
    return ClusterView(now_s, ("n0",), np.zeros(g, dtype=np.int64), np.arange(g), np.full(g, 24.0), np.zeros(g), slots,
                       np.zeros(j, dtype=np.int64), np.zeros(j, dtype=np.int64), np.ones(j, dtype=np.int64), left,
                       np.zeros(j), rate)


def test_at_moves_the_clock_and_keeps_the_clock_free_entries():
    """Three GPUs: two jobs on GPU 0, one on GPU 1, GPU 2 idle. At 100 s the copy's times until free
    are the ones a new view at 100 s computes (the slower job on GPU 0: 400 s of work at rate 0.5
    = 800 s; at 100 s 350 s of work are left, 700 s at that rate; GPU 1: 300 s at rate 1 -> 200 s), its
    occupancy arrays and memo are the same objects, and the original still answers at 0 s."""
    slots = np.array([[0, 1], [2, -1], [-1, -1]])
    rate, left = np.array([0.5, 1.0, 1.0]), np.array([400.0, 100.0, 300.0])
    v0 = _view(0.0, slots, rate, left)
    assert v0.gpu_free_in_s.tolist() == [800.0, 300.0, 0.0]
    njobs, types = v0.njobs, v0.slot_types
    v0.memo["answer"] = 42
    v1 = v0.at(100.0)
    assert v1.now_s == 100.0 and v0.now_s == 0.0
    assert v1.gpu_free_in_s.tolist() == [700.0, 200.0, 0.0] == _view(100.0, slots, rate, left).gpu_free_in_s.tolist()
    assert v0.gpu_free_in_s.tolist() == [800.0, 300.0, 0.0]
    assert v1.njobs is njobs and v1.slot_types is types and v1.memo["answer"] == 42
    assert v1.remaining_s(np.array([0, 2])).tolist() == [350.0, 200.0]
    with pytest.raises(AttributeError):  # still frozen
        v1.now_s = 5.0  # type: ignore[misc]


def _fresh(view: ClusterView) -> ClusterView:
    """A view built afresh (copies of the arrays, nothing cached) of the same state and clock."""
    copy = {name: getattr(view, name) for name in ClusterView.__dataclass_fields__ if name != "node_pos"}
    return ClusterView(**{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in copy.items()})


@pytest.mark.parametrize("queue", ["fifo", "kube"])
def test_every_view_the_simulator_hands_out_is_current(model, workload, queue):
    """150 real Philly jobs (learned predictions, tuning, undo, preemption): at every ``place`` and
    ``tune`` call the view handed over has the occupancy, per-slot types, times until free and,
    for ``place``, the eligibility answer of a view built afresh from the same state; and the
    simulator did reuse views across clock moves (what this guards)."""
    policy = make_policy("iadeep", model)
    seen = {"place": 0, "tune": 0, "carried": 0}
    place, tune = policy.place, policy.tune
    last: list[ClusterView] = []

    def check(view: ClusterView) -> ClusterView:
        fresh = _fresh(view)
        for name in ("occupied", "njobs", "slot_types", "gpu_free_in_s"):
            np.testing.assert_array_equal(getattr(view, name), getattr(fresh, name), err_msg=f"stale {name} at {view.now_s}")
        if last and last[0] is not view and last[0].__dict__.get("memo") is not None and view.__dict__.get("memo") is last[0].memo:
            seen["carried"] += 1
        last[:] = [view]
        return fresh

    def checked_place(job: JobRequest, view: ClusterView):
        fresh = check(view)
        answer = place(job, view)
        for got, want in zip(policy.eligible(job, view), policy.eligible(job, fresh)):
            np.testing.assert_array_equal(got, want, err_msg=f"stale eligibility of {job.job_id} at {view.now_s}")
        seen["place"] += 1
        return answer

    def checked_tune(gpu, view, measure):
        check(view)
        seen["tune"] += 1
        return tune(gpu, view, measure)

    policy.place, policy.tune = checked_place, checked_tune
    Simulator(workload, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(queue=queue)).run()
    assert seen["place"] > 100 and seen["tune"] > 50
    assert seen["carried"] > 0
