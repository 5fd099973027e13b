"""``load_trace``: read a trace, filter it, rebase and rescale time, assign the workload mix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd

from ._arrivals import IADEEP_GAP_DIVISOR, offered_load, scale_gaps
from ._mix import assign_mix
from ._msitp import read_msitp
from ._openb import read_openb
from ._options import TraceOptions
from ._philly import read_philly_csv
from ._philly_json import read_philly_json
from ._schema import JOB_COLUMNS, validate_job_table
from ._source import RawTrace, files_digest

__all__ = [
    "TraceFormat",
    "TRACE_FORMATS",
    "load_trace",
    "load_philly",
    "load_philly_json",
    "load_msitp",
    "load_openb",
]

Reader = Callable[[str | PathLike[str], TraceOptions], RawTrace]


@dataclass(frozen=True)
class TraceFormat:
    """A registered trace format.

    Attributes:
        name: its key in :data:`TRACE_FORMATS`.
        reader: ``reader(path, options) -> RawTrace`` (reads, checks rows, drops jobs that
            cannot run, applies ``virtual_cluster``).
        path: what ``path`` should point at.
        description: the trace and its source.
        reads_folder: whether ``path`` may be a folder (else it is one file).
    """

    name: str
    reader: Reader
    path: str
    description: str
    reads_folder: bool = False


#: Registry of trace formats by name (iterate it for the names). A new format is one entry.
TRACE_FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat(
            "philly",
            read_philly_csv,
            "philly.csv",
            "Microsoft Philly (ATC'19) jobs as preprocessed by Pollux (petuum/adaptdl)",
        ),
        TraceFormat(
            "philly-json",
            read_philly_json,
            "cluster_job_log (JSON)",
            "Microsoft Philly original job log (msr-fiddle/philly-traces)",
        ),
        TraceFormat(
            "ms-itp",
            read_msitp,
            "folder of clusterNN.csv, one clusterNN.csv, or raw-traces.tar.gz",
            "Microsoft ITP clusters (microsoft/elasticflow-traces raw traces)",
            reads_folder=True,
        ),
        TraceFormat(
            "openb",
            read_openb,
            "openb_pod_list_default.csv",
            "Alibaba GPU-sharing pods (alibaba/clusterdata cluster-trace-gpu-v2023)",
        ),
    )
}


def _arrival_factor(jobs: pd.DataFrame, o: TraceOptions) -> float:
    if o.target_load is not None:
        assert o.cluster_gpus is not None
        stats = offered_load(jobs, o.cluster_gpus)
        if not (stats.span_s > 0 and stats.gpu_seconds > 0):
            raise ValueError(
                f"cannot rescale the arrivals to a target load: {stats.n_jobs} job(s) spanning "
                f"{stats.span_s} s (need at least two distinct submit times)"
            )
        return stats.mean_load / o.target_load
    if o.iadeep_arrival_rule:
        return o.arrival_scale / IADEEP_GAP_DIVISOR
    return o.arrival_scale


def load_trace(
    name: str,
    path: str | PathLike[str],
    options: TraceOptions | None = None,
    **overrides: Any,
) -> pd.DataFrame:
    """Load a trace as a normalised job table (see :mod:`iadeep.traces._schema`).

    Steps: read and check rows (:class:`TraceFormatError` or skip), apply the format's rules of
    :mod:`iadeep.traces._taxonomy` (drop jobs that need no GPU or never ran, flag censored
    jobs, ...), keep ``virtual_cluster``, keep submissions in ``[window_start_s, window_end_s)``
    (seconds from the trace origin), drop jobs needing more than ``max_gpus`` and, with
    ``cluster_gpus``, more than the cluster has, sort by (submit, job_id), drop the jobs ``exclude``
    names a reason for, keep jobs
    ``start_job .. start_job + n_jobs``, re-base time to the first kept job, rescale
    inter-arrival gaps, assign the workload mix. Every dropped job is counted in
    ``df.attrs["dropped"]``, every flagged job kept in ``df.attrs["flagged"]``.

    Args:
        name: a key of :data:`TRACE_FORMATS`: ``"philly"``, ``"philly-json"``, ``"ms-itp"``,
            ``"openb"``.
        path: the file (or, for ``"ms-itp"``, folder or tarball) to read.
        options: :class:`TraceOptions`; default ``TraceOptions()``.
        **overrides: fields of :class:`TraceOptions` to change, e.g. ``n_jobs=500``.

    Returns:
        The job table, validated, with provenance in ``df.attrs``.

    Raises:
        ValueError: unknown format name, bad option, unknown virtual cluster, or no job left
            after the filters (the message gives the drop counts).
        TraceFormatError: (a ``ValueError``) a malformed file or row.
        FileNotFoundError: ``path`` does not exist.
    """
    fmt = TRACE_FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown trace format {name!r}; known: {list(TRACE_FORMATS)}")
    o = options if options is not None else TraceOptions()
    if overrides:
        o = dataclasses.replace(o, **overrides)
    raw = fmt.reader(path, o)

    t = raw.jobs["submit_s"].to_numpy()
    raw.drop(~((t >= o.window_start_s) & (t < o.window_end_s)), "outside_window")
    if o.max_gpus is not None:
        raw.drop(raw.jobs["num_gpus"].to_numpy() > o.max_gpus, "too_many_gpus")
    if o.cluster_gpus is not None and not o.keep_wider:
        raw.drop(raw.jobs["num_gpus"].to_numpy() > o.cluster_gpus, "wider_than_cluster")
    jobs = raw.jobs.sort_values(["submit_s", "job_id"], kind="stable").reset_index(drop=True)
    if o.exclude is not None and len(jobs):
        jobs = _exclude(jobs, o, raw.dropped)
    n = len(jobs)
    start = min(o.start_job, n)
    stop = n if o.n_jobs is None else min(start + o.n_jobs, n)
    for reason, count in (("before_start_job", start), ("after_n_jobs", n - stop)):
        if count:
            raw.dropped[reason] = raw.dropped.get(reason, 0) + count
    jobs = jobs.iloc[start:stop].reset_index(drop=True)
    if len(jobs) == 0:
        raise ValueError(
            f"{name}: no job left in {path} after the filters "
            f"(rows read {raw.rows_read}, bad rows skipped {raw.skipped_rows}, dropped {raw.dropped})"
        )

    submit = jobs["submit_s"].to_numpy(dtype=np.float64)
    submit = submit - submit[0]
    table = pd.DataFrame(
        {
            "job_id": jobs["job_id"].to_numpy(dtype=object),
            "submit_time": submit,
            "duration": jobs["duration"].to_numpy(dtype=np.float64),
            "num_gpus": jobs["num_gpus"].to_numpy(dtype=np.int64),
            "gpu_milli": jobs["gpu_milli"].to_numpy(dtype=np.float64),
            "gpu_spec": (jobs["gpu_spec"].to_numpy(dtype=object) if "gpu_spec" in jobs.columns
                         else np.full(len(jobs), "", dtype=object)),
            "censored": (jobs["censored"].to_numpy(dtype=bool) if "censored" in jobs.columns
                         else np.zeros(len(jobs), dtype=bool)),
        }
    )
    flagged = {
        c[len("flag:"):]: int(jobs[c].to_numpy(dtype=bool).sum()) for c in jobs.columns if c.startswith("flag:")
    }
    factor = _arrival_factor(table, o)
    table["submit_time"] = scale_gaps(submit, factor)
    table = table.sort_values(["submit_time", "job_id"], kind="stable").reset_index(drop=True)
    table = assign_mix(table, o.mix, o.seed)
    table = table[list(JOB_COLUMNS)]

    table.attrs = {
        "name": name,
        "source": str(path),
        "sha256": files_digest(raw.files),
        "files": dict(raw.files),
        "rows_read": int(raw.rows_read),
        "skipped_rows": int(raw.skipped_rows),
        "dropped": {k: int(v) for k, v in raw.dropped.items()},
        "flagged": {k: v for k, v in flagged.items() if v},
        "n_jobs": len(table),
        "trace_origin": raw.origin,
        "arrival_factor": float(factor),
        "mix": o.mix,
        "seed": int(o.seed),
        "options": {f.name: getattr(o, f.name) for f in dataclasses.fields(o) if f.name != "exclude"},
    }
    if o.cluster_gpus is not None:
        table.attrs["offered_load"] = dataclasses.asdict(offered_load(table, o.cluster_gpus))
    return validate_job_table(table)


def _exclude(jobs: pd.DataFrame, o: TraceOptions, dropped: dict[str, int]) -> pd.DataFrame:
    """``jobs`` without those ``o.exclude`` names a reason for (counted into ``dropped``)."""
    n = len(jobs)
    view = pd.DataFrame({"job_id": jobs["job_id"].to_numpy(dtype=object),
                         "num_gpus": jobs["num_gpus"].to_numpy(dtype=np.int64),
                         "gpu_milli": jobs["gpu_milli"].to_numpy(dtype=np.float64),
                         "gpu_spec": (jobs["gpu_spec"].to_numpy(dtype=object) if "gpu_spec" in jobs.columns
                                      else np.full(n, "", dtype=object))})
    why = np.asarray(o.exclude(assign_mix(view, o.mix, o.seed)), dtype=object)  # type: ignore[misc]
    if why.shape != (n,):
        raise ValueError(f"exclude returned shape {why.shape} for {n} jobs")
    keep = why == ""
    for reason in sorted(set(why[~keep].tolist())):
        dropped[str(reason)] = dropped.get(str(reason), 0) + int((why == reason).sum())
    return jobs.loc[keep].reset_index(drop=True)


def _loader(fmt: str) -> Callable[..., pd.DataFrame]:
    def load(
        path: str | PathLike[str], options: TraceOptions | None = None, **overrides: Any
    ) -> pd.DataFrame:
        return load_trace(fmt, path, options, **overrides)

    load.__name__ = load.__qualname__ = "load_" + fmt.replace("-", "_").replace("ms_itp", "msitp")
    f = TRACE_FORMATS[fmt]
    load.__doc__ = (
        f"Load {f.description} from ``path`` ({f.path}).\n\n"
        f"Same as ``load_trace({fmt!r}, path, options, **overrides)``; see :func:`load_trace`.\n"
    )
    return load


#: ``load_trace("philly", ...)``: Pollux's ``philly.csv``.
load_philly = _loader("philly")
#: ``load_trace("philly-json", ...)``: Philly's ``cluster_job_log``.
load_philly_json = _loader("philly-json")
#: ``load_trace("ms-itp", ...)``: ITP cluster CSVs (folder, file or tarball).
load_msitp = _loader("ms-itp")
#: ``load_trace("openb", ...)``: openb pod list.
load_openb = _loader("openb")
