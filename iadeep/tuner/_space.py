"""The search space of one tuning session and its objective.

Notations:
    J: jobs co-located on the GPU; n_types: job types of the interference model.

A session tunes the batch size of every co-located job (not only the newest). Job ``j`` may run
at any batch size the interference model measured for its model family (``iadeep.jobtypes``)
whose estimated memory (:func:`iadeep.interference.memory_gib`) fits the GPU memory left to its
pod (``mem_limit_gib``: what the extender reserved for it, not the whole GPU). A job that is not
tunable (a gang, a fixed-batch family) keeps its size. A configuration whose pairs were measured
not to fit on one GPU is infeasible (objective 0: it would run out of memory).

The objective is the policy core's (:class:`iadeep.policy._tuning.BatchSizeTuner`): the sum of
the jobs' progress rates, ``sum_j min(x_j * gain[t_j, b_j], 1)`` with ``x_j`` the measured
normalised throughput, ``t_j`` the type the job ran at and ``b_j`` its submitted type
(:func:`iadeep.goodput.progress`, :func:`iadeep.goodput.gain_matrix`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iadeep.goodput import gain_matrix, progress
from iadeep.interference import InterferenceModel, UnknownJobType
from iadeep.jobtypes import JobType

__all__ = ["TunedJob", "SearchSpace", "SpaceError"]


class SpaceError(ValueError):
    """A job the session cannot tune (unknown model or batch size); the message names the job."""


@dataclass(frozen=True)
class TunedJob:
    """One co-located job of a session.

    Attributes:
        key: the job's name in the session (the pod UID live, a handle in the simulator).
        model: Gavel model family, e.g. ``"ResNet-50"``.
        base_batch_size: the batch size it was submitted with (its progress rate is relative to it).
        batch_size: the batch size it runs at now.
        mem_limit_gib: GPU memory left to its pod (GiB); ``None``: no limit beyond the GPU's.
        tunable: False keeps ``batch_size`` (gangs, fixed-batch families).
    """

    key: str
    model: str
    base_batch_size: int
    batch_size: int
    mem_limit_gib: float | None = None
    tunable: bool = True


class SearchSpace:
    """Batch sizes each job may take, feasibility and the objective (module docstring).

    Args:
        model: the interference model (types, isolated steps/s, which pairs fit, memory).
        jobs: the co-located jobs, shape ``(J,)``, keys unique.

    Raises:
        SpaceError: a repeated key, or a job whose submitted or current type was not measured.
    """

    def __init__(self, model: InterferenceModel, jobs: Sequence[TunedJob]) -> None:
        keys = [j.key for j in jobs]
        if len(set(keys)) != len(keys) or not keys:
            raise SpaceError(f"jobs must be a non-empty list with unique keys, got {keys}")
        self.model = model
        self.jobs = tuple(jobs)
        self.gain = gain_matrix(model.types, model.isolated_steps_per_s)
        self.base_ids = [self._tid(j, j.base_batch_size) for j in jobs]
        self.options: dict[str, tuple[int, ...]] = {}
        for j in jobs:
            current = self._tid(j, j.batch_size)
            if not j.tunable:
                self.options[j.key] = (j.batch_size,)
                continue
            sizes = [b for b in model.batch_sizes(j.model)
                     if j.mem_limit_gib is None or float(model.mem_gib[self._tid(j, b)]) <= j.mem_limit_gib + 1e-9]
            self.options[j.key] = tuple(sizes) if sizes else (model.types[current].batch_size,)

    def _tid(self, job: TunedJob, batch_size: int) -> int:
        try:
            return self.model.type_id(JobType(job.model, batch_size))
        except UnknownJobType as exc:
            raise SpaceError(f"job {job.key}: {exc.args[0]}") from None

    def type_ids(self, config: Mapping[str, int]) -> list[int]:
        """Interference-model type ids of a configuration (key -> batch size), in job order."""
        return [self._tid(j, int(config[j.key])) for j in self.jobs]

    def feasible(self, config: Mapping[str, int]) -> bool:
        """All sizes allowed and every pair measured to fit on one GPU."""
        if any(int(config[j.key]) not in self.options[j.key] for j in self.jobs):
            return False
        return self.model.set_fits(self.type_ids(config))

    def configurations(self) -> list[dict[str, int]]:
        """Every feasible configuration (at most a few dozen for two jobs)."""
        keys = [j.key for j in self.jobs]
        out = []
        for combo in itertools.product(*(self.options[k] for k in keys)):
            config = dict(zip(keys, combo, strict=True))
            if self.feasible(config):
                out.append(config)
        return out

    def current(self) -> dict[str, int]:
        """The configuration running now."""
        return {j.key: j.batch_size for j in self.jobs}

    def objective(self, config: Mapping[str, int], normalised: Mapping[str, float]) -> float:
        """Summed progress rate of ``config`` at measured normalised throughputs ``normalised``.

        Raises:
            KeyError: a job's throughput is missing.
        """
        ids = self.type_ids(config)
        return float(sum(progress(float(normalised[j.key]), float(self.gain[t, b]))
                         for j, t, b in zip(self.jobs, ids, self.base_ids, strict=True)))

    def predicted_normalised(self, config: Mapping[str, int], predicted: np.ndarray) -> dict[str, float]:
        """Normalised throughputs a pairwise prediction ``(n_types, n_types)`` gives ``config``
        (slowdowns compound multiplicatively for more than two jobs, as in the core)."""
        ids = self.type_ids(config)
        out = {}
        for i, j in enumerate(self.jobs):
            x = 1.0
            for k, other in enumerate(ids):
                if k != i:
                    x *= float(predicted[ids[i], other])
            out[j.key] = x
        return out

    def ranked(self, predicted: np.ndarray) -> list[tuple[float, dict[str, int]]]:
        """Feasible configurations by predicted objective, best first (ties: current first)."""
        current = self.current()
        scored = [(self.objective(c, self.predicted_normalised(c, predicted)), c) for c in self.configurations()]
        scored.sort(key=lambda sc: (-sc[0], sc[1] != current))
        return scored
