"""Philly's original cluster_job_log (JSON), on the hand-written fixture."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from iadeep.traces import TraceFormatError, TraceOptions, load_philly_json, load_trace

PREFIX = "application_1506638472019_000"

# jobid suffix -> (submit s after the earliest submission 00:30:00, duration s, num_gpus)
EXPECTED = {
    "08": (0.0, 3600.0, 1),  # earliest (listed 8th); "None" start_time attempt ignored
    "01": (1800.0, 3600.0, 1),
    "02": (2499.0, 74.0 + 3600.0, 8),  # two attempts
    "03": (5400.0, 7200.0, 16),  # two machines x 8 GPUs
    "04": (9000.0, 600.0, 2),  # Killed, but it ran
    "05": (12600.0, 1800.0, 4),  # second attempt has end_time null
    "09": (23400.0, 1800.0 + 1200.0, 4),  # max over attempts of 2 and 4 GPUs
}


def test_fixture_loads_as_expected(philly_json: Path) -> None:
    df = load_trace("philly-json", philly_json)
    got = {
        jid[len(PREFIX):]: (s, d, g)
        for jid, s, d, g in zip(df["job_id"], df["submit_time"], df["duration"], df["num_gpus"])
    }
    assert got == EXPECTED
    assert list(df["job_id"].str[len(PREFIX):]) == list(EXPECTED)  # sorted by submission
    assert df.attrs["rows_read"] == 9
    assert df.attrs["dropped"] == {"incomplete": 2}  # no attempts; only attempt never ended
    assert df.attrs["skipped_rows"] == 0
    assert len(df.attrs["sha256"]) == 64
    assert "2017-10-07 00:30:00" in df.attrs["trace_origin"]


def test_virtual_cluster_and_max_gpus(philly_json: Path) -> None:
    df = load_philly_json(philly_json, TraceOptions(virtual_cluster="6214e9"))
    assert sorted(df["job_id"].str[-2:]) == ["03", "04", "08"]
    assert df.attrs["dropped"] == {"incomplete": 2, "other_virtual_cluster": 4}
    df = load_philly_json(philly_json, max_gpus=4)
    assert "03" not in set(df["job_id"].str[-2:]) and "02" not in set(df["job_id"].str[-2:])
    assert df.attrs["dropped"]["too_many_gpus"] == 2


def one_job_per_line(tmp_path: Path, jobs: list[dict], name: str = "cluster_job_log") -> Path:
    """Write jobs so that job k (0-based) starts on line k + 2."""
    p = tmp_path / name
    p.write_text("[\n" + ",\n".join(json.dumps(j) for j in jobs) + "\n]\n")
    return p


@pytest.fixture
def jobs(philly_json: Path) -> list[dict]:
    return json.loads(philly_json.read_text())


@pytest.mark.parametrize(
    ("k", "mutate", "column", "problem"),
    [
        (2, lambda j: j["attempts"][0].update(end_time="2017-10-07 25:99:00"), "attempts[0].end_time", "not a timestamp"),
        (3, lambda j: j["attempts"][0].update(end_time="2017-10-07 02:00:00"), "attempts[0].end_time", "before start_time"),
        (4, lambda j: j.update(submitted_time="soon"), "submitted_time", "'soon' is not a timestamp"),
        (1, lambda j: j.pop("jobid"), "jobid", "missing value"),
        (5, lambda j: j.update(jobid=PREFIX + "01"), "jobid", "duplicate id"),
        (6, lambda j: j.update(attempts={"start_time": None}), "attempts", "must be a list"),
        (7, lambda j: j["attempts"][1]["detail"][0].update(gpus="gpu3"), "attempts[1].detail[0].gpus", "must be a list"),
        (0, lambda j: j.pop("vc"), "vc", "missing value"),
    ],
)
def test_bad_job_names_file_line_and_key(tmp_path, jobs, k, mutate, column, problem) -> None:
    bad = copy.deepcopy(jobs)
    mutate(bad[k])
    p = one_job_per_line(tmp_path, bad)
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly-json", p)
    err = ei.value
    assert (err.path, err.line, err.column) == (str(p), k + 2, column)
    assert str(err).startswith(f"{p}:{k + 2}: column '{column}': ")
    assert problem in str(err)
    # Skipping drops exactly that job and counts it.
    df = load_trace("philly-json", p, skip_bad_rows=True)
    assert df.attrs["skipped_rows"] == 1
    assert df.attrs["rows_read"] == 9


def test_line_numbers_in_pretty_printed_file(tmp_path: Path, philly_json: Path) -> None:
    text = philly_json.read_text()
    bad = text.replace('"2017-10-07 03:10:10"', '"later"')  # job 00004's end_time
    p = tmp_path / "log.json"
    p.write_text(bad)
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly-json", p)
    job_start = text[: text.index('"application_1506638472019_00004"')].rindex("{")
    assert ei.value.line == text.count("\n", 0, job_start) + 1
    assert ei.value.column == "attempts[0].end_time"


def test_invalid_json_is_never_skipped(tmp_path: Path, jobs: list[dict]) -> None:
    p = one_job_per_line(tmp_path, jobs)
    lines = p.read_text().splitlines()
    lines[3] = lines[3][:-10]  # truncate job 2 (line 4)
    p.write_text("\n".join(lines))
    for skip in (False, True):
        with pytest.raises(TraceFormatError, match="invalid JSON") as ei:
            load_trace("philly-json", p, skip_bad_rows=skip)
        assert ei.value.line == 4
    p.write_text('{"jobid": "x"}')
    with pytest.raises(TraceFormatError, match="expected a JSON list"):
        load_trace("philly-json", p)


def test_not_an_object(tmp_path: Path, jobs: list[dict]) -> None:
    p = one_job_per_line(tmp_path, jobs[:3] + ["oops"] + jobs[3:])  # type: ignore[list-item]
    with pytest.raises(TraceFormatError, match=r":5: a job must be a JSON object"):
        load_trace("philly-json", p)
    assert len(load_trace("philly-json", p, skip_bad_rows=True)) == 7
