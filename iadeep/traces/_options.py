"""Options for building a workload from a trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._mix import MIXES

__all__ = ["TraceOptions"]


@dataclass(frozen=True)
class TraceOptions:
    """How to cut, rescale and label a trace (all times in seconds).

    Filters are applied in this order: bad rows, jobs needing no GPU / never completed,
    ``virtual_cluster``, the submission window, ``max_gpus``, ``cluster_gpus``, ``exclude``, then
    (after sorting by submission) ``start_job`` and ``n_jobs``. Submit times are then re-based so the first kept job is at 0,
    inter-arrival gaps are rescaled, and the workload mix is assigned.

    Attributes:
        window_start_s: keep jobs submitted at or after this time. Default 0.
        window_end_s: keep jobs submitted before this time. Default ``inf`` (no end). Both are
            measured from the trace's origin, before re-basing: for Philly (CSV and JSON), the
            earliest submission in the file; for ITP and openb, time 0 of the trace's own
            relative clock (the start of collection). ``df.attrs["trace_origin"]`` says which.
        virtual_cluster: keep only this virtual cluster (a name, or a tuple of names): Philly's
            ``cluster`` / ``vc`` hash, or an ITP cluster file stem (``"cluster01"``). ``None``
            (default): all. openb has none (a ``ValueError`` if given).
        start_job: skip this many jobs (in submission order, after the filters above). Default 0.
        n_jobs: then keep at most this many jobs. Default ``None`` (all).
        max_gpus: drop jobs needing more GPUs than this (counted as ``too_many_gpus``).
            Default ``None`` (no limit).
        arrival_scale: multiply every inter-arrival gap by this (> 0). Default 1 (unchanged);
            0.5 halves the span (twice the arrival rate).
        iadeep_arrival_rule: IADeep's artifact rule (as reported in the project's issue): each
            gap becomes ``gap / 1000 * arrival_scale``. Default false.
        target_load: rescale the gaps so that the mean offered load
            ``sum(duration * num_gpus) / (cluster_gpus * span)`` equals this (span = first to
            last submission). Needs ``cluster_gpus``; excludes ``arrival_scale != 1`` and the
            IADeep rule. Default ``None`` (no target).
        cluster_gpus: GPUs in the simulated cluster; with it, jobs needing more GPUs are dropped
            as ``wider_than_cluster`` (right after ``max_gpus``; unless ``keep_wider``) and ``df.attrs["offered_load"]``
            reports :class:`~iadeep.traces.LoadStats` (mean and peak load). Default ``None``.
        skip_bad_rows: skip (and count) malformed rows instead of raising
            :class:`~iadeep.traces.TraceFormatError`. Default false.
        keep_wider: keep jobs wider than ``cluster_gpus`` (the simulator then reports them as
            unschedulable). Default false.
        drop_zero_duration: drop the jobs that ran for 0 s (counted as ``zero_duration`` in
            ``df.attrs["dropped"]``). Default false: such a job is a real job that completes at
            once; it is kept and counted in ``df.attrs["flagged"]`` under ``zero_duration``.
            Censored jobs are never dropped for it (0 s is their observed run time, a lower
            bound: a job that started at the snapshot).
        strict: treat every known quirk of the trace (see :mod:`iadeep.traces._taxonomy`:
            ``censored``, ``invalid_attempt_times``, ``inconsistent_gpu_milli``, ...) as a malformed
            row: :class:`~iadeep.traces.TraceFormatError` naming file, line and field (or, with
            ``skip_bad_rows``, a skipped row). Default false: each quirk is handled by its rule.
        mix: workload mix, a key of :data:`~iadeep.traces.MIXES` (``"iadeep"`` or ``"gavel"``).
        seed: seed of the mix assignment. Default 0.
        exclude: jobs the caller cannot use, dropped before ``start_job`` and ``n_jobs`` so that the
            window has ``n_jobs`` usable jobs and ``target_load`` is met by them: called with the
            sorted jobs (``job_id``, ``num_gpus``, ``gpu_milli``, ``gpu_spec`` and the mix's
            ``model``, ``batch_size``, ``app``, assigned as in the result: a keyed hash of each job
            id), it returns one reason per job (``""``: keep), each counted in ``df.attrs["dropped"]``.
            The experiment passes :func:`iadeep.sim.feasibility` (``exceeds_gpu_memory``). Default
            ``None``.

    Raises:
        ValueError: (on construction) for an out-of-range or contradictory setting.
    """

    window_start_s: float = 0.0
    window_end_s: float = math.inf
    virtual_cluster: str | tuple[str, ...] | None = None
    start_job: int = 0
    n_jobs: int | None = None
    max_gpus: int | None = None
    arrival_scale: float = 1.0
    iadeep_arrival_rule: bool = False
    target_load: float | None = None
    cluster_gpus: int | None = None
    skip_bad_rows: bool = False
    strict: bool = False
    keep_wider: bool = False
    drop_zero_duration: bool = False
    mix: str = "iadeep"
    seed: int = 0
    exclude: Callable[[Any], Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        vc = self.virtual_cluster
        if vc is not None:
            vc = (vc,) if isinstance(vc, str) else tuple(vc)
            if not vc or not all(isinstance(v, str) and v for v in vc):
                raise ValueError(
                    f"virtual_cluster must be a non-empty name or names, got {self.virtual_cluster!r}"
                )
            object.__setattr__(self, "virtual_cluster", vc)
        if math.isnan(self.window_start_s) or math.isnan(self.window_end_s):
            raise ValueError("window_start_s / window_end_s must not be NaN")
        if not self.window_end_s > self.window_start_s:
            raise ValueError(
                f"window_end_s ({self.window_end_s}) must be after window_start_s ({self.window_start_s})"
            )
        if int(self.start_job) != self.start_job or self.start_job < 0:
            raise ValueError(f"start_job must be an integer >= 0, got {self.start_job!r}")
        if self.n_jobs is not None and (int(self.n_jobs) != self.n_jobs or self.n_jobs < 1):
            raise ValueError(f"n_jobs must be an integer >= 1 or None, got {self.n_jobs!r}")
        if self.max_gpus is not None and (int(self.max_gpus) != self.max_gpus or self.max_gpus < 1):
            raise ValueError(f"max_gpus must be an integer >= 1 or None, got {self.max_gpus!r}")
        if not (math.isfinite(self.arrival_scale) and self.arrival_scale > 0):
            raise ValueError(f"arrival_scale must be finite and > 0, got {self.arrival_scale!r}")
        if self.cluster_gpus is not None and (
            int(self.cluster_gpus) != self.cluster_gpus or self.cluster_gpus < 1
        ):
            raise ValueError(f"cluster_gpus must be an integer >= 1 or None, got {self.cluster_gpus!r}")
        if self.target_load is not None:
            if not (math.isfinite(self.target_load) and self.target_load > 0):
                raise ValueError(f"target_load must be finite and > 0, got {self.target_load!r}")
            if self.cluster_gpus is None:
                raise ValueError("target_load needs cluster_gpus (offered load is per cluster GPU)")
            if self.arrival_scale != 1.0 or self.iadeep_arrival_rule:
                raise ValueError(
                    "target_load sets the arrival scaling itself; leave arrival_scale at 1 and "
                    "iadeep_arrival_rule off"
                )
        if self.mix not in MIXES:
            raise ValueError(f"unknown workload mix {self.mix!r}; known: {sorted(MIXES)}")
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
