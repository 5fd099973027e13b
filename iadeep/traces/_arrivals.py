"""Offered load and arrival-time rescaling.

Offered load over a time window = GPU-seconds of the jobs *submitted* in it / (cluster GPUs x
window length): the fraction of the cluster the arriving work would keep busy. The mean over the
whole span (first to last submission) hides bursts: in Philly, most of a window's jobs can
arrive within a tenth of its span (``shared/reference/WORKLOAD-NOTES.md``), so
:func:`offered_load` also reports the peak over sliding windows of a tenth of the span.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["LoadStats", "offered_load", "scale_gaps", "PEAK_WINDOW_FRACTION", "IADEEP_GAP_DIVISOR"]

#: Peak load is measured over sliding windows this fraction of the span long.
PEAK_WINDOW_FRACTION = 0.1

#: IADeep's artifact divides trace inter-arrival gaps by this before applying its arrival scale
#: (as reported in the project's issue).
IADEEP_GAP_DIVISOR = 1000.0


@dataclass(frozen=True)
class LoadStats:
    """Offered load of a job table on a cluster.

    Attributes:
        cluster_gpus: GPUs in the cluster.
        n_jobs: jobs in the table.
        span_s: seconds from the first to the last submission.
        gpu_seconds: total work, ``sum(duration * num_gpus)`` (GPU-seconds).
        mean_load: ``gpu_seconds / (cluster_gpus * span_s)``; ``inf`` if the span is 0 and
            there is work, NaN for an empty table.
        peak_load: the largest offered load over windows ``[s, s + peak_window_s]`` inside the
            span (work of jobs submitted in the window / (cluster_gpus x peak_window_s));
            ``>= mean_load`` (ten such windows cover the span).
        peak_window_s: the sliding window's length, ``PEAK_WINDOW_FRACTION * span_s``.
        peak_window_start_s: where the peak window starts (same clock as ``submit_time``).
    """

    cluster_gpus: int
    n_jobs: int
    span_s: float
    gpu_seconds: float
    mean_load: float
    peak_load: float
    peak_window_s: float
    peak_window_start_s: float

    @property
    def peak_to_mean(self) -> float:
        """``peak_load / mean_load`` (NaN when undefined)."""
        if not (math.isfinite(self.mean_load) and self.mean_load > 0):
            return math.nan
        return self.peak_load / self.mean_load


def offered_load(df: pd.DataFrame, cluster_gpus: int) -> LoadStats:
    """Mean and peak offered load of a job table.

    Args:
        df: table with ``submit_time``, ``duration`` (s) and ``num_gpus`` columns, any order.
        cluster_gpus: GPUs in the cluster (>= 1).

    Returns:
        :class:`LoadStats`.

    Raises:
        ValueError: if ``cluster_gpus < 1``.
    """
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus must be >= 1, got {cluster_gpus}")
    t = df["submit_time"].to_numpy(dtype=np.float64)
    work = df["duration"].to_numpy(dtype=np.float64) * df["num_gpus"].to_numpy(dtype=np.float64)
    n = len(t)
    total = float(work.sum())
    if n == 0:
        return LoadStats(int(cluster_gpus), 0, 0.0, 0.0, math.nan, math.nan, 0.0, 0.0)
    order = np.argsort(t, kind="stable")
    t, work = t[order], work[order]
    span = float(t[-1] - t[0])
    if span <= 0 or PEAK_WINDOW_FRACTION * span <= 0:  # all at once (or within a denormal instant)
        load = math.inf if total > 0 else math.nan
        return LoadStats(int(cluster_gpus), n, 0.0, total, load, load, 0.0, float(t[0]))
    mean = total / (cluster_gpus * span)
    w = PEAK_WINDOW_FRACTION * span
    # The best window [s, s + w] can start at a submission (or at the last possible start).
    starts = np.minimum(t, t[-1] - w)
    cum = np.concatenate(([0.0], np.cumsum(work)))
    lo = np.searchsorted(t, starts, side="left")
    hi = np.searchsorted(t, starts + w, side="right")
    in_window = cum[hi] - cum[lo]
    best = int(np.argmax(in_window))
    peak = max(float(in_window[best]) / (cluster_gpus * w), mean)  # >= mean up to rounding
    return LoadStats(int(cluster_gpus), n, span, total, mean, peak, w, float(starts[best]))


def scale_gaps(submit: np.ndarray, factor: float) -> np.ndarray:
    """Multiply every inter-arrival gap by ``factor``, keeping the first submission in place.

    Args:
        submit: sorted submit times (s), shape ``(n,)``.
        factor: > 0.

    Returns:
        New submit times, shape ``(n,)``; the span is multiplied by ``factor``.
    """
    if factor == 1.0 or len(submit) == 0:
        return submit.astype(np.float64, copy=True)
    gaps = np.diff(submit) * factor
    return np.concatenate(([submit[0]], submit[0] + np.cumsum(gaps)))
