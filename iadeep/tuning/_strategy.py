"""The search strategy of a tuning session: pure, no I/O, no optuna.

Both drivers of a session follow this one strategy: the tuner service (a live GPU, the study in
optuna RDB storage) and the policy core's :class:`~iadeep.policy._tuning.BatchSizeTuner` (the
simulator, in memory). :class:`~iadeep.tuner.TuningStudy` applies it to a trial log.

Order of the trials:

1. the *warm start* (:func:`warm_queue`): the configurations the policy core predicts best, best
   first (:func:`predicted_warm_start`), and the running configuration where the budget still
   measures it (so a session never ends worse than what runs); infeasible and repeated ones are
   dropped. Warm-start trial ``k`` is trial number ``k`` of the session (they come before
   anything the sampler proposes);
2. then optuna's sampler (TPE, seeded), only if the stop rule was not met by then.

Stop rule (:func:`session_outcome`): ``budget`` measured trials, or ``patience`` measured trials
in a row without raising the best by more than ``min_improvement`` (relative, 1 % by default), or
every feasible configuration measured. The best is the highest measured objective, the earliest
on ties.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iadeep.tuning._space import SearchSpace

__all__ = ["DEFAULT_TRIALS", "StopRule", "Proposal", "Outcome", "Trial", "predicted_warm_start", "warm_queue", "session_outcome"]


DEFAULT_TRIALS = 3
"""Trials of a tuning session by default, in both drivers: the predicted-best configurations
handed to a session as its warm start (the node coordinator's ``ROUND__WARM_START``, the
simulator policy's ``tuning_trials``) and the stop rule's budget (the tuner service's
``STOP__BUDGET``). One default, so that the simulator's sessions and the live system's have the
same length. 3: the warm start measured, the running configuration among it
(:func:`warm_queue`); ``make bench``'s tuner benchmark gives the median trials to within 5 % of
the best as 1; a longer budget continues with optuna's sampler."""


@dataclass(frozen=True)
class StopRule:
    """When a session ends.

    Attributes:
        budget: most measured trials (each costs a measurement window of the live jobs).
        patience: measured trials in a row without improving the best by ``min_improvement``.
        min_improvement: relative improvement that counts (0.01 = 1 %).
    """

    budget: int = DEFAULT_TRIALS
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


@dataclass(frozen=True)
class Trial:
    """One trial of a session's log.

    Attributes:
        number: its number in the session (0, 1, ...).
        config: job key -> batch size.
        value: the objective told, ``None`` while in flight.
        measured: False for a trial told without running it (a configuration measured before, or
            an infeasible one the sampler proposed).
    """

    number: int
    config: dict[str, int]
    value: float | None = None
    measured: bool = True


def predicted_warm_start(space: SearchSpace, predicted: np.ndarray, n: int) -> list[dict[str, int]]:
    """The ``n`` configurations a prediction ranks best, best first (what both drivers hand a
    session as its warm start; :func:`warm_queue` adds the running one).

    Args:
        space: the session's search space.
        predicted: predicted pairwise normalised throughput, shape ``(n_types, n_types)``.
        n: how many (0: none).
    """
    if n <= 0:
        return []
    return [c for _, c in space.ranked(predicted, n)]


def warm_queue(space: SearchSpace, warm_start: Sequence[Mapping[str, int]], budget: int) -> list[dict[str, int]]:
    """The warm start as measured: the feasible configurations of ``warm_start`` naming exactly the
    session's jobs, each once, in order, with the running configuration among them.

    The running configuration (so a session never ends worse than what runs) goes after the
    others when the budget still measures it there, else it takes the last place the budget
    measures (budget ``b``: position ``b - 1``), ahead of the rest. With a budget of 10 and 3
    predicted, it is the 4th trial; with the default (budget = 3 predicted,
    :data:`DEFAULT_TRIALS`), the 3rd, in place of the third-best prediction.
    """
    keys = set(space.options)
    queued: list[dict[str, int]] = []
    for config in warm_start:
        c = {k: int(v) for k, v in config.items()}
        if set(c) == keys and c not in queued and space.feasible(c):
            queued.append(c)
    current = space.current()
    if current not in queued and space.feasible(current):
        queued.insert(min(len(queued), max(budget - 1, 0)), current)
    return queued


def session_outcome(trials: Sequence[Trial], current: Mapping[str, int], stop: StopRule, n_feasible: int) -> Outcome:
    """Best so far and whether the stop rule is met (module docstring).

    Args:
        trials: the session's log in trial order; only measured, told trials count.
        current: the running configuration (the answer before anything was measured).
        stop: the stop rule.
        n_feasible: how many feasible configurations the space has.
    """
    # one pass for the count and the best (the first measured, then each strictly better one)
    best_t: Trial | None = None
    n = 0
    for t in trials:
        if t.measured and t.value is not None:
            n += 1
            if best_t is None or t.value > best_t.value:  # type: ignore[operator]
                best_t = t
    if best_t is None:
        return Outcome(n_feasible == 0, dict(current), math.nan, 0,
                       "no feasible configuration" if n_feasible == 0 else "")
    reason = ""
    if n >= stop.budget:
        reason = f"budget of {stop.budget} trials"
    elif n >= n_feasible and len({_key(t.config) for t in trials if t.measured and t.value is not None}) >= n_feasible:
        reason = f"all {n_feasible} feasible configurations measured"  # (distinct ones <= n)
    elif n >= stop.patience:  # fewer trials cannot make `since` (at most n) reach the patience
        measured = [t for t in trials if t.measured and t.value is not None]
        since, top = 0, -math.inf
        for t in measured:
            v = float(t.value)  # type: ignore[arg-type]
            if v > top * (1 + stop.min_improvement) if top > 0 else v > top:
                since = 0
            else:
                since += 1
            top = max(top, v)
        if since >= stop.patience:
            reason = f"no improvement over {stop.min_improvement:.0%} in {since} trials"
    return Outcome(bool(reason), dict(best_t.config), float(best_t.value), n, reason)  # type: ignore[arg-type]


def _key(config: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, int(v)) for k, v in config.items()))
