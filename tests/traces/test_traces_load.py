"""The pipeline's pieces: offered load, options, schema validation, registry, public API."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import iadeep.traces as traces
from iadeep.traces import (
    JOB_COLUMNS,
    TRACE_FORMATS,
    JobTableError,
    LoadStats,
    TraceOptions,
    load_trace,
    offered_load,
    validate_job_table,
)


def table(submit, duration, gpus) -> pd.DataFrame:
    return pd.DataFrame(
        {"submit_time": np.asarray(submit, float), "duration": np.asarray(duration, float),
         "num_gpus": np.asarray(gpus, np.int64)}
    )


# -- offered load ----------------------------------------------------------------------------


def test_offered_load_uniform_arrivals() -> None:
    s = offered_load(table(np.arange(10) * 10, [10] * 10, [1] * 10), cluster_gpus=1)
    assert isinstance(s, LoadStats)
    assert (s.span_s, s.gpu_seconds, s.n_jobs) == (90.0, 100.0, 10)
    assert s.mean_load == pytest.approx(100 / 90)
    assert s.peak_window_s == pytest.approx(9.0)
    assert s.peak_load == pytest.approx(10 / 9)  # one job per 9 s window


def test_offered_load_burst() -> None:
    s = offered_load(table([0] * 9 + [100], [10] * 10, [2] * 10), cluster_gpus=4)
    assert s.mean_load == pytest.approx(200 / (4 * 100))
    assert s.peak_load == pytest.approx(180 / (4 * 10))
    assert s.peak_window_start_s == 0.0
    assert s.peak_to_mean == pytest.approx(9.0)


def test_offered_load_degenerate() -> None:
    one = offered_load(table([5.0], [10.0], [1]), 8)
    assert one.span_s == 0 and math.isinf(one.mean_load) and math.isinf(one.peak_load)
    empty = offered_load(table([], [], []), 8)
    assert empty.n_jobs == 0 and math.isnan(empty.mean_load)
    with pytest.raises(ValueError):
        offered_load(table([0, 1], [1, 1], [1, 1]), 0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6, allow_nan=False),
            st.floats(1e-3, 1e6, allow_nan=False),
            st.integers(1, 64),
        ),
        min_size=2,
        max_size=60,
    ),
    st.integers(1, 512),
)
@example([(0.0, 1.0, 1), (5e-324, 1.0, 1)], 1)  # a span whose peak window underflows to 0 s
def test_peak_is_at_least_mean(jobs, gpus) -> None:
    t, d, g = zip(*jobs)
    s = offered_load(table(t, d, g), gpus)
    if s.span_s > 0:
        assert s.peak_load >= s.mean_load
        assert s.peak_load <= s.gpu_seconds / (gpus * s.peak_window_s) * (1 + 1e-12)


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window_start_s": 10.0, "window_end_s": 10.0},
        {"n_jobs": 0},
        {"start_job": -1},
        {"max_gpus": 0},
        {"arrival_scale": 0.0},
        {"arrival_scale": math.inf},
        {"target_load": 0.8},  # needs cluster_gpus
        {"target_load": 0.8, "cluster_gpus": 8, "arrival_scale": 2.0},
        {"target_load": 0.8, "cluster_gpus": 8, "iadeep_arrival_rule": True},
        {"target_load": -1.0, "cluster_gpus": 8},
        {"cluster_gpus": 0},
        {"mix": "unknown"},
        {"seed": -1},
        {"virtual_cluster": ""},
    ],
)
def test_bad_options(kwargs) -> None:
    with pytest.raises(ValueError):
        TraceOptions(**kwargs)


def test_options_defaults_and_normalisation() -> None:
    o = TraceOptions()
    assert (o.window_start_s, o.window_end_s, o.n_jobs, o.mix, o.seed) == (0.0, math.inf, None, "iadeep", 0)
    assert TraceOptions(virtual_cluster="a").virtual_cluster == ("a",)
    assert TraceOptions(virtual_cluster=["a", "b"]).virtual_cluster == ("a", "b")
    with pytest.raises(AttributeError):
        o.seed = 3  # type: ignore[misc]


def test_registry_and_dispatch(philly_json: Path) -> None:
    assert list(TRACE_FORMATS) == ["philly", "philly-json", "ms-itp", "openb"]
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace("alibaba", philly_json)
    with pytest.raises(FileNotFoundError):
        load_trace("philly", philly_json.parent / "missing.csv")


def test_no_job_left_is_an_error(philly_json: Path) -> None:
    with pytest.raises(ValueError, match="no job left") as ei:
        load_trace("philly-json", philly_json, window_start_s=1e9)
    assert "outside_window" in str(ei.value)


def test_target_load_needs_two_arrivals(philly_json: Path) -> None:
    with pytest.raises(ValueError, match="cannot rescale"):
        load_trace("philly-json", philly_json, n_jobs=1, target_load=1.0, cluster_gpus=4)


def test_offered_load_attrs_only_with_cluster_gpus(philly_json: Path) -> None:
    assert "offered_load" not in load_trace("philly-json", philly_json).attrs
    df = load_trace("philly-json", philly_json, cluster_gpus=16)
    ol = df.attrs["offered_load"]
    assert ol["cluster_gpus"] == 16 and ol["span_s"] == 23_400.0
    work = (df["duration"] * df["num_gpus"]).sum()
    assert ol["mean_load"] == pytest.approx(work / (16 * 23_400))


# -- schema ----------------------------------------------------------------------------------


def good_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "job_id": ["a", "b", "c"],
            "submit_time": [0.0, 5.0, 5.0],
            "duration": [10.0, 20.0, 1.0],
            "num_gpus": np.array([1, 2, 1], dtype=np.int64),
            "gpu_milli": [np.nan, np.nan, 500.0],
            "gpu_spec": ["", "V100M16|V100M32", ""],
            "censored": [False, True, False],
            "model": ["ResNet-50", "LM", "A3C"],
            "batch_size": np.array([64, 80, 1], dtype=np.int64),
            "app": ["vgg16", "lstm", "A3C"],
        }
    )


def test_validate_accepts_a_good_table() -> None:
    df = good_table()
    assert validate_job_table(df) is df
    validate_job_table(df.iloc[:0].copy())  # an empty table with the right dtypes is fine
    validate_job_table(df.assign(extra=1))  # extra columns are allowed


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.drop(columns="app"), "missing column"),
        (lambda d: d.assign(num_gpus=d["num_gpus"].astype(float)), "'num_gpus' has dtype float64"),
        (lambda d: d.assign(job_id=[1, 2, 3]), "'job_id' must hold strings"),
        (lambda d: d.assign(job_id=["a", "a", "c"]), "duplicate job_id"),
        (lambda d: d.assign(submit_time=[1.0, 5.0, 5.0]), "must start at 0"),
        (lambda d: d.assign(submit_time=[0.0, 5.0, 4.0]), "not sorted"),
        (lambda d: d.assign(job_id=["a", "c", "b"]), "not sorted"),
        (lambda d: d.assign(duration=[10.0, -1.0, 1.0]), "duration must be finite and >= 0"),
        (lambda d: d.assign(num_gpus=np.array([1, 0, 1], dtype=np.int64)), "num_gpus must be >= 1"),
        (lambda d: d.assign(gpu_milli=[np.nan, 1500.0, np.nan]), "gpu_milli outside"),
        (lambda d: d.assign(model=["ResNet-50", "VGG", "A3C"]), "unknown model family"),
        (lambda d: d.assign(batch_size=np.array([64, 3, 1], dtype=np.int64)), "batch_size not measured"),
        (lambda d: d.assign(duration=[10.0, np.nan, 1.0]), "missing values"),
        (lambda d: d.assign(app=["vgg16", "", "A3C"]), "empty app"),
        (lambda d: d.assign(censored=[0, 1, 0]), "'censored' has dtype int64"),
        (lambda d: d.drop(columns="gpu_spec"), "missing column"),
    ],
)
def test_validate_rejects(change, match) -> None:
    with pytest.raises(JobTableError, match=match):
        validate_job_table(change(good_table()))


def test_error_names_the_first_bad_row() -> None:
    with pytest.raises(JobTableError, match=r"1 row\(s\); first at position 1, job_id 'b'"):
        validate_job_table(good_table().assign(duration=[10.0, -1.0, 1.0]))


def test_public_api() -> None:
    for name in traces.__all__:
        assert hasattr(traces, name), name
    for name in ("load_trace", "load_philly", "load_philly_json", "load_msitp", "load_openb",
                 "TraceOptions", "TraceFormatError", "LoadStats", "offered_load", "MIXES",
                 "validate_job_table", "TRACE_FORMATS"):
        assert name in traces.__all__
    assert list(JOB_COLUMNS) == [
        "job_id", "submit_time", "duration", "num_gpus", "gpu_milli", "gpu_spec", "censored", "model",
        "batch_size", "app",
    ]
    assert issubclass(traces.TraceFormatError, ValueError)
    err = traces.TraceFormatError("x.csv", 3, "duration", "'a' is not a number", "a")
    import pickle

    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.line, back.column) == (str(err), 3, "duration")
