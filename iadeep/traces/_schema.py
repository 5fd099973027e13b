"""The normalised job table: what every trace loader returns.

A :class:`pandas.DataFrame`, one row per job, with a default ``RangeIndex`` and sorted by
``submit_time`` then ``job_id`` (string order, as a tie-break only).

=============  ==========  ==================================================================
column         dtype       meaning
=============  ==========  ==================================================================
job_id         str         unique, non-empty id; stable across windows and options (e.g.
                           ``"philly-1234"`` = line 1234 of ``philly.csv``,
                           ``"cluster04-<uuid>"`` for ITP, the pod name for openb).
submit_time    float64     seconds from the first kept job's submission (so ``min == 0``),
                           after any arrival rescaling.
duration       float64     seconds of run time on dedicated GPUs (``>= 0``, finite; 0: the job
                           completes at once, or a censored job started at the snapshot).
num_gpus       int64       GPUs the job needs at once (``>= 1``).
gpu_milli      float64     per-GPU share in 1/1000 GPU (1000 = a whole GPU), in ``(0, 1000]``;
                           ``NaN`` when the trace does not say (Philly, ITP).
gpu_spec       str         GPU models the job may run on, ``|``-separated (openb's
                           ``gpu_spec``, e.g. ``"V100M16|V100M32"``); ``""`` = any model.
censored       bool        still running when the trace was taken: ``duration`` is the observed
                           run time, a lower bound (see :mod:`iadeep.traces._taxonomy`).
model          str         Gavel model family, a key of
                           :data:`iadeep.jobtypes.MEASURED_BATCH_SIZES` (e.g. ``"ResNet-50"``).
batch_size     int64       one of ``MEASURED_BATCH_SIZES[model]`` (1 for A3C / CycleGAN).
app            str         the workload mix's own model name (e.g. ``"vgg16"``); for the
                           ``gavel`` mix, the family name.
=============  ==========  ==================================================================

``model`` and ``batch_size`` together are a :class:`iadeep.jobtypes.JobType`.
String columns may be ``object`` (Python ``str``) or pandas' string dtype; no value is missing
except ``gpu_milli`` (``gpu_spec`` may be the empty string; no other string may). Extra columns are allowed by :func:`validate_job_table` (loaders add none).

``df.attrs`` (set by :func:`iadeep.traces.load_trace`):

* ``name``: the trace format's name (``"philly"``, ``"philly-json"``, ``"ms-itp"``, ``"openb"``).
* ``source``: the path that was read (file, folder or tarball), as a string.
* ``sha256``: hex SHA-256 of the source file; when several files were read (an ITP folder), the
  SHA-256 of their ``sha256sum``-style manifest (``"<hex>  <name>\\n"`` lines sorted by name).
* ``files``: ``{file name: sha256 hex}`` of every file read.
* ``rows_read``: data rows (CSV lines or JSON job objects) read, blank lines excluded.
* ``skipped_rows``: bad rows skipped (only non-zero with ``skip_bad_rows=True``).
* ``dropped``: ``{reason: count}`` of well-formed jobs left out, in the order applied: the
  format's rules (``zero_gpu``, ``no_attempts``, ``never_scheduled``,
  ``invalid_attempt_times``, ``missing_attempt_times``, ``zero_duration`` with
  ``drop_zero_duration``), then
  ``other_virtual_cluster``, ``outside_window``, ``too_many_gpus``, ``wider_than_cluster``,
  ``before_start_job``, ``after_n_jobs`` (the taxonomy: :data:`iadeep.traces.REASONS`).
* ``flagged``: ``{reason: count}`` of the table's jobs kept but marked (``censored``,
  ``inconsistent_gpu_milli``, ``zero_duration``); reasons with no job are left out.
* ``n_jobs``: rows in the table.
* ``trace_origin``: what time 0 of the window options means for this trace (a description).
* ``arrival_factor``: the factor every inter-arrival gap was multiplied by (1.0 = unchanged).
* ``offered_load``: ``dataclasses.asdict`` of :class:`iadeep.traces.LoadStats` of the final
  table, when ``cluster_gpus`` was given (else absent).
* ``mix``, ``seed``: the workload mix and seed used; ``options``: the options as a dict.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from iadeep.jobtypes import MEASURED_BATCH_SIZES

from ._errors import JobTableError

__all__ = ["JOB_COLUMNS", "validate_job_table", "empty_job_table"]

#: Column name -> dtype kind ("str", or a numpy dtype name), in table order.
JOB_COLUMNS: dict[str, str] = {
    "job_id": "str",
    "submit_time": "float64",
    "duration": "float64",
    "num_gpus": "int64",
    "gpu_milli": "float64",
    "gpu_spec": "str",
    "censored": "bool",
    "model": "str",
    "batch_size": "int64",
    "app": "str",
}


def empty_job_table() -> pd.DataFrame:
    """A job table with no rows and the schema's columns and dtypes."""
    return pd.DataFrame(
        {c: pd.Series([], dtype=object if d == "str" else d) for c, d in JOB_COLUMNS.items()}
    )


def _fail(df: pd.DataFrame, mask: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(mask)
    if bad.size:
        i = int(bad[0])
        jid = df["job_id"].iloc[i] if "job_id" in df.columns else "?"
        raise JobTableError(
            f"job table: {what} ({bad.size} row(s); first at position {i}, job_id {jid!r})"
        )


def _is_str_column(s: pd.Series) -> bool:
    if pd.api.types.is_string_dtype(s.dtype) and not pd.api.types.is_object_dtype(s.dtype):
        return True
    if pd.api.types.is_object_dtype(s.dtype):
        return bool(s.map(lambda v: isinstance(v, str)).all())
    return False


def validate_job_table(df: pd.DataFrame) -> pd.DataFrame:
    """Check that ``df`` follows the job-table schema (see the module docstring).

    Args:
        df: the table to check.

    Returns:
        ``df`` itself, unchanged, so the call can be chained.

    Raises:
        JobTableError: (a ``ValueError``) naming the first violated rule, how many rows break it
            and the first such row's position and ``job_id``: a missing column, a wrong dtype, a
            missing value, a duplicate or empty ``job_id``, a negative / non-finite submit time,
            ``min(submit_time) != 0``, rows not sorted by (``submit_time``, ``job_id``), a
            negative duration, ``num_gpus < 1``, ``gpu_milli`` outside ``(0, 1000]``, an
            unknown model family or a batch size Gavel did not measure for that family.
    """
    if not isinstance(df, pd.DataFrame):
        raise JobTableError(f"job table: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in JOB_COLUMNS if c not in df.columns]
    if missing:
        raise JobTableError(f"job table: missing column(s) {missing}; expected {list(JOB_COLUMNS)}")
    for col, kind in JOB_COLUMNS.items():
        s = df[col]
        if kind == "str":
            if not _is_str_column(s):
                raise JobTableError(
                    f"job table: column {col!r} must hold strings (dtype {s.dtype}, e.g. "
                    f"{s.iloc[0]!r})" if len(s) else f"job table: column {col!r} has dtype {s.dtype}"
                )
        elif s.dtype != np.dtype(kind):
            raise JobTableError(f"job table: column {col!r} has dtype {s.dtype}, expected {kind}")
    if len(df) == 0:
        return df
    for col in JOB_COLUMNS:
        if col != "gpu_milli":
            _fail(df, df[col].isna().to_numpy(), f"column {col!r} has missing values")
    ids = df["job_id"].to_numpy(dtype=object)
    _fail(df, df["job_id"].str.len().to_numpy() == 0, "empty job_id")
    _fail(df, df["job_id"].duplicated().to_numpy(), "duplicate job_id")
    submit = df["submit_time"].to_numpy()
    _fail(df, ~np.isfinite(submit) | (submit < 0), "submit_time must be finite and >= 0")
    if submit.min() != 0.0:
        raise JobTableError(
            f"job table: submit_time must start at 0 (the first kept job), min is {submit.min()!r}"
        )
    later = submit[1:] > submit[:-1]
    tie = submit[1:] == submit[:-1]
    unsorted = ~later & ~(tie & (ids[1:] > ids[:-1]))
    _fail(df, np.r_[False, unsorted], "rows not sorted by (submit_time, job_id)")
    dur = df["duration"].to_numpy()
    _fail(df, ~np.isfinite(dur) | (dur < 0), "duration must be finite and >= 0 seconds")
    _fail(df, df["num_gpus"].to_numpy() < 1, "num_gpus must be >= 1")
    milli = df["gpu_milli"].to_numpy()
    with np.errstate(invalid="ignore"):
        _fail(df, ~np.isnan(milli) & ~((milli > 0) & (milli <= 1000)), "gpu_milli outside (0, 1000]")
    models = df["model"].to_numpy(dtype=object)
    known = np.isin(models, list(MEASURED_BATCH_SIZES))
    _fail(df, ~known, f"unknown model family (known: {list(MEASURED_BATCH_SIZES)})")
    bs = df["batch_size"].to_numpy()
    ok = np.zeros(len(df), dtype=bool)
    for fam, sizes in MEASURED_BATCH_SIZES.items():
        sel = models == fam
        ok[sel] = np.isin(bs[sel], sizes)
    _fail(df, ~ok, "batch_size not measured by Gavel for that model family")
    _fail(df, df["app"].str.len().to_numpy() == 0, "empty app")
    return df
