"""Alibaba openb pod list: GPU shares, dropped pods, bad rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iadeep.traces import TraceFormatError, UnknownVirtualClusterError, load_openb, load_trace

OPENB_SHA256 = "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"  # SOURCES.md


def test_real_file(openb_csv: Path) -> None:
    df = load_trace("openb", openb_csv)
    raw = pd.read_csv(openb_csv)
    assert df.attrs["rows_read"] == len(raw) == 8_152
    gpu = raw[raw["num_gpu"] > 0]
    assert df.attrs["dropped"] == {
        "zero_gpu": int((raw["num_gpu"] == 0).sum()),  # CPU-only pods
        "never_scheduled": int(gpu["scheduled_time"].isna().sum()),  # Pending
    }
    # Pods Running at the snapshot (the latest deletion_time) are censored, not finished.
    snap = raw["deletion_time"].max()
    running = gpu[(gpu["pod_phase"] == "Running") & (gpu["deletion_time"] == snap)]
    assert len(running) > 0
    assert df.attrs["flagged"] == {"censored": len(running)}
    assert sorted(df.loc[df["censored"], "job_id"]) == sorted(running["name"])
    assert len(df) == len(gpu) - gpu["scheduled_time"].isna().sum()
    assert df.attrs["sha256"] == OPENB_SHA256
    # gpu_milli is the per-GPU share: fractional only for single-GPU pods.
    assert ((df["gpu_milli"] > 0) & (df["gpu_milli"] <= 1000)).all()
    assert (df.loc[df["num_gpus"] > 1, "gpu_milli"] == 1000).all()
    assert (df["gpu_milli"] < 1000).sum() > 1000  # many pods share a GPU
    # duration = deletion - scheduled; submit = creation, re-based (the first pod is at 0).
    row = df.set_index("job_id").loc["openb-pod-0001"]
    src = raw.set_index("name").loc["openb-pod-0001"]
    assert row["duration"] == src["deletion_time"] - src["scheduled_time"]
    assert row["submit_time"] == src["creation_time"] - raw.loc[raw["num_gpu"] > 0, "creation_time"].min()
    assert row["gpu_milli"] == 460.0


def test_no_virtual_clusters(openb_csv: Path) -> None:
    with pytest.raises(UnknownVirtualClusterError, match="no virtual clusters"):
        load_openb(openb_csv, virtual_cluster="x")


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
ROWS = [
    "p0,1000,1024,1,500,,LS,Running,0,100,10",  # line 2
    "p1,1000,1024,0,0,,LS,Running,5,100,10",  # CPU-only: zero_gpu
    "p2,1000,1024,2,1000,,LS,Running,20,200,30",
    "p3,1000,1024,1,1000,,BE,Pending,25,200,",  # never scheduled: incomplete
    "p4,1000,1024,1,250,,BE,Failed,30,40,40",  # zero run time: a job that completes at once
    "p5,1000,1024,8,1000,,LS,Succeeded,40,1000,41",
]


def test_small_file(tmp_path: Path) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + "\n".join(ROWS) + "\n")
    df = load_trace("openb", p)
    assert df["job_id"].tolist() == ["p0", "p2", "p4", "p5"]
    np.testing.assert_array_equal(df["submit_time"], [0, 20, 30, 40])
    np.testing.assert_array_equal(df["duration"], [90, 170, 0, 959])
    np.testing.assert_array_equal(df["num_gpus"], [1, 2, 1, 8])
    np.testing.assert_array_equal(df["gpu_milli"], [500, 1000, 250, 1000])
    assert df.attrs["dropped"] == {"zero_gpu": 1, "never_scheduled": 1}
    assert not df["censored"].any() and df.attrs["flagged"] == {"zero_duration": 1}
    df = load_trace("openb", p, drop_zero_duration=True)
    assert df["job_id"].tolist() == ["p0", "p2", "p5"]
    assert df.attrs["dropped"] == {"zero_gpu": 1, "never_scheduled": 1, "zero_duration": 1}


@pytest.mark.parametrize(
    ("row", "column", "problem"),
    [
        ("p9,1000,1024,1,500,,LS,Running,abc,100,10", "creation_time", "'abc' is not a number"),
        ("p9,1000,1024,1,500,,LS,Running,0,100,-10", "scheduled_time", "'-10' is negative"),
        ("p9,1000,1024,1,1500,,LS,Running,0,100,10", "gpu_milli", "'1500' exceeds 1000"),
        ("p9,1000,1024,1,0,,LS,Running,0,100,10", "gpu_milli", "'0' must be > 0 for a pod that requests GPUs"),
        ("p9,1000,1024,0.5,500,,LS,Running,0,100,10", "num_gpu", "'0.5' is not a whole number"),
        ("p0,1000,1024,1,500,,LS,Running,0,100,10", "name", "duplicate id 'p0'"),
    ],
)
def test_bad_row(tmp_path: Path, row: str, column: str, problem: str) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + "\n".join(ROWS[:3] + [row] + ROWS[3:]) + "\n")
    with pytest.raises(TraceFormatError) as ei:
        load_trace("openb", p)
    assert (ei.value.path, ei.value.line, ei.value.column) == (str(p), 5, column)
    assert f"pods.csv:5: column '{column}': {problem}" in str(ei.value)
    df = load_trace("openb", p, skip_bad_rows=True)
    assert df.attrs["skipped_rows"] == 1 and len(df) == 4


QUIRKS = [
    "q0,1000,1024,1,500,,LS,Succeeded,0,100,10",  # line 2: clean
    "q1,1000,1024,0,0,,LS,Running,5,900,10",  # zero_gpu (even at the snapshot)
    "q2,1000,1024,1,1000,,BE,Pending,25,200,",  # never_scheduled
    "q3,1000,1024,1,250,,BE,Failed,30,40,50",  # invalid_attempt_times: deleted before scheduled
    "q4,1000,1024,2,500,V100M16|V100M32,LS,Running,40,900,100",  # censored + inconsistent_gpu_milli
    "q5,1000,1024,1,300,,LS,Failed,50,60,60",  # zero_duration: kept, flagged
    "q6,1000,1024,1,300,T4,LS,Running,60,800,70",  # Running, but deleted before the snapshot: finished
]


def test_every_quirk_of_the_format(tmp_path: Path) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + "\n".join(QUIRKS) + "\n")
    df = load_trace("openb", p).set_index("job_id")
    assert sorted(df.index) == ["q0", "q4", "q5", "q6"]
    assert df.attrs["dropped"] == {"zero_gpu": 1, "never_scheduled": 1, "invalid_attempt_times": 1}
    assert df.attrs["flagged"] == {"censored": 1, "inconsistent_gpu_milli": 1, "zero_duration": 1}
    assert bool(df.loc["q4", "censored"]) and df.loc["q4", "duration"] == 900 - 100
    assert df.loc["q4", "gpu_milli"] == 1000 and df.loc["q4", "gpu_spec"] == "V100M16|V100M32"
    assert not df.loc["q6", "censored"] and df.loc["q6", "gpu_spec"] == "T4"
    # strict: the first quirk (q2's empty scheduled_time, line 4) is an error naming the field.
    with pytest.raises(TraceFormatError) as ei:
        load_trace("openb", p, strict=True)
    assert (ei.value.line, ei.value.column) == (4, "scheduled_time") and "never_scheduled" in str(ei.value)
    one = tmp_path / "one.csv"
    one.write_text(HEADER + QUIRKS[0] + "\n" + QUIRKS[4] + "\n")
    with pytest.raises(TraceFormatError) as ei:
        load_trace("openb", one, strict=True)
    assert ei.value.line == 3 and ei.value.column in ("deletion_time", "gpu_milli")


def test_missing_deletion_time_is_censored_at_the_snapshot(tmp_path: Path) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + "a,1,1,1,500,,LS,Running,0,,10\nb,1,1,1,500,,LS,Succeeded,5,400,20\n")
    df = load_trace("openb", p).set_index("job_id")
    assert bool(df.loc["a", "censored"]) and df.loc["a", "duration"] == 400 - 10
