"""Philly's original cluster_job_log (JSON), on the hand-written fixture."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from iadeep.traces import TraceFormatError, TraceOptions, load_philly_json, load_trace

PREFIX = "application_1506638472019_000"

# The snapshot: the latest timestamp in the file, job 00009's last end_time (08:00:00), in s after
# the earliest submission (00:30:00); job 00009 is therefore censored (it ends at the snapshot).
SNAPSHOT = 27000.0
# jobid suffix -> (submit s after the earliest submission 00:30:00, duration s, num_gpus)
EXPECTED = {
    "08": (0.0, 3600.0, 1),  # earliest (listed 8th); "None" start_time attempt ignored
    "01": (1800.0, 3600.0, 1),
    "02": (2499.0, 74.0 + 3600.0, 8),  # two attempts
    "03": (5400.0, 7200.0, 16),  # two machines x 8 GPUs
    "04": (9000.0, 600.0, 2),  # Killed, but it ran
    "05": (12600.0, 1800.0 + SNAPSHOT - 14460.0, 4),  # last attempt still running at the snapshot: censored
    "07": (19800.0, SNAPSHOT - 19830.0, 1),  # only attempt still running: censored
    "09": (23400.0, 1800.0 + 1200.0, 4),  # max over attempts of 2 and 4 GPUs; ends at the snapshot: censored
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
    assert df.attrs["dropped"] == {"no_attempts": 1}
    assert df.attrs["flagged"] == {"censored": 3}
    assert sorted(df.loc[df["censored"], "job_id"].str[-2:]) == ["05", "07", "09"]
    assert df.attrs["skipped_rows"] == 0
    assert len(df.attrs["sha256"]) == 64
    assert "2017-10-07 00:30:00" in df.attrs["trace_origin"]


def test_virtual_cluster_and_max_gpus(philly_json: Path) -> None:
    df = load_philly_json(philly_json, TraceOptions(virtual_cluster="6214e9"))
    assert sorted(df["job_id"].str[-2:]) == ["03", "04", "08"]
    assert df.attrs["dropped"] == {"no_attempts": 1, "other_virtual_cluster": 5}
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
    assert len(load_trace("philly-json", p, skip_bad_rows=True)) == 8  # 9 jobs, one without attempts


def test_invalid_attempt_times_is_a_counted_quirk(tmp_path: Path, jobs: list[dict]) -> None:
    """The issue's input: the second job's only attempt ends before it starts."""
    good = copy.deepcopy(jobs[0])
    bad = copy.deepcopy(jobs[0])
    bad.update(jobid=PREFIX + "99")
    # on a later day than the good job's end, which would otherwise be the log's last timestamp (censored)
    bad["attempts"] = [{"start_time": "2017-10-08 10:30:00", "end_time": "2017-10-08 10:10:00",
                        "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]
    p = one_job_per_line(tmp_path, [good, bad])
    df = load_trace("philly-json", p)
    assert df["job_id"].tolist() == [good["jobid"]]
    assert df.attrs["dropped"] == {"invalid_attempt_times": 1}
    assert df.attrs["skipped_rows"] == 0
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly-json", p, strict=True)
    assert (ei.value.path, ei.value.line, ei.value.column) == (str(p), 3, "attempts[0].end_time")
    assert "'2017-10-08 10:10:00' is before the attempt's start_time" in str(ei.value)
    assert "invalid_attempt_times" in str(ei.value)
    # strict + skip_bad_rows: the quirk is a skipped bad row instead.
    df = load_trace("philly-json", p, strict=True, skip_bad_rows=True)
    assert len(df) == 1 and df.attrs["skipped_rows"] == 1 and df.attrs["dropped"] == {}


def test_every_quirk_of_the_format(tmp_path: Path, jobs: list[dict]) -> None:
    """One job per rule of the taxonomy that applies to philly-json (plus one clean job)."""
    base = copy.deepcopy(jobs[0])

    def job(suffix: str, attempts, **kw) -> dict:
        j = copy.deepcopy(base)
        j.update(jobid=PREFIX + suffix, attempts=attempts, **kw)
        return j

    def att(start, end, gpus=1) -> dict:
        return {"start_time": start, "end_time": end, "detail": [{"ip": "m1", "gpus": [f"gpu{g}" for g in range(gpus)]}]}

    day = "2017-10-07 "
    table = [
        job("90", [att(day + "01:00:00", day + "02:00:00")]),  # clean
        job("91", []),  # no_attempts
        job("92", [att(None, None), att("None", day + "03:00:00")]),  # never_scheduled
        job("93", [att(day + "05:00:00", day + "04:00:00")]),  # invalid_attempt_times
        job("94", [att(day + "01:00:00", None), att(day + "02:00:00", "")]),  # last one: censored
        job("95", [att(day + "01:00:00", None), att(None, day + "02:00:00")]),  # missing_attempt_times
        job("96", [att(day + "01:00:00", day + "02:00:00", gpus=0)]),  # zero_gpu
        job("97", [att(day + "01:00:00", day + "01:00:00")]),  # zero_duration: kept, flagged
    ]
    p = one_job_per_line(tmp_path, table)
    df = load_trace("philly-json", p)
    assert sorted(df["job_id"].str[-2:]) == ["90", "94", "97"]
    assert df.attrs["dropped"] == {"no_attempts": 1, "never_scheduled": 1, "invalid_attempt_times": 1,
                                   "missing_attempt_times": 1, "zero_gpu": 1}
    assert df.attrs["flagged"] == {"censored": 1, "zero_duration": 1}
    row = df.set_index(df["job_id"].str[-2:]).loc["94"]
    assert bool(row["censored"]) and row["duration"] == 3 * 3600.0  # 02:00 to the snapshot 05:00
    # strict: the first quirk in file order (job 91, line 3) is the error.
    with pytest.raises(TraceFormatError) as ei:
        load_trace("philly-json", p, strict=True)
    assert (ei.value.line, ei.value.column) == (3, "attempts")
    assert "no_attempts" in str(ei.value)


def test_jobs_at_the_edge_of_the_log(tmp_path: Path, jobs: list[dict]) -> None:
    """Still running when the log was taken (no end, or the log's last timestamp as end): kept as
    censored whatever their observed run time, 0 s included; a finished job of 0 s: kept and
    flagged, or dropped on request."""
    base = copy.deepcopy(jobs[0])
    day = "2017-10-07 "

    def job(suffix: str, *attempts: tuple[str | None, str | None]) -> dict:
        j = copy.deepcopy(base)
        j.update(jobid=PREFIX + suffix, submitted_time=day + "00:30:00",
                 attempts=[{"start_time": s, "end_time": e, "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}
                           for s, e in attempts])
        return j

    table = [
        job("81", (day + "01:00:00", day + "02:00:00")),  # finished: 1 h
        job("82", (day + "01:00:00", None)),  # running: to the snapshot 05:00
        job("83", (day + "01:00:00", day + "01:30:00"), (day + "05:00:00", None)),  # restarted at the snapshot
        job("84", (day + "05:00:00", "None")),  # started at the snapshot: 0 s observed
        job("85", (day + "03:00:00", day + "05:00:00")),  # ends at the log's last timestamp
        job("86", (day + "02:00:00", day + "02:00:00")),  # finished in 0 s
    ]
    p = one_job_per_line(tmp_path, table)
    for drop in (False, True):
        df = load_trace("philly-json", p, drop_zero_duration=drop).set_index("job_id")
        df.index = df.index.str[-2:]
        kept = ["81", "82", "83", "84", "85"] + ([] if drop else ["86"])
        assert sorted(df.index) == kept
        assert sorted(df.index[df["censored"]]) == ["82", "83", "84", "85"]
        assert df["duration"].to_dict() == {"81": 3600.0, "82": 4 * 3600.0, "83": 1800.0, "84": 0.0, "85": 2 * 3600.0,
                                            **({} if drop else {"86": 0.0})}
        assert df.attrs["dropped"] == ({"zero_duration": 1} if drop else {})
        assert df.attrs["flagged"] == ({"censored": 4} if drop else {"censored": 4, "zero_duration": 1})
    with pytest.raises(TraceFormatError) as ei:  # strict: the first job at the edge (line 3) is the error
        load_trace("philly-json", p, strict=True)
    assert (ei.value.line, ei.value.column) == (3, "attempts[0].end_time") and "censored" in str(ei.value)
