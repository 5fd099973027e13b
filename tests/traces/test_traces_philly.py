"""Pollux's philly.csv: the real file's facts, bad rows, and the pipeline options on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iadeep.traces import TraceFormatError, TraceOptions, UnknownVirtualClusterError, load_philly, load_trace, offered_load

PHILLY_SHA256 = "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"  # SOURCES.md

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD_ROWS = [
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48",  # line 2
    "2017-10-09 06:13:03,2951.0,1,2951.0,6214e9",  # line 3
    "2017-10-09 06:20:00,100.0,2,200.0,6214e9",  # line 4
    "2017-10-09 08:00:00,50.0,8,400.0,11cb48",  # line 5
]


def write_csv(tmp_path: Path, rows: list[str], name: str = "philly.csv") -> Path:
    p = tmp_path / name
    p.write_text(HEADER + "\n".join(rows) + "\n")
    return p


# -- the real file ---------------------------------------------------------------------------


def test_real_file_counts_and_gpu_facts(philly_full: pd.DataFrame) -> None:
    df = philly_full
    assert len(df) == 82_247
    counts = df["num_gpus"].value_counts().to_dict()
    # WORKLOAD-NOTES.md: 76,627 single-GPU jobs; 2: 1,818; 4: 1,870; 8: 1,643; 16: 199; 32: 67.
    assert counts[1] == 76_627
    assert (counts[2], counts[4], counts[8], counts[16], counts[32]) == (1818, 1870, 1643, 199, 67)
    assert df["num_gpus"].max() == 128
    assert df["duration"].median() == 1144.0
    assert df["duration"].max() == pytest.approx(4.6e6, rel=0.01)
    assert df.attrs["rows_read"] == 82_247 and df.attrs["skipped_rows"] == 0
    assert df.attrs["dropped"] == {}
    assert df.attrs["sha256"] == PHILLY_SHA256
    assert df["gpu_milli"].isna().all()
    # Jobs are sorted by submission although the file is not; span 2017-09-04 .. 2017-12-22.
    assert df["submit_time"].is_monotonic_increasing
    span = pd.Timestamp("2017-12-22 08:02:11") - pd.Timestamp("2017-09-04 10:30:41")
    assert df["submit_time"].iloc[-1] == span.total_seconds()


def test_job_id_is_the_line_number(philly_full: pd.DataFrame, philly_csv: Path) -> None:
    first = philly_full.set_index("job_id").loc["philly-2"]  # line 2: the first data row
    raw = pd.read_csv(philly_csv, nrows=1)
    assert first["duration"] == raw["duration"].iloc[0]
    assert first["num_gpus"] == raw["num_gpus"].iloc[0]


def test_full_file_loads_the_same_twice(philly_csv: Path) -> None:
    # (its load time is a figure of `make bench`, benchmarks/timings.py, not a test)
    first, second = load_trace("philly", philly_csv), load_trace("philly", philly_csv)
    assert len(first) == 82_247 and first.equals(second)


def test_virtual_cluster(philly_csv: Path) -> None:
    df = load_trace("philly", philly_csv, TraceOptions(virtual_cluster="6214e9"))
    assert len(df) == 41_226  # WORKLOAD-NOTES.md: the largest of 15 virtual clusters
    assert df.attrs["dropped"] == {"other_virtual_cluster": 82_247 - 41_226}
    assert df["submit_time"].min() == 0.0
    two = load_trace("philly", philly_csv, virtual_cluster=("6214e9", "11cb48"))
    assert len(two) == 41_226 + 16_091
    with pytest.raises(UnknownVirtualClusterError, match="unknown virtual cluster"):
        load_trace("philly", philly_csv, virtual_cluster="nope")


def test_max_gpus_counts_dropped(philly_csv: Path) -> None:
    df = load_trace("philly", philly_csv, max_gpus=8)
    assert df["num_gpus"].max() == 8
    # 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3 jobs need more than 8 GPUs.
    assert df.attrs["dropped"] == {"too_many_gpus": 289}
    assert len(df) == 82_247 - 289


def test_window_then_n_jobs(philly_csv: Path) -> None:
    day = 86_400.0
    raw = pd.read_csv(philly_csv)
    t = pd.to_datetime(raw["timestamp"])
    rel = (t - t.min()).dt.total_seconds()
    inside = ((rel >= 30 * day) & (rel < 32 * day)).sum()
    df = load_trace("philly", philly_csv, window_start_s=30 * day, window_end_s=32 * day)
    assert len(df) == inside
    assert df.attrs["dropped"]["outside_window"] == len(raw) - inside
    assert df["submit_time"].min() == 0.0 and df["submit_time"].max() < 2 * day

    cut = load_trace(
        "philly", philly_csv, window_start_s=30 * day, window_end_s=32 * day, start_job=100, n_jobs=500
    )
    assert len(cut) == 500
    assert cut.attrs["dropped"]["before_start_job"] == 100
    assert cut.attrs["dropped"]["after_n_jobs"] == inside - 600
    # The cut is rows 100..599 of the window, re-based to its own first job.
    expected = df["job_id"].iloc[100:600].tolist()
    assert cut["job_id"].tolist() == expected
    np.testing.assert_allclose(
        cut["submit_time"], df["submit_time"].iloc[100:600] - df["submit_time"].iloc[100]
    )
    # A job keeps its mix assignment whichever window it is cut from (same seed).
    merged = cut.merge(df, on="job_id", suffixes=("", "_w"))
    assert (merged["model"] == merged["model_w"]).all()
    assert (merged["batch_size"] == merged["batch_size_w"]).all()


def test_arrival_scale_halves_the_span(philly_csv: Path) -> None:
    base = load_trace("philly", philly_csv, n_jobs=2000)
    half = load_trace("philly", philly_csv, n_jobs=2000, arrival_scale=0.5)
    assert half["submit_time"].max() == pytest.approx(base["submit_time"].max() / 2, rel=1e-12)
    assert half["job_id"].tolist() == base["job_id"].tolist()
    np.testing.assert_allclose(np.diff(half["submit_time"]), np.diff(base["submit_time"]) / 2)
    assert half.attrs["arrival_factor"] == 0.5
    # Durations and GPU counts are untouched.
    assert (half["duration"] == base["duration"]).all()


def test_iadeep_arrival_rule(philly_csv: Path) -> None:
    base = load_trace("philly", philly_csv, n_jobs=300)
    rule = load_trace("philly", philly_csv, n_jobs=300, iadeep_arrival_rule=True, arrival_scale=3.0)
    np.testing.assert_allclose(
        np.diff(rule["submit_time"]), np.diff(base["submit_time"]) / 1000 * 3.0, rtol=1e-9, atol=1e-9
    )
    assert rule.attrs["arrival_factor"] == pytest.approx(0.003)


@pytest.mark.parametrize("target", [0.5, 1.0, 2.5])
def test_target_load_hits_the_target(philly_csv: Path, target: float) -> None:
    df = load_trace(
        "philly", philly_csv, virtual_cluster="6214e9", n_jobs=500, target_load=target, cluster_gpus=64
    )
    stats = offered_load(df, 64)
    assert stats.mean_load == pytest.approx(target, rel=0.01)
    assert df.attrs["offered_load"]["mean_load"] == pytest.approx(target, rel=0.01)
    assert df.attrs["offered_load"]["peak_load"] >= df.attrs["offered_load"]["mean_load"]


def test_peak_load_exceeds_mean_on_bursty_philly(philly_csv: Path) -> None:
    df = load_trace("philly", philly_csv, virtual_cluster="6214e9", max_gpus=1, n_jobs=500)
    s = offered_load(df, 64)
    # WORKLOAD-NOTES.md: bursts make the window mean understate the peak by several times.
    assert s.peak_load > 2 * s.mean_load


# -- bad rows --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_row", "column", "value", "problem"),
    [
        ("2017-10-09 06:30:00,abc,1,1.0,6214e9", "duration", "abc", "is not a number"),
        ("2017-10-09 06:30:00,-5,1,1.0,6214e9", "duration", "-5", "is negative"),
        ("2017-10-09 06:30:00,10,,1.0,6214e9", "num_gpus", None, "missing value"),
        ("2017-10-09 06:30:00,10,1.5,1.0,6214e9", "num_gpus", "1.5", "not a whole number"),
        ("2017-13-09 06:30:00,10,1,1.0,6214e9", "timestamp", "2017-13-09 06:30:00", "not a timestamp"),
        ("yesterday,10,1,1.0,6214e9", "timestamp", "yesterday", "not a timestamp"),
        ("2017-10-09 06:30:00,10,1,1.0,", "cluster", None, "missing value"),
    ],
)
def test_bad_row_names_file_line_and_column(
    tmp_path: Path, bad_row: str, column: str, value: str | None, problem: str
) -> None:
    p = write_csv(tmp_path, GOOD_ROWS[:2] + [bad_row] + GOOD_ROWS[2:])
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly", p)
    err = ei.value
    assert (err.path, err.line, err.column) == (str(p), 4, column)
    assert err.value == value
    msg = str(err)
    assert msg.startswith(f"{p}:4: column '{column}': ")
    assert problem in msg
    if value:
        assert repr(value) in msg


def test_first_bad_row_is_reported(tmp_path: Path) -> None:
    rows = GOOD_ROWS + ["2017-10-09 06:30:00,10,x,1.0,a", "2017-10-09 06:30:00,zz,1,1.0,a"]
    rows[1] = "2017-10-09 06:13:03,nan?,1,2951.0,6214e9"  # line 3: the earliest bad one
    p = write_csv(tmp_path, rows)
    with pytest.raises(TraceFormatError, match=r"philly\.csv:3: column 'duration': 'nan\?' is not a number"):
        load_trace("philly", p)


def test_wrong_field_count_is_a_bad_row(tmp_path: Path) -> None:
    p = write_csv(tmp_path, GOOD_ROWS[:3] + ["2017-10-09 06:30:00,10,1,1.0,abc,extra"] + GOOD_ROWS[3:])
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly", p)
    assert ei.value.line == 5 and ei.value.column is None
    df = load_trace("philly", p, skip_bad_rows=True)
    assert len(df) == 4 and df.attrs["skipped_rows"] == 1
    assert set(df["job_id"]) == {"philly-2", "philly-3", "philly-4", "philly-6"}


def test_skip_bad_rows_counts(tmp_path: Path) -> None:
    rows = GOOD_ROWS + [
        "2017-10-09 06:30:00,abc,1,1.0,6214e9",
        "not a time,10,1,1.0,6214e9",
        "2017-10-09 06:31:00,10,-2,1.0,6214e9",
        "",  # blank lines are ignored, not bad
        "2017-10-09 06:32:00,10,0,0.0,6214e9",  # needs no GPU: dropped, not bad
    ]
    p = write_csv(tmp_path, rows)
    df = load_trace("philly", p, skip_bad_rows=True)
    assert len(df) == 4
    assert df.attrs["skipped_rows"] == 3
    assert df.attrs["rows_read"] == 8
    assert df.attrs["dropped"] == {"zero_gpu": 1}
    # Line numbers stay right after the blank line: the zero-GPU row was line 11.
    p2 = write_csv(tmp_path, GOOD_ROWS + ["", "2017-10-09 06:32:00,oops,1,0.0,6214e9"], "b.csv")
    with pytest.raises(TraceFormatError, match=r"b\.csv:7: column 'duration'"):
        load_philly(p2)


def test_missing_column_and_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,gpus,cluster\n2017-10-09 06:30:00,1,1,a\n")
    with pytest.raises(TraceFormatError, match="column 'num_gpus': missing from the header") as ei:
        load_trace("philly", p)
    assert ei.value.line == 1
    p.write_text("")
    with pytest.raises(TraceFormatError, match="empty file"):
        load_trace("philly", p)


def test_zero_duration_is_kept_and_flagged_unless_dropped_on_request(tmp_path: Path) -> None:
    p = write_csv(tmp_path, GOOD_ROWS + ["2017-10-09 06:30:00,0,1,0,6214e9"])
    df = load_trace("philly", p)
    assert len(df) == 5 and df.attrs["dropped"] == {} and df.attrs["flagged"] == {"zero_duration": 1}
    assert (df["duration"] == 0).sum() == 1 and not df["censored"].any()
    df = load_trace("philly", p, drop_zero_duration=True)
    assert len(df) == 4 and df.attrs["dropped"] == {"zero_duration": 1} and df.attrs["flagged"] == {}


def test_huge_gpu_count_is_a_bad_value_not_an_overflow(tmp_path: Path) -> None:
    """Found by the property test: 9.2e18 GPUs overflowed int64 into a negative count."""
    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-05 10:30:00,3600,2,7200,vc1\n"
                 "2017-10-05 10:31:00,3600,9.22337205151981e+18,7200,vc1\n")
    with pytest.raises(TraceFormatError, match=r"philly.csv:3: column 'num_gpus': .*too large"):
        load_trace("philly", p)
    assert len(load_trace("philly", p, skip_bad_rows=True)) == 1
