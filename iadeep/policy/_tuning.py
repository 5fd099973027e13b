"""Batch-size tuning of the jobs co-located on one GPU (IADeep's tuner, Sec. 4 of the paper).

The objective of a configuration (one batch size per job) is the sum of the jobs' progress rates
(:func:`iadeep.goodput.progress`): normalised throughput x samples per step x statistical
efficiency, relative to each job's own dedicated run. A job's progress rate is capped at 1: no
configuration makes a job progress faster than its dedicated run at the submitted batch size (the
trace's duration is the fastest it runs), so tuning can only win back what interference took.

A session is the live tuner's own (:class:`iadeep.tuner.TuningStudy`, in memory): one tuner,
two drivers, so simulated and live tuning cannot drift apart. :class:`BatchSizeTuner` is the
simulator's driver: it describes the GPU's jobs to the session (single-GPU jobs are tunable; a
gang's batch size would change on all its GPUs at once), warm-starts it with the ``trials``
configurations the prediction ranks best (:func:`iadeep.tuner.predicted_warm_start`, as the node
coordinator does; the session puts the running configuration among the trials its budget
measures, :func:`iadeep.tuner.warm_queue`), runs each trial the
session asks for through the injected measurement executor (one call = one trial, costing
measurement time) and keeps the best *measured* configuration. The default stop rule's budget is
``trials``: the session measures exactly its warm start and never reaches optuna's sampler,
which keeps a full trace's tens of thousands of sessions cheap; a longer stop rule (``stop``)
continues with the sampler as the live tuner does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from iadeep.goodput import gain_matrix, progress
from iadeep.interference import InterferenceModel
from iadeep.policy._types import ClusterView, Measure, TuningDecision
from iadeep.tuning import SearchSpace, StopRule, TunedJob, TuningStudy, predicted_warm_start

__all__ = ["BatchSizeTuner"]

#: A pairwise prediction ``(n_types, n_types)``, or a function that returns one when asked.
Prediction = np.ndarray | Callable[[], np.ndarray]


class BatchSizeTuner:
    """Chooses batch sizes for the jobs on one GPU.

    Args:
        model: interference model (types, isolated steps/s, which sets fit, memory).
        trials: predicted-best configurations measured first (>= 1), the session's budget unless
            ``stop`` says otherwise.
        stop: the session's stop rule; default ``StopRule(budget=trials)``.
        seed: the sampler's seed (used only when the stop rule outlasts the warm start).

    Raises:
        ValueError: ``trials < 1``.
    """

    def __init__(self, model: InterferenceModel, trials: int = 3, *, stop: StopRule | None = None, seed: int = 0):
        if trials < 1:
            raise ValueError("trials must be >= 1")
        self.model = model
        self.trials = trials
        self.stop = stop if stop is not None else StopRule(budget=trials)
        self.seed = seed
        self.gain = gain_matrix(model.types, model.isolated_steps_per_s)
        self._jobs: dict[tuple[int, int, int, bool], TunedJob] = {}  # (handle, type, base type, one GPU) -> its job

    def objective(self, types: Sequence[int], bases: Sequence[int], norm: Sequence[float]) -> float:
        """Sum of progress rates for normalised throughputs ``norm`` of jobs at ``types``."""
        return float(sum(progress(n, self.gain[t, b]) for t, b, n in zip(types, bases, norm)))

    def jobs(self, gpu: int, view: ClusterView) -> list[TunedJob]:
        """The GPU's occupants as a session's jobs (key: the job handle as a string), each with its
        submitted batch size's memory as its request (``mem_request_gib``: it reserves at least
        that, as a pod its ``iadeep.io/gpu-mem``; the live coordinator passes the pod's)."""
        types = self.model.types
        job_type, base_type, num_gpus = view.job_type.item, view.job_base_type.item, view.job_num_gpus.item
        kept = self._jobs
        out = []
        for h in view.slots[gpu].tolist():  # the occupants, in placement order (ClusterView's slot contract)
            if h < 0:
                break
            t, b, one = job_type(h), base_type(h), num_gpus(h) == 1
            job = kept.get((h, t, b, one))  # a TunedJob is immutable and made of these alone
            if job is None:
                current, base = types[t], types[b]
                # it reserves at least its submitted size's memory (its pod's request), as live
                job = TunedJob(str(h), current.model, base.batch_size, current.batch_size, tunable=one,
                               mem_request_gib=float(self.model.mem_gib[b]))
                if len(kept) >= 65536:
                    kept.clear()
                kept[(h, t, b, one)] = job
            out.append(job)
        return out

    def session(self, gpu: int, view: ClusterView, predicted: Prediction) -> TuningStudy:
        """The in-memory tuning session of ``gpu`` (module docstring); ``predicted`` as in :meth:`tune`."""
        jobs = self.jobs(gpu, view)
        cap = float(view.gpu_mem_total_gib[gpu])
        space = SearchSpace(self.model, jobs, gpu_mem_gib=cap)
        if space.n_feasible() <= 1:
            # nothing to rank: the warm start predicted_warm_start gives (its one configuration, or
            # none), without the prediction (a quarter of a trace's sessions; a learner's refit each)
            warm = space.configurations()[:self.trials]
        else:
            warm = predicted_warm_start(space, predicted() if callable(predicted) else predicted, self.trials)
        return TuningStudy(self.model, jobs, name=f"gpu-{gpu}", warm_start=warm, stop=self.stop, seed=self.seed,
                           gpu_mem_gib=cap, space=space)

    def tune(self, gpu: int, view: ClusterView, predicted: Prediction, measure: Measure) -> TuningDecision:
        """Run one tuning session.

        Args:
            gpu: GPU id.
            view: cluster view (occupants, current and base types, GPU memory).
            predicted: predicted pairwise normalised throughput, shape ``(n_types, n_types)``, or a
                function that returns it, called only when the session has more than one feasible
                configuration to rank (e.g. a learner's ``matrix``, which refits on demand).
            measure: the measurement executor (one call = one trial).
        """
        study = self.session(gpu, view, predicted)
        space = study.space
        keys = list(space.options)
        handles = [int(k) for k in keys]
        samples = []
        while (proposal := study.ask()) is not None:
            config = space.type_ids(proposal.config)
            obs = measure(dict(zip(handles, config)))
            norm = [float(obs[h]) for h in handles]
            study.tell(proposal.trial, dict(zip(keys, norm)))
            if len(handles) == 2:  # a pair, the common case: the loop below unrolled (the same order)
                h0, h1 = handles
                samples.append((h0, h1, config[0], config[1], norm[0]))
                samples.append((h1, h0, config[1], config[0], norm[1]))
                continue
            for i, h in enumerate(handles):
                for j, p in enumerate(handles):
                    if i != j:
                        samples.append((h, p, config[i], config[j], norm[i]))
        out = study.outcome()
        return TuningDecision(
            gpu,
            dict(zip(handles, space.type_ids(out.best))),
            trials=out.trials,
            samples=tuple(samples),
            progress=out.best_objective,
            reason=f"best of {out.trials} measured configurations: progress {out.best_objective:.2f}",
        )
