"""Philly jobs as preprocessed by the Pollux artifact (``philly.csv``).

Source: ``petuum/adaptdl`` ``simulator/traces/philly.csv`` (Microsoft Philly trace, Jeon et al.,
USENIX ATC'19, CC-BY-4.0). Columns: ``timestamp`` (submission, ``YYYY-mm-dd HH:MM:SS``, naive
local time; rows are NOT sorted by it), ``duration`` (s on dedicated GPUs), ``num_gpus``,
``gpu_time`` (= duration x num_gpus; not used), ``cluster`` (virtual-cluster hash).
"""

from __future__ import annotations

from os import PathLike

import numpy as np
import pandas as pd

from ._options import TraceOptions
from ._source import RawTrace, read_csv_text, read_file, select_virtual_clusters, zero_duration_rule

__all__ = ["read_philly_csv", "PHILLY_TIME_FORMAT"]

#: How Philly writes times (both the Pollux CSV and the original JSON log).
PHILLY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def read_philly_csv(path: str | PathLike[str], options: TraceOptions) -> RawTrace:
    """Read ``philly.csv``; ``job_id`` is ``"philly-<line number in the file>"``.

    Time origin: the earliest submission among the file's good rows (all virtual clusters).
    ``num_gpus == 0`` rows are dropped as ``zero_gpu``; ``duration == 0`` rows are kept and
    flagged ``zero_duration`` (dropped with ``options.drop_zero_duration``). The file has no end
    times: no job is censored.

    Raises:
        TraceFormatError: on a bad row (unless ``options.skip_bad_rows``).
        ValueError: if ``options.virtual_cluster`` names a cluster not in the file.
    """
    src = read_file(path)
    text, chk = read_csv_text(src, ["timestamp", "duration", "num_gpus", "cluster"], options.skip_bad_rows)
    submit = chk.timestamp(text["timestamp"], "timestamp", PHILLY_TIME_FORMAT)
    duration = chk.number(text["duration"], "duration")
    gpus = chk.number(text["num_gpus"], "num_gpus", integer=True)
    cluster = chk.text(text["cluster"], "cluster")
    ok = chk.finish()
    lines = chk.lines[ok]
    submit = submit[ok]
    origin = float(submit.min()) if submit.size else 0.0
    jobs = pd.DataFrame(
        {
            "job_id": np.char.add("philly-", lines.astype(str)).astype(object),
            "submit_s": submit - origin,
            "duration": duration[ok],
            "num_gpus": gpus[ok].astype(np.int64),
            "gpu_milli": np.full(len(lines), np.nan),
            "cluster": cluster[ok],
        }
    )
    raw = RawTrace(
        jobs,
        rows_read=len(text) + chk.extra_skipped,
        skipped_rows=chk.skipped,
        files={src.name: src.sha256},
        origin=(
            "the earliest submission in the file "
            f"({pd.Timestamp(origin, unit='s')})" if submit.size else "none (no rows)"
        ),
    )
    raw.drop(raw.jobs["num_gpus"].to_numpy() == 0, "zero_gpu")
    zero_duration_rule(raw, options.drop_zero_duration)
    select_virtual_clusters(raw, options.virtual_cluster, "philly")
    return raw
