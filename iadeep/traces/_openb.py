"""Alibaba GPU-sharing pods (``openb_pod_list_default.csv``, cluster-trace-gpu-v2023).

Source: ``alibaba/clusterdata`` ``cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv``
(Apache-2.0; Weng et al., USENIX ATC'23): 8,152 pods. Columns used: ``name``, ``num_gpu``
(0..8), ``gpu_milli`` (per-GPU share, 1000 = a whole GPU, documented for GPU-sharing pods,
``num_gpu == 1``; 0 for CPU-only pods), ``gpu_spec`` (optional column: required GPU models,
``|``-separated, empty = any), ``pod_phase``, ``creation_time``, ``deletion_time``,
``scheduled_time`` (s on the trace's own clock; empty ``scheduled_time`` for pods never
scheduled). Pods still running at the snapshot have the snapshot time (the file's latest
``deletion_time``) as ``deletion_time``: their run times are censored.
"""

from __future__ import annotations

from os import PathLike

import numpy as np
import pandas as pd

from ._errors import UnknownVirtualClusterError
from ._options import TraceOptions
from ._source import RawTrace, read_csv_text, read_file, zero_duration_rule

__all__ = ["read_openb"]


def read_openb(path: str | PathLike[str], options: TraceOptions) -> RawTrace:
    """Read openb pods: submit = ``creation_time``, duration = ``deletion_time - scheduled_time``.

    ``num_gpus = num_gpu``, ``gpu_milli = gpu_milli``, ``gpu_spec`` as written (``""`` = any
    model); ``job_id`` is the pod ``name``. Rules of :mod:`iadeep.traces._taxonomy`:
    ``never_scheduled`` (empty ``scheduled_time``), ``invalid_attempt_times``
    (``deletion_time < scheduled_time``), ``censored`` (``pod_phase`` Running with
    ``deletion_time`` at the snapshot, or an empty ``deletion_time``: kept, run time to the
    snapshot), ``inconsistent_gpu_milli`` (``num_gpu > 1`` with ``gpu_milli < 1000``: kept as
    whole GPUs), then ``zero_gpu`` and ``zero_duration`` (0 s and not censored: kept and flagged,
    dropped with ``options.drop_zero_duration``). Time origin: 0 of the trace's clock.
    Bad values: non-numeric or negative times, ``num_gpu`` not a whole number, ``gpu_milli``
    above 1000 or 0 for a pod that requests GPUs.

    Raises:
        TraceFormatError: on a bad row (unless ``options.skip_bad_rows``); with
            ``options.strict``, on the first quirk.
        UnknownVirtualClusterError: (a ``ValueError``) ``options.virtual_cluster`` is set (openb has
            no virtual clusters).
    """
    if options.virtual_cluster is not None:
        raise UnknownVirtualClusterError("openb: the trace has no virtual clusters")
    src = read_file(path)
    cols = ["name", "num_gpu", "gpu_milli", "pod_phase", "creation_time", "deletion_time", "scheduled_time"]
    text, chk = read_csv_text(src, cols, options.skip_bad_rows, options.strict)
    ids = chk.text(text["name"], "name", unique=True)
    gpus = chk.number(text["num_gpu"], "num_gpu", integer=True)
    milli = chk.number(text["gpu_milli"], "gpu_milli")
    created = chk.number(text["creation_time"], "creation_time")
    deleted = chk.number(text["deletion_time"], "deletion_time", allow_missing=True)
    scheduled = chk.number(text["scheduled_time"], "scheduled_time", allow_missing=True)
    phase = text["pod_phase"].str.strip().to_numpy(dtype=object)
    spec = (text["gpu_spec"].str.strip() if "gpu_spec" in text.columns else pd.Series([""] * len(text)))
    raw_milli = text["gpu_milli"]
    chk.flag(milli > 1000, "gpu_milli", lambda v: f"{v!r} exceeds 1000 (one whole GPU)", raw_milli)
    chk.flag(
        (milli == 0) & (gpus >= 1),
        "gpu_milli",
        lambda v: f"{v!r} must be > 0 for a pod that requests GPUs",
        raw_milli,
    )
    snapshot = float(np.nanmax(deleted)) if np.isfinite(deleted).any() else np.nan
    gpu_pod = ~(gpus == 0)  # CPU-only pods are zero_gpu whatever their times say
    has_sched = np.isfinite(scheduled) & gpu_pod
    with np.errstate(invalid="ignore"):
        never = gpu_pod & (text["scheduled_time"].str.strip() == "").to_numpy()
        invalid = has_sched & (deleted < scheduled)
        censored = has_sched & ~invalid & (
            ((phase == "Running") & (deleted == snapshot)) | (text["deletion_time"].str.strip() == "").to_numpy()
        )
        wide_share = (gpus > 1) & (milli < 1000)
    chk.quirk(never, "never_scheduled", "scheduled_time", "empty: the pod was never scheduled")
    chk.quirk(invalid, "invalid_attempt_times", "deletion_time",
              lambda v: f"{v!r} is before scheduled_time", text["deletion_time"])
    chk.quirk(censored, "censored", "deletion_time",
              "the pod was still running when the trace was taken (censored)", text["deletion_time"])
    chk.quirk(wide_share, "inconsistent_gpu_milli", "gpu_milli",
              lambda v: f"{v!r} < 1000 on a multi-GPU pod (the trace documents shares for num_gpu == 1 only)",
              raw_milli)
    ok = chk.finish()
    end = np.where(np.isfinite(deleted), deleted, snapshot)
    duration = np.where(censored, snapshot - scheduled, end - scheduled)
    jobs = pd.DataFrame(
        {
            "job_id": ids[ok],
            "submit_s": created[ok],
            "duration": duration[ok],
            "num_gpus": np.nan_to_num(gpus[ok]).astype(np.int64),
            "gpu_milli": np.where(wide_share, 1000.0, milli)[ok],
            "gpu_spec": spec.to_numpy(dtype=object)[ok],
            "censored": censored[ok],
        }
    )
    raw = RawTrace(
        jobs,
        rows_read=len(text) + chk.extra_skipped,
        skipped_rows=chk.skipped,
        files={src.name: src.sha256},
        origin="time 0 of the trace's clock",
    )
    raw.flag(censored[ok], "censored")
    raw.flag(wide_share[ok], "inconsistent_gpu_milli")
    raw.drop_each({
        "zero_gpu": raw.jobs["num_gpus"].to_numpy() == 0,
        "never_scheduled": chk.quirk_mask("never_scheduled")[ok],
        "invalid_attempt_times": chk.quirk_mask("invalid_attempt_times")[ok],
    })
    zero_duration_rule(raw, options.drop_zero_duration)
    return raw
