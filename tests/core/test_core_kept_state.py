"""State kept across events instead of recomputed: each must equal a fresh computation.

* the simulator's per-GPU occupancy (``occupied``, ``njobs``, ``slot_types``, the slots as plain
  lists, the count of busy GPUs) and its change record
  (:class:`~iadeep.policy.OccupancyChanges`: every GPU whose slots, occupant types, memory or
  shares changed is in its log since), checked at every view it builds on a real Philly slice;
* eligibility patched on the GPUs changed since it was last computed (``Policy._patch``), checked
  at every ``place`` call against the whole-cluster rule on a view built afresh;
* the online learner's sparse accumulation and kept per-pair means, against the dense
  computation it replaced, to the last bit.

Each check is also run with a planted bug (a batch-size change not recorded, placements and
releases without a new version, a busy count not kept, slot lists out of order, a
patch that forgets the pair rule, a lost sample) and must fail.
"""

from __future__ import annotations

import numpy as np
import pytest

import iadeep.policy._base as policy_base
from iadeep.interference import InterferenceSample, OnlineInterferenceLearner
from iadeep.policy import ClusterView, JobRequest, make_policy
from iadeep.sim import ClusterSpec, SimSettings, Simulator


def _fresh(view: ClusterView) -> ClusterView:
    """A view built afresh from the same arrays (copies; no kept state, no change record)."""
    copy = {name: getattr(view, name) for name in ClusterView.__dataclass_fields__ if name != "node_pos"}
    return ClusterView(**{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in copy.items()})


def _gpu_state(sim: Simulator) -> tuple[np.ndarray, ...]:
    """What eligibility reads of each GPU: slots, occupant types (-1 in empty slots), memory and shares used."""
    slots = sim.slots.copy()
    types = np.where(slots >= 0, sim.type[np.maximum(slots, 0)], -1)
    return slots, types, sim.mem_used.copy(), sim.share_used.copy()


def _run_checked(model, workload, queue: str = "fifo") -> dict[str, int]:
    """Run the slice under iadeep, checking the kept state at every view and every placement."""
    policy = make_policy("iadeep", model)
    sim = Simulator(workload, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(queue=queue))
    seen = {"views": 0, "place": 0, "patched": 0}
    last: list = []
    view = sim.view

    def checked_view() -> ClusterView:
        slots = sim.slots
        occ = slots >= 0
        np.testing.assert_array_equal(sim.occupied, occ, err_msg="kept occupancy")
        np.testing.assert_array_equal(sim.njobs, occ.sum(axis=1), err_msg="kept job counts")
        np.testing.assert_array_equal(sim.slot_types, sim.type[np.maximum(slots, 0)], err_msg="kept slot types")
        assert sim._slot_list == slots.tolist(), "kept slot lists"
        assert sim._n_busy == np.count_nonzero(occ.any(axis=1)), "kept count of busy GPUs"
        state = _gpu_state(sim)
        if last:
            before, version = last
            changed = ((before[0] != state[0]).any(axis=1) | (before[1] != state[1]).any(axis=1)
                       | (before[2] != state[2]) | (before[3] != state[3]))
            logged = np.zeros(len(changed), dtype=bool)
            logged[sim._change_log[version:]] = True
            missed = np.flatnonzero(changed & ~logged)
            assert len(missed) == 0, f"GPUs {missed.tolist()} changed at {sim.now} without a new version"
        last[:] = [state, len(sim._change_log)]
        v = view()
        assert v.occupancy_changes is not None and v.occupancy_changes.version == len(sim._change_log)
        seen["views"] += 1
        return v

    place = policy.place

    def checked_place(job: JobRequest, v: ClusterView):
        answer = place(job, v)
        want = policy.eligible(job, _fresh(v))  # no change record: the whole-cluster rule
        for got, exp in zip(policy.eligible(job, v), want):
            np.testing.assert_array_equal(got, exp, err_msg=f"patched eligibility of {job.job_id} at {v.now_s}")
        seen["place"] += 1
        return answer

    patch = policy_base.Policy._patch

    def counted_patch(self, *args):
        seen["patched"] += 1
        return patch(self, *args)

    sim.view = checked_view  # type: ignore[method-assign]
    policy.place = checked_place  # type: ignore[method-assign]
    mp = pytest.MonkeyPatch()
    mp.setattr(policy_base.Policy, "_patch", counted_patch)
    try:
        sim.run()
    finally:
        mp.undo()
    return seen


@pytest.mark.parametrize("queue", ["fifo", "kube"])
def test_kept_occupancy_and_patched_eligibility_equal_a_fresh_computation(model, workload, queue):
    """150 real Philly jobs (learned predictions, tuning, undo, preemption) on 20 GPUs."""
    seen = _run_checked(model, workload, queue)
    assert seen["views"] > 100 and seen["place"] > 100
    assert seen["patched"] > 20  # the patch path ran (not only whole-cluster computations)


def test_a_batch_size_change_not_recorded_is_caught(model, workload, monkeypatch):
    """Planted: a tuning session's new type reaches neither the kept slot types nor the record."""
    monkeypatch.setattr(Simulator, "_type_changed", lambda self, h: None)
    with pytest.raises(AssertionError, match="kept slot types"):
        _run_checked(model, workload)


def _unversioned(kept):
    """Planted: placements and releases keep the slot arrays right but leave the GPU's version."""
    def changed(self, g):
        kept(self, g)
        self._change_log.pop()
    return changed


def _uncounted(kept):
    """Planted: a GPU's job count changes but the count of busy GPUs (the utilisation) does not."""
    def changed(self, g):
        n = self._n_busy
        kept(self, g)
        self._n_busy = n
    return changed


@pytest.mark.parametrize(("plant", "message"), [(_unversioned, "without a new version"),
                                                (_uncounted, "kept count of busy GPUs")])
def test_a_gpu_change_not_fully_kept_is_caught(model, workload, monkeypatch, plant, message):
    """Each planted bug in :meth:`Simulator._gpu_changed` (its docstring says which) fails the check."""
    monkeypatch.setattr(Simulator, "_gpu_changed", plant(Simulator._gpu_changed))
    with pytest.raises(AssertionError, match=message):
        _run_checked(model, workload)


def test_slot_lists_out_of_order_are_caught(model, workload, monkeypatch):
    """Planted: a release shifts the slot array but leaves the plain-list copy's empty slot first."""
    kept = Simulator._release

    def unshifted(self, h):
        left = kept(self, h)
        for g in left:
            self._slot_list[g].sort()  # [partner, -1] -> [-1, partner]
        return left

    monkeypatch.setattr(Simulator, "_release", unshifted)
    with pytest.raises(AssertionError, match="kept slot lists"):
        _run_checked(model, workload)


def test_a_patch_that_forgets_the_pair_rule_is_caught(model, workload, monkeypatch):
    """Planted: the patched answer lets through the GPUs whose pair does not fit."""
    patch = policy_base.Policy._patch

    def forgetful(self, *args):
        reason = patch(self, *args).copy()
        reason[reason == policy_base._PAIR] = policy_base._OK
        return reason

    monkeypatch.setattr(policy_base.Policy, "_patch", forgetful)
    with pytest.raises(AssertionError, match="patched eligibility"):
        _run_checked(model, workload)


def _dense_matrix(learner: OnlineInterferenceLearner, samples: list[tuple[int, int, float]], ridge: float = 1.0,
                  prior_mean: float = 0.655) -> np.ndarray:
    """The learner's predictions as computed before it kept sparse sums: dense ``x x^T`` added per
    sample, ``np.linalg.solve``, per-pair means divided over the whole matrix."""
    d = learner._d
    xtx = ridge * np.eye(d)
    xtx[0, 0] = ridge
    xty = np.zeros(d)
    xty[0] = ridge * prior_mean
    n = len(learner.types)
    total, count = np.zeros((n, n)), np.zeros((n, n))
    for i, j, y in samples:
        x = learner._feat[i, j]
        xtx += np.outer(x, x)
        xty += x * y
        total[i, j] += y
        count[i, j] += 1
    w = np.linalg.solve(xtx, xty)
    base = learner._feat @ w
    own = np.divide(total, count, out=base.copy(), where=count > 0)
    pred = base + count / (count + learner._shrink) * (own - base)
    return np.clip(pred, 0.0, 1.0)


def test_the_learner_matches_the_dense_computation_to_the_last_bit(model):
    """600 samples of real job types (a third of them on 12 pairs, so that pairs repeat), with
    lognormal noise: after every 50, the kept learner's matrix equals the dense computation."""
    types = model.types
    rng = np.random.default_rng(0)
    learner = OnlineInterferenceLearner(types)
    samples: list[tuple[int, int, float]] = []
    hot = rng.integers(len(types), size=(12, 2))
    for k in range(600):
        i, j = (hot[k % 12] if k % 3 == 0 else rng.integers(len(types), size=2)).tolist()
        y = float(model.norm[i, j] * rng.lognormal(0.0, 0.1))
        learner.observe(InterferenceSample(types[i], types[j], y))
        samples.append((i, j, y))
        if k % 50 == 49:
            np.testing.assert_array_equal(learner.matrix(), _dense_matrix(learner, samples))


def test_the_learner_check_catches_a_lost_sample(model):
    """Planted: one sample's features not added to X^T X: the comparison above fails."""
    types = model.types
    learner = OnlineInterferenceLearner(types)
    samples = [(1, 2, 0.5), (3, 4, 0.7), (1, 2, 0.6)]
    for i, j, y in samples:
        learner.observe(InterferenceSample(types[i], types[j], y))
    flat, xx = learner._sparse[(3, 4)][:2]
    learner._xtx_flat[flat] -= xx  # the planted loss
    learner._cache = None
    assert not np.array_equal(learner.matrix(), _dense_matrix(learner, samples))
