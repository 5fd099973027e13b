"""Microsoft ITP (ElasticFlow raw traces): folder, single file, tarball, bad rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from iadeep.traces import TraceFormatError, UnknownVirtualClusterError, load_msitp, load_trace

TARBALL_SHA256 = "67398e1a89245c50ae0881bf997e6cda0c95f9f47980af5bc56d67998965669f"  # SOURCES.md


def test_folder_merges_all_clusters(itp_dir: Path) -> None:
    files = sorted(itp_dir.glob("cluster*.csv"))
    sizes = {f.stem: len(pd.read_csv(f)) for f in files}
    df = load_trace("ms-itp", itp_dir)
    assert len(df) == sum(sizes.values())
    assert df.attrs["rows_read"] == sum(sizes.values())
    prefixes = df["job_id"].str.split("-", n=1).str[0].value_counts().to_dict()
    assert prefixes == sizes
    assert set(df.attrs["files"]) == {f.name for f in files}
    assert df.attrs["sha256"] not in df.attrs["files"].values()  # a digest of the manifest
    assert df["num_gpus"].min() >= 1 and df["num_gpus"].max() == 64
    assert df["gpu_milli"].isna().all()
    # One shared clock: the first job is the earliest across clusters.
    first = min(pd.read_csv(f)["submission_time"].min() for f in files)
    assert df.attrs["trace_origin"].startswith("the start of collection")
    assert len(df[df["submit_time"] == 0]) >= 1
    last = max(pd.read_csv(f)["submission_time"].max() for f in files)
    assert df["submit_time"].max() == last - first


def test_virtual_cluster_selects_files(itp_dir: Path) -> None:
    df = load_msitp(itp_dir, virtual_cluster="cluster01")
    assert len(df) == 1_595
    assert df["job_id"].str.startswith("cluster01-").all()
    assert list(df.attrs["files"]) == ["cluster01.csv"]
    raw = pd.read_csv(itp_dir / "cluster01.csv")
    assert df["submit_time"].max() == raw["submission_time"].max() - raw["submission_time"].min()
    both = load_msitp(itp_dir, virtual_cluster=("cluster01", "cluster05"))
    assert len(both) == 1_595 + 3_629
    with pytest.raises(UnknownVirtualClusterError, match="unknown virtual cluster"):
        load_msitp(itp_dir, virtual_cluster="cluster99")


def test_single_csv_and_window(itp_dir: Path) -> None:
    one = load_msitp(itp_dir / "cluster01.csv")
    assert len(one) == 1_595 and one["job_id"].str.startswith("cluster01-").all()
    # ITP's clock starts at collection: cluster01's first job comes 1,932,025 s in.
    w = load_msitp(itp_dir / "cluster01.csv", window_start_s=3_000_000, window_end_s=4_000_000)
    raw = pd.read_csv(itp_dir / "cluster01.csv")
    inside = raw["submission_time"].between(3_000_000, 4_000_000, inclusive="left").sum()
    assert len(w) == inside and w.attrs["dropped"]["outside_window"] == 1_595 - inside


def test_tarball_has_all_ten_clusters(itp_tarball: Path) -> None:
    df = load_trace("ms-itp", itp_tarball)
    assert len(df) == 69_351  # the ElasticFlow README's total
    assert df["job_id"].str[:9].nunique() == 10
    assert df.attrs["sha256"] == TARBALL_SHA256
    gpu_hours = (df["duration"] * df["num_gpus"]).sum() / 3600
    assert gpu_hours == pytest.approx(1_632_719.7, abs=0.1)  # the ElasticFlow README's total
    c9 = load_trace("ms-itp", itp_tarball, virtual_cluster="cluster09")
    assert len(c9) == 11_134 and (c9["num_gpus"] == 1).all()


def _copy_folder(itp_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "raw"
    dst.mkdir()
    for name in ("cluster01.csv", "cluster05.csv"):
        shutil.copy(itp_dir / name, dst / name)
        (dst / name).chmod(0o644)
    return dst


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("submission_time", "12:00", "'12:00' is not a number"),
        ("duration", "-1", "'-1' is negative"),
        ("num_gpu", "two", "'two' is not a number"),
        ("job_id", "", "missing value"),
    ],
)
def test_bad_row_names_file_line_and_column(itp_dir, tmp_path, column, value, problem) -> None:
    folder = _copy_folder(itp_dir, tmp_path)
    target = folder / "cluster05.csv"
    df = pd.read_csv(target, dtype=str)
    df.loc[99, column] = value  # row 99 is on line 101
    df.to_csv(target, index=False)
    with pytest.raises(TraceFormatError) as ei:
        load_trace("ms-itp", folder)
    err = ei.value
    assert (err.path, err.line, err.column) == (str(target), 101, column)
    assert f"cluster05.csv:101: column '{column}': {problem}" in str(err)
    ok = load_trace("ms-itp", folder, skip_bad_rows=True)
    assert ok.attrs["skipped_rows"] == 1 and len(ok) == 1_595 + 3_629 - 1
    # A cluster not selected is not read, so its bad row does not matter.
    assert len(load_trace("ms-itp", folder, virtual_cluster="cluster01")) == 1_595


def test_duplicate_job_id(tmp_path: Path) -> None:
    p = tmp_path / "cluster07.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,1,10,1\nb,2,10,1\na,3,10,2\n")
    with pytest.raises(TraceFormatError, match=r"cluster07\.csv:4: column 'job_id': duplicate id 'a'"):
        load_trace("ms-itp", p)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="clusterNN.csv"):
        load_trace("ms-itp", tmp_path)


def test_every_rule_of_the_format(tmp_path: Path) -> None:
    """ITP's rules of the taxonomy: zero_gpu and zero_duration (one row per finished job: no censoring,
    no attempts; a job of 0 s is kept and flagged, dropped on request); wider jobs than the cluster are
    dropped as wider_than_cluster; --strict changes nothing."""
    p = tmp_path / "cluster02.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\nok,0,100,1\ncpu,5,100,0\nzero,6,0,2\nwide,7,50,16\n")
    for strict in (False, True):
        df = load_trace("ms-itp", p, strict=strict, cluster_gpus=8)
        assert df["job_id"].tolist() == ["cluster02-ok", "cluster02-zero"]
        assert df.attrs["dropped"] == {"zero_gpu": 1, "wider_than_cluster": 1}
        assert df.attrs["flagged"] == {"zero_duration": 1} and not df["censored"].any() and (df["gpu_spec"] == "").all()
        df = load_trace("ms-itp", p, strict=strict, cluster_gpus=8, drop_zero_duration=True)
        assert df["job_id"].tolist() == ["cluster02-ok"]
        assert df.attrs["dropped"] == {"zero_gpu": 1, "zero_duration": 1, "wider_than_cluster": 1}
        assert df.attrs["flagged"] == {}
