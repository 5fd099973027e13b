"""Results of one simulation: per-job records, the queue/utilisation timeline and summary metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from iadeep.sim._engine import Simulator

__all__ = ["SimResult", "summarise"]

#: Columns of :attr:`SimResult.jobs`.
JOB_COLUMNS = ("job_id", "submit_s", "start_s", "end_s", "jct_s", "queueing_s", "duration_s", "slowdown", "num_gpus",
               "model", "batch_size", "final_batch_size", "colocations", "tuning_trials", "evictions", "censored",
               "unschedulable", "placement", "partners")


@dataclass(frozen=True)
class SimResult:
    """What one run produced.

    Attributes:
        policy: policy name.
        jobs: one row per job (columns :data:`JOB_COLUMNS`); times in seconds; JCT from submission.
            ``censored``: the trace saw the job still running (its duration is a lower bound);
            ``unschedulable``: the job could never run on the cluster (times NaN) and was skipped;
            ``placement``: the GPUs it first started on as ``node/gpu`` joined by ``;``;
            ``partners``: the IDs of the jobs it ever shared a GPU with, sorted, joined by ``;``.
        timeline: columns ``t_s, queue_len, busy_gpus, running_jobs`` after each event batch.
        total_gpus: cluster size.
        busy_gpu_seconds: integral of GPUs holding at least one job over time (GPU x s).
    """

    policy: str
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    total_gpus: int
    busy_gpu_seconds: float

    @classmethod
    def build(cls, sim: "Simulator") -> "SimResult":
        """Collect a finished :class:`~iadeep.sim.Simulator`'s state."""
        types = sim.model.types
        names = sim.cluster.node_names()
        jct = sim.end - sim.submit
        # JCT over the dedicated run time; undefined (NaN) for a job of 0 s, which completes at once
        slowdown = np.divide(jct, sim.duration, out=np.full(len(jct), np.nan), where=sim.duration > 0)
        jobs = pd.DataFrame({
            "job_id": sim.job_ids,
            "submit_s": sim.submit,
            "start_s": sim.start,
            "end_s": sim.end,
            "jct_s": jct,
            "queueing_s": sim.start - sim.submit,
            "duration_s": sim.duration,
            "slowdown": slowdown,
            "num_gpus": sim.num_gpus,
            "model": [types[t].model for t in sim.base_type],
            "batch_size": [types[t].batch_size for t in sim.base_type],
            "final_batch_size": [types[t].batch_size for t in sim.type],
            "colocations": sim.coloc,
            "tuning_trials": sim.trials,
            "evictions": sim.evictions,
            "censored": sim.censored,
            "unschedulable": sim.infeasible_reason != "",
            "placement": [";".join(f"{names[sim.gpu_node[g]]}/{sim.gpu_local[g]}" for g in gs) for gs in sim.first_gpus],
            "partners": [";".join(sorted(str(sim.job_ids[o]) for o in ps)) for ps in sim.partners],
        })
        timeline = pd.DataFrame(sim.timeline, columns=["t_s", "queue_len", "busy_gpus", "running_jobs"])
        return cls(sim.policy.name, jobs, timeline, sim.cluster.total_gpus, sim.busy_gpu_seconds)

    def summary(self, include_censored: bool = False) -> dict[str, float]:
        """Summary metrics; see :func:`summarise`."""
        return summarise(self.jobs, self.total_gpus, self.busy_gpu_seconds, include_censored)


def summarise(jobs: pd.DataFrame, total_gpus: int, busy_gpu_seconds: float,
              include_censored: bool = False) -> dict[str, float]:
    """Per-policy summary.

    JCT statistics (JCT, queueing, slowdown) cover the jobs that ran, without the censored ones
    (their true JCT is unknown) unless ``include_censored``; makespan and utilisation cover
    every job that ran. Tables without a ``censored`` / ``unschedulable`` column count none.

    Returns:
        ``avg_jct_s``, ``p50_jct_s``, ``p95_jct_s``, ``p99_jct_s`` (JCT = end - submit, s),
        ``avg_queueing_s`` (first start - submit), ``makespan_s`` (last end - first submit),
        ``gpu_utilisation`` (busy GPU-seconds / (GPUs x makespan), a GPU is busy while it holds a
        job), ``mean_slowdown`` (mean of JCT / dedicated duration over the counted jobs whose
        duration is > 0: a job of 0 s has no slowdown, but counts in ``jct_jobs`` and the JCT
        statistics): NaN when no job counts;
        ``jct_jobs`` (jobs in the JCT statistics), ``censored_jobs``, ``unschedulable_jobs``.
    """
    n = len(jobs)
    cens = jobs["censored"].to_numpy(dtype=bool) if "censored" in jobs.columns else np.zeros(n, dtype=bool)
    unsched = jobs["unschedulable"].to_numpy(dtype=bool) if "unschedulable" in jobs.columns else np.zeros(n, dtype=bool)
    ran = jobs.loc[~unsched]
    counted = jobs.loc[~unsched & (include_censored | ~cens)]
    jct = counted["jct_s"].to_numpy(dtype=float)
    makespan = float(ran["end_s"].max() - ran["submit_s"].min()) if len(ran) else 0.0
    nan = float("nan")

    def pct(q: float) -> float:
        return float(np.percentile(jct, q)) if len(jct) else nan

    return {
        "avg_jct_s": float(np.mean(jct)) if len(jct) else nan,
        "p50_jct_s": pct(50),
        "p95_jct_s": pct(95),
        "p99_jct_s": pct(99),
        "avg_queueing_s": float(counted["queueing_s"].mean()) if len(jct) else nan,
        "makespan_s": makespan,
        "gpu_utilisation": float(busy_gpu_seconds / (total_gpus * makespan)) if makespan > 0 else 0.0,
        "mean_slowdown": float(counted["slowdown"].mean()) if len(jct) else nan,
        "jct_jobs": int(len(counted)),
        "censored_jobs": int(cens[~unsched].sum()),
        "unschedulable_jobs": int(unsched.sum()),
    }
