"""The simulator's sessions ask for the prediction only when they rank: a session with at most one
feasible configuration takes the warm start :func:`~iadeep.tuner.predicted_warm_start` would give
without it (the online learner then skips a refit), and every session's warm start is the same
whether the prediction is handed over as an array or as a function."""

from __future__ import annotations

import numpy as np
import pytest

from iadeep.policy import ClusterView
from iadeep.policy._tuning import BatchSizeTuner
from iadeep.tuner import SearchSpace, predicted_warm_start, warm_queue

GPU_GIB = 24.0


def view_of(model, occupants, gang: bool) -> ClusterView:
    """One GPU of ``GPU_GIB`` holding ``occupants`` (job types, as submitted), handles 0..n-1; with
    ``gang`` the first is a 2-GPU job (its batch size is not tuned)."""
    ids = np.array([model.type_id(t) for t in occupants])
    n = len(ids)
    gpus = np.ones(n, dtype=int)
    gpus[0] = 2 if gang else 1
    return ClusterView(0.0, ("n0",), np.array([0]), np.array([0]), np.array([GPU_GIB]),
                       np.array([float(model.mem_gib[ids].sum())]), np.arange(n)[None, :], ids, ids, gpus,
                       np.full(n, 3600.0), np.zeros(n), np.ones(n))


def _pairs(model, tuner, want):
    """Type pairs (a, b) whose session space has ``want(n_feasible)``."""
    out = []
    for i, a in enumerate(model.types):
        for j, b in enumerate(model.types):
            if i != j and model.fits[i, j]:
                for gang in (False, True):
                    view = view_of(model, [a, b], gang)
                    space = SearchSpace(model, tuner.jobs(0, view), gpu_mem_gib=GPU_GIB)
                    if want(space.n_feasible()):
                        out.append((view, space))
    return out


def test_a_session_with_one_configuration_never_asks_for_the_prediction(interference_model):
    model = interference_model
    tuner = BatchSizeTuner(model, trials=3)
    pairs = _pairs(model, tuner, lambda n: n == 1)
    assert pairs, "the model has pairs with a single feasible configuration"

    def never():
        raise AssertionError("the prediction was asked for")

    for view, space in pairs:
        study = tuner.session(0, view, never)
        assert study._queue == warm_queue(space, predicted_warm_start(space, model.norm, 3), 3)


@pytest.mark.parametrize("trials", [1, 3])
def test_a_session_that_ranks_asks_once_and_starts_as_with_the_array(interference_model, trials):
    model = interference_model
    tuner = BatchSizeTuner(model, trials=trials)
    pairs = _pairs(model, tuner, lambda n: n > 1)
    assert pairs
    rng = np.random.default_rng(0)
    assert any(space.n_feasible() == 2 for _, space in pairs)  # the smallest ranking there is
    for view, space in pairs * 3:
        pred = rng.uniform(0.3, 1.0, size=model.norm.shape)
        calls = []

        def lazy():
            calls.append(1)
            return pred

        want = warm_queue(space, predicted_warm_start(space, pred, trials), trials)
        assert tuner.session(0, view, lazy)._queue == want
        assert tuner.session(0, view, pred)._queue == want
        assert len(calls) == 1
