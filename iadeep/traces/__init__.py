"""Trace loaders and workload building.

Turns public GPU-cluster traces into the project's normalised job table (one row per job:
``job_id``, ``submit_time`` s, ``duration`` s, ``num_gpus``, ``gpu_milli``, ``model``,
``batch_size``, ``app``, ``gpu_spec``, ``censored``; see :mod:`iadeep.traces._schema` for the full contract and
``df.attrs``):

* ``"philly"``: Pollux's ``philly.csv`` (Microsoft Philly, ATC'19; CC-BY-4.0),
* ``"philly-json"``: Philly's original ``cluster_job_log``,
* ``"ms-itp"``: Microsoft ITP clusters (ElasticFlow raw traces; folder, one CSV or tarball),
* ``"openb"``: Alibaba's GPU-sharing pod list (cluster-trace-gpu-v2023).

Example::

    from iadeep.traces import TraceOptions, load_trace
    df = load_trace("philly", "data/philly/philly.csv",
                    TraceOptions(virtual_cluster="6214e9", n_jobs=500, max_gpus=8,
                                 target_load=0.8, cluster_gpus=64, seed=1))
    df.attrs["offered_load"]["peak_load"]

Loaders never download: pass the path of a file the dataset registry fetched.
"""

from ._arrivals import IADEEP_GAP_DIVISOR, PEAK_WINDOW_FRACTION, LoadStats, offered_load
from ._errors import JobTableError, TraceFormatError, UnknownVirtualClusterError
from ._load import (
    TRACE_FORMATS,
    TraceFormat,
    load_msitp,
    load_openb,
    load_philly,
    load_philly_json,
    load_trace,
)
from ._mix import IADEEP_MIX_TABLE, MIXES, MixEntry, WorkloadMix, assign_mix, mix_probabilities
from ._options import TraceOptions
from ._schema import JOB_COLUMNS, validate_job_table
from ._taxonomy import QUIRKS, REASONS, Reason, reason_table

__all__ = [
    "load_trace",
    "load_philly",
    "load_philly_json",
    "load_msitp",
    "load_openb",
    "TRACE_FORMATS",
    "TraceFormat",
    "TraceOptions",
    "TraceFormatError",
    "UnknownVirtualClusterError",
    "JobTableError",
    "LoadStats",
    "offered_load",
    "PEAK_WINDOW_FRACTION",
    "IADEEP_GAP_DIVISOR",
    "MIXES",
    "MixEntry",
    "WorkloadMix",
    "IADEEP_MIX_TABLE",
    "assign_mix",
    "mix_probabilities",
    "JOB_COLUMNS",
    "validate_job_table",
    "REASONS",
    "QUIRKS",
    "Reason",
    "reason_table",
]
