"""Results of one simulation: per-job records, the queue/utilisation timeline and summary metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["RunRecord", "SimResult", "summarise"]

#: Columns of :attr:`SimResult.jobs`.
JOB_COLUMNS = ("job_id", "submit_s", "start_s", "end_s", "jct_s", "queueing_s", "duration_s", "slowdown", "num_gpus",
               "model", "batch_size", "final_batch_size", "colocations", "tuning_trials", "evictions", "censored",
               "unschedulable", "placement", "partners")


@dataclass(frozen=True)
class RunRecord:
    """What the engine hands over when a run ends (per job: arrays of shape ``(n_jobs,)`` in table
    order); :meth:`SimResult.build` turns it into the result's tables.

    Attributes:
        policy: policy name.
        job_ids: the jobs' IDs (str).
        submit, start, end, duration: submission, first start and completion times, and the
            dedicated run time (s; start and end NaN for a job that never ran).
        num_gpus: GPUs each job asked for.
        base_type, type: job-type ids (of ``types``) as submitted and at the end (tuning may
            change the batch size).
        types: the interference model's job types, indexed by type id.
        coloc, trials, evictions: co-locations, tuning trials and evictions per job.
        censored, unschedulable: bool flags (the trace saw it running; it could never run).
        first_gpus: the GPUs each job first started on (cluster GPU ids).
        partners: per job, the jobs (row indices) it ever shared a GPU with.
        gpu_node, gpu_local: node index and GPU index within the node of each cluster GPU.
        node_names: names of the nodes, by node index.
        timeline: ``(t_s, queue_len, busy_gpus, running_jobs)`` after each event batch.
        total_gpus: cluster size.
        busy_gpu_seconds: integral of GPUs holding at least one job over time (GPU x s).
    """

    policy: str
    job_ids: np.ndarray
    submit: np.ndarray
    start: np.ndarray
    end: np.ndarray
    duration: np.ndarray
    num_gpus: np.ndarray
    base_type: np.ndarray
    type: np.ndarray
    types: Sequence
    coloc: np.ndarray
    trials: np.ndarray
    evictions: np.ndarray
    censored: np.ndarray
    unschedulable: np.ndarray
    first_gpus: Sequence[tuple[int, ...]]
    partners: Sequence[set[int]]
    gpu_node: np.ndarray
    gpu_local: np.ndarray
    node_names: Sequence[str]
    timeline: Sequence[tuple[float, int, int, int]]
    total_gpus: int
    busy_gpu_seconds: float


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
    def build(cls, record: RunRecord) -> SimResult:
        """The result of a finished run, from what its engine recorded (:meth:`iadeep.sim.Simulator.record`)."""
        types = record.types
        names = record.node_names
        jct = record.end - record.submit
        # JCT over the dedicated run time; undefined (NaN) for a job of 0 s, which completes at once
        slowdown = np.divide(jct, record.duration, out=np.full(len(jct), np.nan), where=record.duration > 0)
        jobs = pd.DataFrame({
            "job_id": record.job_ids,
            "submit_s": record.submit,
            "start_s": record.start,
            "end_s": record.end,
            "jct_s": jct,
            "queueing_s": record.start - record.submit,
            "duration_s": record.duration,
            "slowdown": slowdown,
            "num_gpus": record.num_gpus,
            "model": [types[t].model for t in record.base_type],
            "batch_size": [types[t].batch_size for t in record.base_type],
            "final_batch_size": [types[t].batch_size for t in record.type],
            "colocations": record.coloc,
            "tuning_trials": record.trials,
            "evictions": record.evictions,
            "censored": record.censored,
            "unschedulable": record.unschedulable,
            "placement": [";".join(f"{names[record.gpu_node[g]]}/{record.gpu_local[g]}" for g in gs) for gs in record.first_gpus],
            "partners": [";".join(sorted(str(record.job_ids[o]) for o in ps)) for ps in record.partners],
        })
        timeline = pd.DataFrame(record.timeline, columns=["t_s", "queue_len", "busy_gpus", "running_jobs"])
        return cls(record.policy, jobs, timeline, record.total_gpus, record.busy_gpu_seconds)

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
