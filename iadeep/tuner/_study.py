"""One tuning session as an optuna study driven by ask and tell.

The driver (the node coordinator live, the simulator offline) asks for a configuration, runs it
however it can (a live job's reports, simulated noise), and tells the measured normalised
throughputs; the study turns them into the session's objective (:mod:`iadeep.tuner._space`).

Order of the trials: first the *warm start*, the configurations the policy core predicts best
(enqueued, best first) followed by the configuration running now (so the answer is never worse
than what runs), then optuna's sampler (TPE, seeded). A configuration is measured once: when the
sampler proposes one already measured, it is told the known value without a new measurement,
and an infeasible one (a pair measured not to fit) is told 0 without running it.

Stop rule: ``budget`` measured trials, or ``patience`` measured trials in a row without raising
the best by more than ``min_improvement`` (relative, 1 % by default), or every feasible
configuration measured. One trial is in flight at a time: :meth:`TuningStudy.ask` hands out the
trial already asked and not yet told (also after a restart of the driver or of the tuner), so a
crash never loses or duplicates a measurement.

Storage: any optuna storage; the tuner service uses an RDB (SQLite by default) so that a restart
resumes every study (the jobs are stored in the study's user attributes), the simulator uses
optuna's in-memory storage.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from iadeep.interference import InterferenceModel
from iadeep.tuner._space import SearchSpace, TunedJob

__all__ = ["StopRule", "TuningStudy", "Proposal", "Outcome", "StudyMismatch"]

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

_NOT_RUN = "not_run"  # trial user attribute: told without a measurement (a copy, or infeasible)


class StudyMismatch(ValueError):
    """A study of that name exists with other jobs (the message names both job lists)."""


@dataclass(frozen=True)
class StopRule:
    """When a session ends.

    Attributes:
        budget: most measured trials (each costs a measurement window of the live jobs).
        patience: measured trials in a row without improving the best by ``min_improvement``.
        min_improvement: relative improvement that counts (0.01 = 1 %).
    """

    budget: int = 10
    patience: int = 4
    min_improvement: float = 0.01

    def __post_init__(self) -> None:
        if self.budget < 1 or self.patience < 1 or not 0 <= self.min_improvement < 1:
            raise ValueError(f"budget and patience must be >= 1 and 0 <= min_improvement < 1, got {self}")


@dataclass(frozen=True)
class Proposal:
    """A configuration to measure: ``trial`` (its number in the study), ``config`` (job key ->
    batch size)."""

    trial: int
    config: dict[str, int]


@dataclass(frozen=True)
class Outcome:
    """Where a session stands.

    Attributes:
        done: the stop rule is met (``reason`` says which); no more proposals.
        best: the best measured configuration so far (job key -> batch size), or the running
            one when nothing was measured yet.
        best_objective: its summed progress rate (NaN when nothing was measured).
        trials: measured trials so far.
        reason: why it ended, or ``""``.
    """

    done: bool
    best: dict[str, int]
    best_objective: float
    trials: int
    reason: str = ""


class TuningStudy:
    """A tuning session over one GPU's co-located jobs (module docstring).

    Args:
        model: the interference model.
        jobs: the co-located jobs (see :class:`TunedJob`).
        name: the study name (unique per session; the coordinator derives it from the tuning request).
        storage: an optuna storage or URL; ``None``: in memory.
        warm_start: configurations to measure first (job key -> batch size), best first;
            infeasible ones are skipped. Only used when the study is created, not when resumed.
        stop: the stop rule.
        seed: the sampler's seed.

    Raises:
        SpaceError: a job the model does not know.
        StudyMismatch: the stored study of that name has other jobs.
    """

    def __init__(self, model: InterferenceModel, jobs: Sequence[TunedJob], *, name: str,
                 storage: str | optuna.storages.BaseStorage | None = None,
                 warm_start: Sequence[Mapping[str, int]] = (), stop: StopRule = StopRule(), seed: int = 0) -> None:
        self.space = SearchSpace(model, jobs)
        self.stop = stop
        self.name = name
        self._dists = {j.key: CategoricalDistribution(self.space.options[j.key]) for j in self.space.jobs}
        self._n_feasible = len(self.space.configurations())
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=3, multivariate=True)
        self.study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize",
                                         load_if_exists=True)
        # the study's identity: the jobs without the size they run at now (which a session changes,
        # so a coordinator restarted mid-session reopens it with other current sizes)
        signature = json.dumps([{**asdict(j), "batch_size": None} for j in self.space.jobs], sort_keys=True)
        stored = self.study.user_attrs.get("signature")
        if stored is None:
            self.study.set_user_attr("signature", signature)
            self.study.set_user_attr("jobs", json.dumps([asdict(j) for j in self.space.jobs], sort_keys=True))
            self.study.set_user_attr("stop", json.dumps(asdict(stop)))
            queued: list[dict[str, int]] = []
            for config in [*warm_start, self.space.current()]:
                c = {k: int(v) for k, v in config.items()}
                if set(c) == set(self._dists) and self.space.feasible(c) and c not in queued:
                    queued.append(c)
            for c in queued:
                self.study.enqueue_trial(c)
        elif stored != signature:
            raise StudyMismatch(f"study {name!r} exists with jobs {stored}, not {signature}")

    @classmethod
    def resume(cls, model: InterferenceModel, name: str, storage: str | optuna.storages.BaseStorage,
               seed: int = 0) -> TuningStudy:
        """Reopen a stored study by name (after a restart of the tuner).

        Raises:
            KeyError: no study of that name.
        """
        try:
            attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
        except KeyError:
            raise KeyError(f"no tuning session {name!r}") from None
        jobs = [TunedJob(**d) for d in json.loads(attrs["jobs"])]
        stop = StopRule(**json.loads(attrs.get("stop", "{}")))
        return cls(model, jobs, name=name, storage=storage, stop=stop, seed=seed)

    # -- ask and tell -------------------------------------------------------------------------

    def _measured(self) -> list[optuna.trial.FrozenTrial]:
        trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return [t for t in trials if not t.user_attrs.get(_NOT_RUN)]

    def ask(self) -> Proposal | None:
        """The next configuration to measure, or ``None`` when the session is done."""
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if running:
            t = running[0]
            return Proposal(t.number, {k: int(v) for k, v in t.params.items()})
        if self.outcome().done:
            return None
        known = {self._key(t.params): t.value for t in self._measured()}
        for _ in range(200):
            trial = self.study.ask(self._dists)
            config = {k: int(v) for k, v in trial.params.items()}
            if not self.space.feasible(config):
                trial.set_user_attr(_NOT_RUN, "infeasible")
                self.study.tell(trial, 0.0)  # would run out of memory: never run it
                continue
            value = known.get(self._key(config))
            if value is not None:
                trial.set_user_attr(_NOT_RUN, "measured before")
                self.study.tell(trial, value)  # the sampler learns, nothing runs
                continue
            return Proposal(trial.number, config)
        return None  # the sampler keeps proposing known configurations: treat as exhausted

    def tell(self, trial: int, normalised: Mapping[str, float]) -> Outcome:
        """Record the measured normalised throughputs (job key -> steps/s at its batch size
        divided by its isolated steps/s) of ``trial``.

        Raises:
            KeyError: ``trial`` is not the trial in flight, or a job's throughput is missing.
            ValueError: a throughput is negative or not finite.
        """
        running = {t.number: t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        if trial not in running:
            raise KeyError(f"trial {trial} of session {self.name!r} is not in flight")
        for j in self.space.jobs:
            x = normalised.get(j.key)
            if x is None:
                raise KeyError(f"normalised_throughputs: no value for job {j.key!r}")
            if not math.isfinite(float(x)) or float(x) < 0:
                raise ValueError(f"normalised_throughputs[{j.key!r}]: must be finite and >= 0, got {x}")
        config = {k: int(v) for k, v in running[trial].params.items()}
        value = self.space.objective(config, normalised)
        self.study.tell(trial, value)
        return self.outcome()

    def outcome(self) -> Outcome:
        """Best so far and whether the stop rule is met."""
        measured = sorted(self._measured(), key=lambda t: t.number)
        if not measured:
            return Outcome(self._n_feasible == 0, self.space.current(), math.nan, 0,
                           "no feasible configuration" if self._n_feasible == 0 else "")
        best_t = max(measured, key=lambda t: (t.value, -t.number))
        best = {k: int(v) for k, v in best_t.params.items()}
        n = len(measured)
        reason = ""
        if n >= self.stop.budget:
            reason = f"budget of {self.stop.budget} trials"
        elif len({self._key(t.params) for t in measured}) >= self._n_feasible:
            reason = f"all {self._n_feasible} feasible configurations measured"
        else:
            since, top = 0, -math.inf
            for t in measured:
                if t.value > top * (1 + self.stop.min_improvement) if top > 0 else t.value > top:
                    top, since = max(top, t.value), 0
                else:
                    top, since = max(top, t.value), since + 1
            if since >= self.stop.patience:
                reason = f"no improvement over {self.stop.min_improvement:.0%} in {since} trials"
        return Outcome(bool(reason), best, float(best_t.value), n, reason)

    @staticmethod
    def _key(params: Mapping[str, object]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((k, int(v)) for k, v in params.items()))  # type: ignore[call-overload]
