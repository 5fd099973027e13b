"""Alibaba GPU-sharing pods (``openb_pod_list_default.csv``, cluster-trace-gpu-v2023).

Source: ``alibaba/clusterdata`` ``cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv``
(Apache-2.0; Weng et al., USENIX ATC'23): 8,152 pods. Columns used: ``name``, ``num_gpu``
(0..8), ``gpu_milli`` (per-GPU share, 1000 = a whole GPU; 0 for CPU-only pods),
``creation_time``, ``deletion_time``, ``scheduled_time`` (s on the trace's own clock; empty
``scheduled_time`` for pods never scheduled). Pods still running at the snapshot have the
snapshot time as ``deletion_time``, so their run times are censored.
"""

from __future__ import annotations

from os import PathLike

import numpy as np
import pandas as pd

from ._options import TraceOptions
from ._source import RawTrace, read_csv_text, read_file

__all__ = ["read_openb"]


def read_openb(path: str | PathLike[str], options: TraceOptions) -> RawTrace:
    """Read openb pods: submit = ``creation_time``, duration = ``deletion_time - scheduled_time``.

    ``num_gpus = num_gpu``, ``gpu_milli = gpu_milli``; ``job_id`` is the pod ``name``. Pods with
    ``num_gpu == 0`` are dropped as ``zero_gpu``; pods with an empty ``scheduled_time`` /
    ``deletion_time`` or a non-positive duration as ``incomplete``. Time origin: 0 of the
    trace's clock. Bad values: non-numeric or negative times, ``num_gpu`` not a whole number,
    ``gpu_milli`` above 1000 or 0 for a pod that requests GPUs.

    Raises:
        TraceFormatError: on a bad row (unless ``options.skip_bad_rows``).
        ValueError: if ``options.virtual_cluster`` is set (openb has no virtual clusters).
    """
    if options.virtual_cluster is not None:
        raise ValueError("openb: the trace has no virtual clusters; leave virtual_cluster unset")
    src = read_file(path)
    cols = ["name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"]
    text, chk = read_csv_text(src, cols, options.skip_bad_rows)
    ids = chk.text(text["name"], "name", unique=True)
    gpus = chk.number(text["num_gpu"], "num_gpu", integer=True)
    milli = chk.number(text["gpu_milli"], "gpu_milli")
    created = chk.number(text["creation_time"], "creation_time")
    deleted = chk.number(text["deletion_time"], "deletion_time", allow_missing=True)
    scheduled = chk.number(text["scheduled_time"], "scheduled_time", allow_missing=True)
    raw_milli = text["gpu_milli"]
    chk.flag(milli > 1000, "gpu_milli", lambda v: f"{v!r} exceeds 1000 (one whole GPU)", raw_milli)
    chk.flag(
        (milli == 0) & (gpus >= 1),
        "gpu_milli",
        lambda v: f"{v!r} must be > 0 for a pod that requests GPUs",
        raw_milli,
    )
    ok = chk.finish()
    jobs = pd.DataFrame(
        {
            "job_id": ids[ok],
            "submit_s": created[ok],
            "duration": (deleted - scheduled)[ok],
            "num_gpus": np.nan_to_num(gpus[ok]).astype(np.int64),
            "gpu_milli": milli[ok],
        }
    )
    raw = RawTrace(
        jobs,
        rows_read=len(text) + chk.extra_skipped,
        skipped_rows=chk.skipped,
        files={src.name: src.sha256},
        origin="time 0 of the trace's clock",
    )
    raw.drop(raw.jobs["num_gpus"].to_numpy() == 0, "zero_gpu")
    d = raw.jobs["duration"].to_numpy()
    raw.drop(~(d > 0), "incomplete")
    return raw
