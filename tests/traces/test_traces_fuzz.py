"""Property-based fuzzing of every trace format's rows (hypothesis, a bounded number of examples
each): whatever a row holds, the loader returns a valid job table (bad rows skipped and counted
with ``skip_bad_rows``) or raises :class:`TraceFormatError` naming the file and a line of it;
never another exception."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iadeep.traces import TraceFormatError, TraceOptions, load_trace, validate_job_table

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

junk = st.sampled_from(["", " ", "abc", "-1", "0", "1e999", "NaN", "inf", "-inf", "1.5", "12345678901234567890",
                        "2017-13-45 99:99:99", "None", "null", "\u00e9", "1,2", "\"", "0x10"])
numbers = st.integers(-10, 10**7).map(str) | st.floats(-1e6, 1e9, allow_nan=False).map(lambda f: f"{f:.3f}")
cells = numbers | junk
dates = st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S")) | junk
names = st.text("abcdef0123456789-", min_size=0, max_size=12)
skip = st.booleans()


def _csv(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return out.getvalue()


def _check(fmt: str, path: Path, n_lines: int, skip_bad_rows: bool) -> None:
    try:
        df = load_trace(fmt, path, TraceOptions(skip_bad_rows=skip_bad_rows))
    except TraceFormatError as exc:
        assert str(exc).startswith(str(path)), exc
        assert exc.line is None or 1 <= exc.line <= n_lines, (exc.line, n_lines, exc)
        return
    except ValueError as exc:  # every row was bad (and skipped) or filtered out: said, naming the file
        assert "no job left" in str(exc) and str(path) in str(exc), exc
        return
    validate_job_table(df)
    assert (df["num_gpus"] >= 1).all() and (df["duration"] >= 0).all() and (df["submit_time"] >= 0).all()


philly_rows = st.lists(st.tuples(dates, cells, cells, cells, names).map(list), min_size=1, max_size=12)


@FUZZ
@given(rows=philly_rows, skip_bad_rows=skip)
def test_philly_rows(rows: list[list[str]], skip_bad_rows: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "philly.csv"
        path.write_text(_csv(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"], rows), encoding="utf-8")
        _check("philly", path, len(rows) + 1, skip_bad_rows)


itp_rows = st.lists(st.tuples(names, cells, cells, cells).map(list), min_size=1, max_size=12)


@FUZZ
@given(rows=itp_rows, skip_bad_rows=skip)
def test_msitp_rows(rows: list[list[str]], skip_bad_rows: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster01.csv"
        path.write_text(_csv(["job_id", "submission_time", "duration", "num_gpu"], rows), encoding="utf-8")
        _check("ms-itp", path, len(rows) + 1, skip_bad_rows)


openb_rows = st.lists(
    st.tuples(names, cells, cells, cells, cells, st.sampled_from(["", "V100", "A100|T4", "x"]),
              st.sampled_from(["LS", "BE", "", "??"]),
              st.sampled_from(["Running", "Succeeded", "Failed", "Pending", ""]), cells, cells, cells).map(list),
    min_size=1, max_size=12)


@FUZZ
@given(rows=openb_rows, skip_bad_rows=skip)
def test_openb_rows(rows: list[list[str]], skip_bad_rows: bool) -> None:
    header = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
              "creation_time", "deletion_time", "scheduled_time"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "openb_pod_list_default.csv"
        path.write_text(_csv(header, rows), encoding="utf-8")
        _check("openb", path, len(rows) + 1, skip_bad_rows)


json_scalar = st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | dates | names
attempt = st.fixed_dictionaries(
    {"start_time": json_scalar, "end_time": json_scalar},
    optional={"detail": st.lists(st.fixed_dictionaries({"ip": names, "gpus": st.lists(names, max_size=9)}) | json_scalar,
                                 max_size=3)})
job = st.fixed_dictionaries(
    {"status": st.sampled_from(["Pass", "Failed", "Killed", "", "Running"]) | json_scalar,
     "vc": names | json_scalar, "jobid": names | json_scalar, "submitted_time": json_scalar},
    optional={"attempts": st.lists(attempt, max_size=3) | json_scalar, "user": json_scalar})


@FUZZ
@given(jobs=st.lists(job, min_size=1, max_size=8), skip_bad_rows=skip)
def test_philly_json_jobs(jobs: list[dict], skip_bad_rows: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster_job_log"
        text = json.dumps(jobs, indent=1)
        path.write_text(text, encoding="utf-8")
        _check("philly-json", path, text.count("\n") + 1, skip_bad_rows)


@pytest.mark.parametrize("fmt", ["philly", "ms-itp", "openb", "philly-json"])
def test_garbage_files(fmt: str, tmp_path: Path) -> None:
    for i, content in enumerate([b"", b"\xff\xfe\x00garbage", b"a,b\n1,2\n", b"{\"not\": \"a list\"}", b"[1, 2, 3]"]):
        path = tmp_path / f"f{i}.{'csv' if fmt != 'philly-json' else 'json'}"
        path.write_bytes(content)
        _check(fmt, path, content.count(b"\n") + 1, False)


def test_integer_past_float_precision_is_a_bad_row(tmp_path: Path) -> None:
    """Found by the fuzzing above: 12345678901234567890 GPUs overflowed the int64 cast."""
    path = tmp_path / "philly.csv"
    path.write_text(_csv(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
                         [["2017-10-09 07:01:55", "66.0", "1", "66.0", "a"],
                          ["2017-10-09 07:02:55", "60.0", "12345678901234567890", "60.0", "a"]]), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"philly.csv:3: column 'num_gpus': '12345678901234567890' is too large"):
        load_trace("philly", path)
    assert load_trace("philly", path, TraceOptions(skip_bad_rows=True)).attrs["skipped_rows"] == 1
