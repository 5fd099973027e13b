"""``iadeep experiment run --workers N``: the policies in N processes write the files one process writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from iadeep._climain import run_cli
from iadeep.cli import app

#: Fields that measure the run rather than its result (``metrics-<policy>.json``: the loop's wall time).
WALL_CLOCK = {"wall_s"}


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def _without_wall_clock(data: bytes) -> dict:
    return {k: v for k, v in json.loads(data).items() if k not in WALL_CLOCK}


def test_parallel_policies_write_what_the_serial_run_writes(tmp_path, dataset_cache, monkeypatch, capsys):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path / "run"
    # the same --out both times: summary.json records the configuration, the output folder included
    args = ["experiment", "run", "--jobs", "120", "--target-load", "2", "--out", str(out)]
    assert run_cli(app, [*args, "--workers", "1"]) == 0
    serial = _files(out)
    shutil.rmtree(out)
    assert run_cli(app, [*args, "--workers", "3"]) == 0
    parallel = _files(out)
    assert "iadeep" in capsys.readouterr().out  # the progress bars and the table were shown

    assert sorted(parallel) == sorted(serial)
    assert {"summary.json", "report.md", "jct_cdf.png", "jobs-gandiva.csv", "timeline-antman.csv"} <= set(serial)
    for name, data in serial.items():
        if name.startswith("metrics-"):
            assert _without_wall_clock(parallel[name]) == _without_wall_clock(data), name
            assert set(json.loads(data)) - set(_without_wall_clock(data)) == WALL_CLOCK  # the only one
        else:
            assert parallel[name] == data, name


def test_workers_below_one_is_a_usage_error(tmp_path, capsys):
    assert run_cli(app, ["experiment", "run", "--workers", "0", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("iadeep experiment run: error: Invalid value for '--workers'")
    assert not (tmp_path / "r").exists()
