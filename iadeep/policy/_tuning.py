"""Batch-size tuning of the jobs co-located on one GPU (IADeep's tuner, Sec. 4 of the paper).

The objective of a configuration (one batch size per job) is the sum of the jobs' progress rates
(:func:`iadeep.goodput.progress`): normalised throughput x samples per step x statistical
efficiency, relative to each job's own dedicated run. The tuner ranks every feasible configuration
by *predicted* objective, measures the ``trials`` best (each trial is one run of the configuration
through the injected measurement executor, costing measurement time), and keeps the best
*measured* one. A job's progress rate is capped at 1: no configuration makes a job progress faster
than its dedicated run at the submitted batch size (the trace's duration is the fastest it runs),
so tuning can only win back what interference took. The submitted configuration is always among the measured ones, so tuning never
picks something it measured to be worse.

Only single-GPU jobs are tuned: a gang's batch size would change on all its GPUs at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from iadeep.goodput import gain_matrix, progress
from iadeep.interference import InterferenceModel
from iadeep.policy._types import ClusterView, Measure, TuningDecision

__all__ = ["BatchSizeTuner"]


class BatchSizeTuner:
    """Chooses batch sizes for the jobs on one GPU.

    Args:
        model: interference model (types, isolated steps/s, which sets fit, memory).
        trials: configurations measured per session (>= 1).
    """

    def __init__(self, model: InterferenceModel, trials: int = 3):
        if trials < 1:
            raise ValueError("trials must be >= 1")
        self.model = model
        self.trials = trials
        by_model: dict[str, list[int]] = {}
        for tid, t in enumerate(model.types):
            by_model.setdefault(t.model, []).append(tid)
        self._options = {m: tuple(ids) for m, ids in by_model.items()}
        self.gain = gain_matrix(model.types, model.isolated_steps_per_s)

    def objective(self, types: Sequence[int], bases: Sequence[int], norm: Sequence[float]) -> float:
        """Sum of progress rates for normalised throughputs ``norm`` of jobs at ``types``."""
        return float(sum(progress(n, self.gain[t, b]) for t, b, n in zip(types, bases, norm)))

    def tune(self, gpu: int, view: ClusterView, predicted: np.ndarray, measure: Measure) -> TuningDecision:
        """Run one tuning session.

        Args:
            gpu: GPU id.
            view: cluster view (occupants, current and base types, GPU memory).
            predicted: predicted pairwise normalised throughput, shape ``(n_types, n_types)``.
            measure: the measurement executor (one call = one trial).
        """
        handles = [int(h) for h in view.occupants(gpu)]
        bases = [int(view.job_base_type[h]) for h in handles]
        current = tuple(int(view.job_type[h]) for h in handles)
        choices = []
        for h, t in zip(handles, current):
            tunable = view.job_num_gpus[h] == 1
            choices.append(self._options[self.model.types[t].model] if tunable else (t,))
        cap = float(view.gpu_mem_total_gib[gpu])
        ranked: list[tuple[float, tuple[int, ...]]] = []
        for config in itertools.product(*choices):
            if not self.model.set_fits(config) or float(self.model.mem_gib[list(config)].sum()) > cap + 1e-9:
                continue
            norm = _pairwise(predicted, config)
            ranked.append((self.objective(config, bases, norm), config))
        ranked.sort(key=lambda r: -r[0])
        submitted = tuple(bases)
        to_measure = [c for _, c in ranked[: self.trials]]
        if submitted not in to_measure and self.model.set_fits(submitted):
            to_measure = to_measure[: self.trials - 1] + [submitted]
        best_cfg, best_val, samples = current, -1.0, []
        for config in to_measure:
            obs = measure(dict(zip(handles, config)))
            norm = [float(obs[h]) for h in handles]
            val = self.objective(config, bases, norm)
            for i, h in enumerate(handles):
                for j, p in enumerate(handles):
                    if i != j:
                        samples.append((h, p, config[i], config[j], norm[i]))
            if val > best_val:
                best_cfg, best_val = config, val
        return TuningDecision(
            gpu,
            {h: t for h, t in zip(handles, best_cfg)},
            trials=len(to_measure),
            samples=tuple(samples),
            progress=best_val,
            reason=f"best of {len(to_measure)} measured configurations: progress {best_val:.2f}",
        )


def _pairwise(matrix: np.ndarray, config: Sequence[int]) -> list[float]:
    """Normalised throughput of each job in ``config`` under the multiplicative rule."""
    out = []
    for i, a in enumerate(config):
        x = 1.0
        for j, b in enumerate(config):
            if i != j:
                x *= float(matrix[a, b])
        out.append(x)
    return out
