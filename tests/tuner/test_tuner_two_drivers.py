"""One tuner, two drivers: the simulator's tuning session (the policy core's ``BatchSizeTuner``,
in memory) and the live tuner's (the coordinator's warm start, the tuner's HTTP API over SQLite)
propose the same sequence of configurations and end on the same configuration when they are
given the same jobs, the same predictions and the same measurements.

Both the warm-start phase and optuna's sampler phase are compared (a budget longer than the warm
start), as is the simulator's default (the budget is the warm start: optuna is never reached).
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from iadeep.coordinator._session import _warm_start
from iadeep.interference import InterferenceModel, InterferenceSample, OnlineInterferenceLearner
from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView
from iadeep.policy._tuning import BatchSizeTuner
from iadeep.state import MemoryStateStore, InterferenceSampleRecord
from iadeep.tuner import SearchSpace, StopRule, TunedJob, TunerService, TuningStudy, create_app


GPU_GIB = 24.0  # the GPU of the simulated view; live, the session's GPU memory (nothing else on the GPU)


def view_of(model: InterferenceModel, occupants: list[JobType], base: list[JobType], gpu_gib: float = GPU_GIB,
            gang: int | None = None) -> ClusterView:
    """One GPU holding ``occupants`` (current types; submitted ``base``), handles 0..n-1."""
    cur = np.array([model.type_id(t) for t in occupants])
    sub = np.array([model.type_id(t) for t in base])
    n = len(occupants)
    gpus = np.ones(n, dtype=int)
    if gang is not None:
        gpus[gang] = 2
    return ClusterView(0.0, ("n0",), np.array([0]), np.array([0]), np.array([gpu_gib]),
                       np.array([float(model.mem_gib[cur].sum())]), np.arange(n)[None, :], cur, sub, gpus,
                       np.full(n, 3600.0), np.zeros(n), np.ones(n))


def measured(model: InterferenceModel, ids: list[int], trial: int) -> list[float]:
    """A deterministic 'measurement': the measured pair with a fixed per-trial perturbation."""
    x = model.normalised(ids)
    return [float(v) * (1.0 + 0.02 * np.sin(3.0 * trial + k)) for k, v in enumerate(x)]


def learner_and_samples(model: InterferenceModel, leave_out: frozenset[str]):
    """An online learner fed with every measured pair except the session's two families, and the
    same samples as the coordinator finds them in the state store."""
    learner = OnlineInterferenceLearner(model.types)
    records = []
    for i, a in enumerate(model.types):
        for j, b in enumerate(model.types):
            if i != j and model.fits[i, j] and frozenset((a.model, b.model)) != leave_out:
                x = float(model.norm[i, j])
                learner.observe(InterferenceSample(a, b, x))
                records.append(InterferenceSampleRecord(a.model, a.batch_size, b.model, b.batch_size, x, 0.0))
    return learner, records


def simulated(model, view, predicted, trials: int, stop: StopRule | None):
    """The simulator's session: (sequence of type-id configurations, decision)."""
    tuner = BatchSizeTuner(model, trials=trials, stop=stop)
    order: list[tuple[int, ...]] = []

    def measure(config):
        ids = [int(config[h]) for h in sorted(config)]
        order.append(tuple(ids))
        return dict(zip(sorted(config), measured(model, ids, len(order) - 1)))

    return order, tuner.tune(0, view, predicted, measure)


def live(model, http: TestClient, jobs: list[TunedJob], warm, stop: StopRule, gpu_mem_gib: float):
    """The live session through the tuner's HTTP API: (type-id configurations, final outcome)."""
    space = SearchSpace(model, jobs, gpu_mem_gib=gpu_mem_gib)
    body = {"name": "node-0.0.1", "jobs": [vars(j) for j in jobs], "warm_start": warm, "stop": vars(stop),
            "gpu_mem_gib": gpu_mem_gib}
    assert http.post("/sessions", json=body).status_code == 200
    order: list[tuple[int, ...]] = []
    while (ask := http.post("/sessions/node-0.0.1/ask").json())["config"] is not None:
        ids = space.type_ids(ask["config"])
        order.append(tuple(ids))
        x = measured(model, ids, len(order) - 1)
        r = http.post("/sessions/node-0.0.1/tell", json={
            "trial": ask["trial"], "normalised_throughputs": {j.key: v for j, v in zip(jobs, x)}})
        assert r.status_code == 200, r.text
    return order, http.get("/sessions/node-0.0.1").json()["outcome"]


CASES = [
    # (current, submitted, trials, stop): the simulator's default, then budgets past the warm start
    ([JobType("ResNet-50", 64), JobType("Transformer", 64)], None, 3, None),
    ([JobType("ResNet-18", 32), JobType("LM", 20)], None, 2, StopRule(budget=7, patience=7)),
    ([JobType("ResNet-50", 32), JobType("Recommendation", 2048)], [JobType("ResNet-50", 64), None], 3,
     StopRule(budget=7, patience=2)),
]


@pytest.mark.parametrize(("current", "submitted", "trials", "stop"), CASES)
def test_simulated_and_live_sessions_agree(interference_model, tmp_path, current, submitted, trials, stop) -> None:
    m = interference_model
    base = [s or c for s, c in zip(submitted or [None] * len(current), current)]
    view = view_of(m, current, base)
    learner, records = learner_and_samples(m, frozenset(t.model for t in current))
    predicted = np.where(m.fits, learner.matrix(), 0.0)
    sim_order, decision = simulated(m, view, predicted, trials, stop)

    # the live side: jobs as the coordinator describes them (each with its pod's request, the job
    # record's mem_gib: its submitted size's memory; the GPU's memory left to the session), its warm
    # start from the stored samples
    jobs = [TunedJob(str(h), c.model, b.batch_size, c.batch_size, tunable=True, mem_request_gib=float(m.mem_gib[m.type_id(b)]))
            for h, (c, b) in enumerate(zip(current, base))]
    store = MemoryStateStore()
    store.add_samples(records)
    warm = _warm_start(SearchSpace(m, jobs, gpu_mem_gib=GPU_GIB), store, m, trials)
    rule = stop or StopRule(budget=trials)
    with TestClient(create_app(TunerService(m, f"sqlite:///{tmp_path / 'tuner.db'}"))) as http:
        live_order, outcome = live(m, http, jobs, warm, rule, GPU_GIB)

    assert sim_order == live_order  # the same trials in the same order
    assert len(sim_order) == decision.trials == outcome["trials"]
    final = SearchSpace(m, jobs, gpu_mem_gib=GPU_GIB).type_ids(outcome["best"])
    assert [decision.type_ids[h] for h in range(len(jobs))] == final
    assert decision.progress == pytest.approx(outcome["best_objective"], abs=1e-6)
    if stop is None:  # the simulator's default: exactly its warm start, the running configuration among it
        assert len(sim_order) == min(trials, len(SearchSpace(m, jobs, gpu_mem_gib=GPU_GIB).configurations()))
        assert tuple(m.type_id(t) for t in current) in sim_order
    else:
        assert len(sim_order) > len(warm)  # the sampler's phase was compared too


def test_in_memory_and_stored_studies_propose_the_same(interference_model, tmp_path) -> None:
    """The in-memory study (optuna created only after the warm start) and the RDB study (created
    at once) give the same proposals and outcome for the same measurements."""
    m = interference_model
    jobs = [TunedJob("a", "ResNet-18", 32, 32), TunedJob("b", "Transformer", 64, 64)]
    space = SearchSpace(m, jobs)
    warm = [c for _, c in space.ranked(m.norm)[:2]]
    runs = []
    for storage in (None, f"sqlite:///{tmp_path / 's.db'}"):
        study = TuningStudy(m, jobs, name="s", storage=storage, warm_start=warm, stop=StopRule(budget=7, patience=7),
                            seed=5)
        seq = []
        while (p := study.ask()) is not None:
            seq.append((p.trial, tuple(sorted(p.config.items()))))
            study.tell(p.trial, dict(zip(["a", "b"], measured(m, space.type_ids(p.config), len(seq)))))
        runs.append((seq, study.outcome()))
    assert runs[0] == runs[1]
    assert len(runs[0][0]) == 7


def test_a_session_within_its_warm_start_never_loads_optuna(interference_model) -> None:
    """The simulator's default session (budget = warm start) runs without optuna: this is what
    keeps the full trace's tens of thousands of sessions within the bench's time."""
    m = interference_model
    jobs = [TunedJob("a", "ResNet-50", 64, 64), TunedJob("b", "Transformer", 64, 64)]
    space = SearchSpace(m, jobs)
    study = TuningStudy(m, jobs, name="s", warm_start=[c for _, c in space.ranked(m.norm)[:3]],
                        stop=StopRule(budget=3))
    while (p := study.ask()) is not None:
        study.tell(p.trial, dict(zip(["a", "b"], m.normalised(space.type_ids(p.config)))))
    assert study.outcome().trials == 3
    assert study._study is None  # the log stayed a list: no optuna study was created
