"""Alibaba openb pod list: GPU shares, dropped pods, bad rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iadeep.traces import TraceFormatError, load_openb, load_trace

OPENB_SHA256 = "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"  # SOURCES.md


def test_real_file(openb_csv: Path) -> None:
    df = load_trace("openb", openb_csv)
    raw = pd.read_csv(openb_csv)
    assert df.attrs["rows_read"] == len(raw) == 8_152
    gpu = raw[raw["num_gpu"] > 0]
    assert df.attrs["dropped"] == {
        "zero_gpu": int((raw["num_gpu"] == 0).sum()),  # CPU-only pods
        "incomplete": int(gpu["scheduled_time"].isna().sum()),  # never scheduled (Pending)
    }
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
    with pytest.raises(ValueError, match="no virtual clusters"):
        load_openb(openb_csv, virtual_cluster="x")


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
ROWS = [
    "p0,1000,1024,1,500,,LS,Running,0,100,10",  # line 2
    "p1,1000,1024,0,0,,LS,Running,5,100,10",  # CPU-only: zero_gpu
    "p2,1000,1024,2,1000,,LS,Running,20,200,30",
    "p3,1000,1024,1,1000,,BE,Pending,25,200,",  # never scheduled: incomplete
    "p4,1000,1024,1,250,,BE,Failed,30,40,40",  # zero run time: incomplete
    "p5,1000,1024,8,1000,,LS,Succeeded,40,1000,41",
]


def test_small_file(tmp_path: Path) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + "\n".join(ROWS) + "\n")
    df = load_trace("openb", p)
    assert df["job_id"].tolist() == ["p0", "p2", "p5"]
    np.testing.assert_array_equal(df["submit_time"], [0, 20, 40])
    np.testing.assert_array_equal(df["duration"], [90, 170, 959])
    np.testing.assert_array_equal(df["num_gpus"], [1, 2, 8])
    np.testing.assert_array_equal(df["gpu_milli"], [500, 1000, 1000])
    assert df.attrs["dropped"] == {"zero_gpu": 1, "incomplete": 2}


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
    assert df.attrs["skipped_rows"] == 1 and len(df) == 3
