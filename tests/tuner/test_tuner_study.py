"""The tuning session (optuna ask/tell) against the real Gavel measurements: search space from the
memory left to each pod, the policy core's objective, warm start, stop rule, RDB resume."""

from __future__ import annotations

import numpy as np
import pytest

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.policy._tuning import BatchSizeTuner
from iadeep.policy import MAX_COLOCATION_LIMIT
from iadeep.tuner import SearchSpace, SpaceError, StopRule, StudyMismatch, TunedJob, TuningStudy
from iadeep.tuning import MAX_CONFIGURATIONS


def truth(model: InterferenceModel, space: SearchSpace, config: dict[str, int]) -> dict[str, float]:
    """The measured normalised throughputs of a configuration (the emulated measurement)."""
    x = model.normalised(space.type_ids(config))
    return {j.key: float(v) for j, v in zip(space.jobs, x)}


def pair() -> list[TunedJob]:
    return [TunedJob("a", "ResNet-50", 64, 64, 16.0), TunedJob("b", "Transformer", 64, 64, 16.0)]


def test_space_follows_the_memory_left_to_each_pod(interference_model) -> None:
    m = interference_model
    jobs = [TunedJob("a", "ResNet-50", 64, 64, mem_limit_gib=4.0), TunedJob("b", "ResNet-18", 32, 32)]
    space = SearchSpace(m, jobs)
    assert space.options["a"] and all(m.mem_gib[m.type_id(JobType("ResNet-50", b))] <= 4.0 for b in space.options["a"])
    assert max(space.options["a"]) < 128  # ResNet-50 at 128 needs about 12.9 GiB
    assert space.options["b"] == m.batch_sizes("ResNet-18")
    fixed = SearchSpace(m, [TunedJob("g", "ResNet-50", 64, 32, tunable=False), jobs[1]])
    assert fixed.options["g"] == (32,)
    for c in space.configurations():
        assert m.set_fits(space.type_ids(c))


def test_a_job_reserves_at_least_its_request_so_a_shrunk_partner_frees_nothing(interference_model) -> None:
    """Reservations are max(request, size's memory): on 16 GiB left to the session, ResNet-50/32
    (3.91 GiB, its request) beside Transformer/128 (6.66 GiB, its request) fits, and so does A grown
    to 64 (6.92 GiB, beyond its request); A grown to 128 (12.93 GiB) beside B shrunk to 16 does not,
    because B still reserves its 6.66 GiB request (by the estimates alone it would: 14.55 GiB)."""
    m = interference_model

    def mem(f: str, b: int) -> float:
        return float(m.mem_gib[m.type_id(JobType(f, b))])

    jobs = [TunedJob("a", "ResNet-50", 32, 32, mem_request_gib=mem("ResNet-50", 32)),
            TunedJob("b", "Transformer", 128, 128, mem_request_gib=mem("Transformer", 128))]
    space = SearchSpace(m, jobs, gpu_mem_gib=16.0)
    assert space.feasible({"a": 32, "b": 128}) and space.feasible({"a": 64, "b": 128})
    assert not space.feasible({"a": 128, "b": 16})
    assert space.reservations_gib({"a": 128, "b": 16}) == {"a": mem("ResNet-50", 128), "b": mem("Transformer", 128)}
    bare = [TunedJob("a", "ResNet-50", 32, 32), TunedJob("b", "Transformer", 128, 128)]
    assert SearchSpace(m, bare, gpu_mem_gib=16.0).feasible({"a": 128, "b": 16})  # without requests: estimates only
    for c in space.configurations():
        assert sum(space.reservations_gib(c).values()) <= 16.0 + 1e-9


def test_objective_is_the_policy_cores(interference_model) -> None:
    m = interference_model
    space = SearchSpace(m, pair())
    core = BatchSizeTuner(m)
    for c in space.configurations():
        norm = truth(m, space, c)
        ids = space.type_ids(c)
        assert space.objective(c, norm) == pytest.approx(core.objective(ids, space.base_ids, [norm["a"], norm["b"]]))


def test_unknown_types_are_refused_naming_the_job(interference_model) -> None:
    with pytest.raises(SpaceError, match="job x"):
        SearchSpace(interference_model, [TunedJob("x", "ResNet-50", 60, 60)])


@pytest.mark.parametrize("n_jobs", [6, 10])
def test_a_space_of_too_many_configurations_is_refused_before_enumerating(interference_model, n_jobs) -> None:
    """Six ResNet-18 jobs of five batch sizes are 15,625 configurations, ten 9,765,625: a
    ValueError naming the size and the bound when the space is built."""
    jobs = [TunedJob(f"k{i}", "ResNet-18", 32, 32) for i in range(n_jobs)]
    with pytest.raises(ValueError, match=rf"has {5 ** n_jobs} configurations .*more than the {MAX_CONFIGURATIONS}") as err:
        SearchSpace(interference_model, jobs)
    assert isinstance(err.value, SpaceError)
    # fixed jobs count one configuration each: the same jobs but one tunable are a space
    fixed = [TunedJob(j.key, j.model, 32, 32, tunable=i == 0) for i, j in enumerate(jobs)]
    assert SearchSpace(interference_model, fixed).options["k0"] == interference_model.batch_sizes("ResNet-18")


def test_a_gpu_full_of_jobs_fits_the_bound(interference_model) -> None:
    """The largest session the live services open (the extender's largest co-location limit, jobs
    of the families measured at the most batch sizes) is within :data:`MAX_CONFIGURATIONS`."""
    m = interference_model
    widest = max({t.model for t in m.types}, key=lambda f: len(m.batch_sizes(f)))
    base = m.batch_sizes(widest)[0]
    space = SearchSpace(m, [TunedJob(f"k{i}", widest, base, base) for i in range(MAX_COLOCATION_LIMIT)])
    assert len(m.batch_sizes(widest)) ** MAX_COLOCATION_LIMIT <= MAX_CONFIGURATIONS
    assert 0 < space.n_feasible() <= MAX_CONFIGURATIONS


def run_session(model, study: TuningStudy) -> list[dict[str, int]]:
    proposed = []
    while (p := study.ask()) is not None:
        proposed.append(p.config)
        study.tell(p.trial, truth(model, study.space, p.config))
    return proposed


def test_session_measures_warm_start_first_and_stops(interference_model) -> None:
    m = interference_model
    jobs = pair()
    space = SearchSpace(m, jobs)
    ranked = space.ranked(m.norm)  # a perfect predictor: its best is the true best
    warm = [ranked[0][1], ranked[1][1]]
    study = TuningStudy(m, jobs, name="s", warm_start=warm, stop=StopRule(budget=8, patience=3))
    proposed = run_session(m, study)
    assert proposed[:2] == warm
    assert space.current() in proposed  # the running configuration is always measured
    assert len(proposed) == len({tuple(sorted(c.items())) for c in proposed})  # never measured twice
    assert all(space.feasible(c) for c in proposed)
    out = study.outcome()
    assert out.done and out.trials == len(proposed) <= 8
    assert out.best == ranked[0][1]
    assert out.best_objective == pytest.approx(ranked[0][0])


def test_without_warm_start_the_sampler_finds_a_near_best(interference_model) -> None:
    m = interference_model
    jobs = [TunedJob("a", "ResNet-18", 32, 32), TunedJob("b", "LM", 20, 20)]
    space = SearchSpace(m, jobs)
    best = max(space.objective(c, truth(m, space, c)) for c in space.configurations())
    study = TuningStudy(m, jobs, name="s", stop=StopRule(budget=12, patience=12), seed=3)
    run_session(m, study)
    out = study.outcome()
    assert out.best_objective >= 0.95 * best
    current_value = space.objective(space.current(), truth(m, space, space.current()))
    assert out.best_objective >= current_value  # never worse than what ran


def test_patience_stops_a_flat_session(interference_model) -> None:
    m = interference_model
    study = TuningStudy(m, pair(), name="s", stop=StopRule(budget=20, patience=2))
    n = 0
    while (p := study.ask()) is not None:
        study.tell(p.trial, {"a": 0.5, "b": 0.5})  # every configuration measures alike
        n += 1
    # the same normalised throughput at other batch sizes changes the goodput; at most patience
    # trials after the last 1 % improvement
    assert study.outcome().done
    assert "no improvement" in study.outcome().reason or "all" in study.outcome().reason


def test_tell_checks_trial_and_values(interference_model) -> None:
    study = TuningStudy(interference_model, pair(), name="s")
    p = study.ask()
    assert study.ask() == p  # one trial in flight: asked again, the same one
    with pytest.raises(KeyError, match="no value for job 'b'"):
        study.tell(p.trial, {"a": 0.5})
    with pytest.raises(ValueError, match="finite"):
        study.tell(p.trial, {"a": float("nan"), "b": 0.5})
    with pytest.raises(KeyError, match="not in flight"):
        study.tell(p.trial + 5, {"a": 0.5, "b": 0.5})
    study.tell(p.trial, {"a": 0.5, "b": 0.5})
    assert study.outcome().trials == 1


def test_rdb_storage_resumes_after_a_restart(interference_model, tmp_path) -> None:
    m = interference_model
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    study = TuningStudy(m, pair(), name="node-a.0.1", storage=url, stop=StopRule(budget=6, patience=6))
    space = study.space
    p1 = study.ask()
    study.tell(p1.trial, truth(m, space, p1.config))
    p2 = study.ask()  # in flight when the tuner "crashes"
    del study
    again = TuningStudy.resume(m, "node-a.0.1", url)
    assert again.outcome().trials == 1
    assert again.ask() == p2  # the trial in flight is handed out again, not lost
    again.tell(p2.trial, truth(m, space, p2.config))
    rest = run_session(m, again)
    assert again.outcome().trials == 2 + len(rest) <= 6
    assert p1.config not in rest and p2.config not in rest
    # reopened by a restarted driver whose jobs now run at other sizes: the same study
    moved = [TunedJob("a", "ResNet-50", 64, 32, 16.0), TunedJob("b", "Transformer", 64, 128, 16.0)]
    assert TuningStudy(m, moved, name="node-a.0.1", storage=url).outcome().trials == again.outcome().trials
    with pytest.raises(StudyMismatch):
        TuningStudy(m, [TunedJob("a", "ResNet-50", 64, 64)], name="node-a.0.1", storage=url)
    with pytest.raises(KeyError, match="no tuning session"):
        TuningStudy.resume(m, "nope", url)


def test_infeasible_pairs_are_never_proposed(interference_model) -> None:
    m = interference_model
    # find two families with some sizes that do not fit together
    bad = np.argwhere(~m.fits)
    a, b = (m.types[i] for i in bad[0])
    jobs = [TunedJob("a", a.model, a.batch_size, min(m.batch_sizes(a.model))),
            TunedJob("b", b.model, b.batch_size, min(m.batch_sizes(b.model)))]
    study = TuningStudy(m, jobs, name="s", stop=StopRule(budget=30, patience=30))
    for c in run_session(m, study):
        assert study.space.feasible(c)
