"""One tuning session driven by ask and tell; optuna's study holds the log once one is needed.

The driver (the node coordinator through the tuner service live, the policy core's
:class:`~iadeep.policy._tuning.BatchSizeTuner` in the simulator) asks for a configuration, runs
it however it can (a live job's reports, simulated noise), and tells the measured normalised
throughputs; the session turns them into the objective (:mod:`iadeep.tuning._space`). Which
configuration comes next and when the session ends is the pure strategy of
:mod:`iadeep.tuning._strategy` (warm start first, then optuna's TPE sampler; the stop rule), the
same code for both drivers. A configuration is measured once: when the sampler proposes one
already measured, it is told the known value without a new measurement, and an infeasible one
(a pair measured not to fit) is told 0 without running it.

One trial is in flight at a time: :meth:`TuningStudy.ask` hands out the trial asked and not yet
told (also after a restart of the driver or of the tuner), so a crash never loses or duplicates a
measurement.

Storage: with an optuna storage (the tuner service: an RDB, SQLite by default) the study is
created at once and is the session's record, so a restart resumes it (jobs, warm start and stop
rule are in its user attributes; warm-start trials are added as running trials with their
configuration, without consulting the sampler). Without one (``storage=None``, the simulator) the
log is a plain list and an in-memory optuna study is created only when the warm start is used up
before the stop rule is met; the trials so far are copied into it. Either way the sampler first
runs on the same completed trials with a fresh seeded state, so the two drivers propose the same
sequence from the same measurements. In memory, a session that ends within its warm start (the
simulator's default: its budget is its warm start) never imports or creates anything of optuna:
one optuna session of 3 trials cost about 12.6 ms, some 1,000 s over the full Philly trace.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from iadeep.interference import InterferenceModel
from iadeep.tuning._space import SearchSpace, TunedJob
from iadeep.tuning._strategy import Outcome, Proposal, StopRule, Trial, session_outcome, warm_queue

if TYPE_CHECKING:
    import optuna

__all__ = ["StopRule", "TuningStudy", "Proposal", "Outcome", "StudyMismatch"]

log = logging.getLogger(__name__)

_NOT_RUN = "not_run"  # trial user attribute: told without a measurement (a copy, or infeasible)


def _optuna() -> Any:
    """optuna, imported on first use (a simulated session within its warm start never needs it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class StudyMismatch(ValueError):
    """A study of that name exists with other jobs (the message names both job lists)."""


class TuningStudy:
    """A tuning session over one GPU's co-located jobs (module docstring).

    Args:
        model: the interference model.
        jobs: the co-located jobs (see :class:`TunedJob`).
        name: the study name (unique per session; the coordinator derives it from the tuning request).
        storage: an optuna storage or URL; ``None``: in memory, optuna only once the sampler is needed.
        warm_start: configurations to measure first (job key -> batch size), best first;
            infeasible ones are skipped, the running configuration is added where the budget
            measures it (:func:`iadeep.tuner.warm_queue`). Only used when the study is created,
            not when resumed.
        stop: the stop rule.
        seed: the sampler's seed.
        gpu_mem_gib: the GPU's memory (GiB), an upper bound on a configuration's summed memory
            estimates (:class:`SearchSpace`); ``None``: per-pod limits only.
        space: the search space of ``model``, ``jobs`` and ``gpu_mem_gib`` when the driver built
            it already (to rank its warm start); ``None``: built here.

    Raises:
        SpaceError: a job the model does not know.
        StudyMismatch: the stored study of that name has other jobs.
        ValueError: ``space`` was built over other jobs, another model or another GPU memory.
    """

    def __init__(self, model: InterferenceModel, jobs: Sequence[TunedJob], *, name: str,
                 storage: str | optuna.storages.BaseStorage | None = None,
                 warm_start: Sequence[Mapping[str, int]] = (), stop: StopRule = StopRule(), seed: int = 0,
                 gpu_mem_gib: float | None = None, space: SearchSpace | None = None) -> None:
        if space is None:
            space = SearchSpace(model, jobs, gpu_mem_gib=gpu_mem_gib)
        elif space.model is not model or space.gpu_mem_gib != gpu_mem_gib or not _same_jobs(space.jobs, jobs):
            raise ValueError("space: built over other jobs, another model or another GPU memory")
        self.space = space
        self.stop = stop
        self.name = name
        self.seed = seed
        self._n_feasible = self.space.n_feasible()
        self._current = self.space.current()  # the running configuration (read only: session_outcome copies it)
        self._log: list[Trial] = []  # the session's log while no optuna study exists
        self._cached: Outcome | None = None  # outcome of the in-memory log
        self._study: optuna.Study | None = None
        if storage is None:
            self._queue = warm_queue(self.space, warm_start, stop.budget)
            return
        self._study = self._create_study(storage)
        # the study's identity: the jobs without the size they run at now (which a session changes,
        # so a coordinator restarted mid-session reopens it with other current sizes)
        signature = json.dumps([{**asdict(j), "batch_size": None} for j in self.space.jobs], sort_keys=True)
        if gpu_mem_gib is not None:
            signature += f" gpu_mem_gib={gpu_mem_gib:g}"
        attrs = self._study.user_attrs
        stored = attrs.get("signature")
        if stored is None:
            self._queue = warm_queue(self.space, warm_start, stop.budget)
            self._study.set_user_attr("signature", signature)
            self._study.set_user_attr("jobs", json.dumps([asdict(j) for j in self.space.jobs], sort_keys=True))
            self._study.set_user_attr("stop", json.dumps(asdict(stop)))
            self._study.set_user_attr("warm_start", json.dumps(self._queue))
            if gpu_mem_gib is not None:
                self._study.set_user_attr("gpu_mem_gib", gpu_mem_gib)
        elif stored != signature:
            raise StudyMismatch(f"study {name!r} exists with jobs {stored}, not {signature} (a session is its jobs and "
                                "GPU memory; the sizes they run at now are not part of it: batch_size null)")
        else:
            # a study stored before warm starts were kept as an attribute holds them as waiting
            # trials, which optuna's ask hands out first: nothing left to queue here
            self._queue = [{k: int(v) for k, v in c.items()} for c in json.loads(attrs.get("warm_start", "[]"))]

    @classmethod
    def resume(cls, model: InterferenceModel, name: str, storage: str | optuna.storages.BaseStorage,
               seed: int = 0) -> TuningStudy:
        """Reopen a stored study by name (after a restart of the tuner).

        Raises:
            KeyError: no study of that name.
        """
        try:
            attrs = _optuna().load_study(study_name=name, storage=storage).user_attrs
        except KeyError:
            raise KeyError(f"no tuning session {name!r}") from None
        jobs = [TunedJob(**d) for d in json.loads(attrs["jobs"])]
        stop = StopRule(**json.loads(attrs.get("stop", "{}")))
        return cls(model, jobs, name=name, storage=storage, stop=stop, seed=seed, gpu_mem_gib=attrs.get("gpu_mem_gib"))

    @property
    def study(self) -> optuna.Study:
        """The optuna study (created in memory now if it did not exist yet)."""
        if self._study is None:
            self._materialise()
        assert self._study is not None
        return self._study

    # -- the log: a list in memory, optuna's trials once a study exists -----------------------

    def _create_study(self, storage: str | optuna.storages.BaseStorage | None) -> optuna.Study:
        optuna = _optuna()
        self._dists = {j.key: optuna.distributions.CategoricalDistribution(self.space.options[j.key])
                       for j in self.space.jobs}
        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=3, multivariate=True)
        return optuna.create_study(study_name=self.name, storage=storage, sampler=sampler, direction="maximize",
                                   load_if_exists=True)

    def _materialise(self) -> None:
        """Create the in-memory study and copy the log into it (its trial numbers are kept)."""
        optuna = _optuna()
        study = self._create_study(None)
        for t in self._log:
            study.add_trial(optuna.trial.create_trial(
                params=dict(t.config), distributions=self._dists, value=t.value,
                state=optuna.trial.TrialState.COMPLETE if t.value is not None else optuna.trial.TrialState.RUNNING,
                user_attrs={} if t.measured else {_NOT_RUN: "copied"}))
        self._study, self._log = study, []

    def trials(self) -> list[Trial]:
        """The session's log: told and in-flight trials, in trial order."""
        if self._study is None:
            return list(self._log)
        TrialState = _optuna().trial.TrialState
        out = []
        for t in self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
            value = t.value if t.state == TrialState.COMPLETE else None
            out.append(Trial(t.number, {k: int(v) for k, v in t.params.items()}, value,
                             not t.user_attrs.get(_NOT_RUN)))
        return sorted(out, key=lambda t: t.number)

    def _start(self, config: dict[str, int]) -> Proposal:
        """Put a warm-start configuration in flight (the sampler is not consulted)."""
        if self._study is None:
            self._log.append(Trial(len(self._log), dict(config)))
            return Proposal(len(self._log) - 1, dict(config))
        optuna = _optuna()
        self._study.add_trial(optuna.trial.create_trial(params=dict(config), distributions=self._dists,
                                                        state=optuna.trial.TrialState.RUNNING))
        flight = self._in_flight(self.trials())
        assert flight is not None
        return Proposal(flight.number, flight.config)

    @staticmethod
    def _in_flight(trials: Sequence[Trial]) -> Trial | None:
        return next((t for t in trials if t.value is None), None)

    # -- ask and tell -------------------------------------------------------------------------

    def ask(self) -> Proposal | None:
        """The next configuration to measure, or ``None`` when the session is done."""
        if self._study is None and (not self._log or self._log[-1].value is not None):
            # in memory, the fast path: nothing in flight (only the last trial can be)
            if not self._log and self._queue:  # nothing told yet, a feasible warm start: not done
                return self._start(self._queue[0])
            if self._outcome_of(self._log).done:
                return None
            n = len(self._log)
            return self._start(self._queue[n]) if n < len(self._queue) else self._sample(self._log)
        trials = self.trials()
        flight = self._in_flight(trials)
        if flight is not None:
            return Proposal(flight.number, flight.config)
        if self._outcome_of(trials).done:
            return None
        if len(trials) < len(self._queue):
            return self._start(self._queue[len(trials)])
        return self._sample(trials)

    def _sample(self, trials: Sequence[Trial]) -> Proposal | None:
        """optuna's proposal (copies and infeasible proposals are told without running them)."""
        study = self.study
        known = {_key(t.config): t.value for t in trials if t.measured}
        for _ in range(200):
            trial = study.ask(self._dists)
            config = {k: int(v) for k, v in trial.params.items()}
            if not self.space.feasible(config):
                trial.set_user_attr(_NOT_RUN, "infeasible")
                study.tell(trial, 0.0)  # would run out of memory: never run it
                continue
            value = known.get(_key(config))
            if value is not None:
                trial.set_user_attr(_NOT_RUN, "measured before")
                study.tell(trial, value)  # the sampler learns, nothing runs
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
        if self._study is None:  # in memory only the last trial can be in flight
            flight = self._log[-1] if self._log and self._log[-1].value is None else None
        else:
            flight = self._in_flight(self.trials())
        if flight is None or flight.number != trial:
            raise KeyError(f"trial {trial} of session {self.name!r} is not in flight")
        for j in self.space.jobs:
            x = normalised.get(j.key)
            if x is None:
                raise KeyError(f"normalised_throughputs: no value for job {j.key!r}")
            v = float(x)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"normalised_throughputs[{j.key!r}]: must be finite and >= 0, got {x}")
        value = self.space.objective(flight.config, normalised)
        if self._study is None:
            self._log[flight.number] = Trial(flight.number, flight.config, value)
            self._cached = None
        else:
            self._study.tell(trial, value)
        return self.outcome()

    def outcome(self) -> Outcome:
        """Best so far and whether the stop rule is met."""
        if self._study is None and self._cached is not None:  # in memory: the log unchanged since computed
            return self._cached
        return self._outcome_of(self.trials())

    def _outcome_of(self, trials: Sequence[Trial]) -> Outcome:
        if self._study is not None:
            return session_outcome(trials, self._current, self.stop, self._n_feasible)
        if self._cached is None:  # in memory the log changes only here: computed once per tell
            self._cached = session_outcome(trials, self._current, self.stop, self._n_feasible)
        return self._cached


def _key(config: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, int(v)) for k, v in config.items()))


def _same_jobs(a: Sequence[TunedJob], b: Sequence[TunedJob]) -> bool:
    """``tuple(a) == tuple(b)``, the same objects first (a driver hands the space's own)."""
    if len(a) == len(b) and all(x is y for x, y in zip(a, b)):
        return True
    return tuple(a) == tuple(b)
