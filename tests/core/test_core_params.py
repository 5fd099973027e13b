"""One validator for an experiment's parameters, shared by the CLI and the DAG; one-line CLI errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from iadeep.cli import main
from iadeep.experiment import ConfigError, ExperimentConfig


def test_whole_number_floats_become_ints_everywhere() -> None:
    cfg = ExperimentConfig.from_dict({"jobs": 60.0, "nodes": 2.0, "max_gpus": 4.0, "seed": 7.0})
    assert (cfg.jobs, cfg.nodes, cfg.max_gpus, cfg.seed) == (60, 2, 4, 7)
    assert all(type(v) is int for v in (cfg.jobs, cfg.nodes, cfg.max_gpus, cfg.seed))
    assert type(ExperimentConfig(gpus_per_node=8.0).gpus_per_node) is int  # direct construction too
    assert type(ExperimentConfig(gpu_mem_gib=16).gpu_mem_gib) is float
    again = ExperimentConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg  # what a later task reads back is the same typed config


@pytest.mark.parametrize(
    ("params", "parameter", "words"),
    [
        ({"jobs": 60.5}, "jobs", "expected an integer, got 60.5"),
        ({"nodes": True}, "nodes", "expected an integer, got True (bool)"),
        ({"nodes": "2"}, "nodes", "expected an integer, got '2' (str)"),
        ({"gpu_mem_gib": "24"}, "gpu_mem_gib", "expected a number"),
        ({"gpu_mem_gib": math.inf}, "gpu_mem_gib", "finite"),
        ({"backfill": 1}, "backfill", "expected true or false"),
        ({"policies": "iadeep"}, "policies", "expected a list"),
        ({"policies": ["iadeep", 3]}, "policies[1]", "expected a string"),
        ({"nodes": 0}, "nodes", "must be at least 1"),
        ({"jobs": -1}, "jobs", "must be at least 0"),
        ({"arrival_scale": 0}, "arrival_scale", "must be greater than 0"),
        ({"trace": "nope"}, "trace", "unknown trace 'nope'"),
        ({"jbos": 1}, "jbos", "unknown parameter(s) 'jbos'"),
    ],
)
def test_bad_values_name_the_parameter(params: dict, parameter: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict(params)
    assert info.value.parameter == parameter
    assert str(info.value).startswith(f"parameter {parameter!r}: ") and words in str(info.value)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["experiment", "run", "--jobs", "abc"], "'--jobs'"),
        (["experiment", "run", "--jobs", "1.5"], "'--jobs'"),
        (["experiment", "run", "--nodes", "0"], "'--nodes': must be at least 1"),
        (["experiment", "run", "--trace", "nope"], "'--trace': unknown trace 'nope'"),
        (["experiment", "run", "--policies", "iadeep,fifo-magic"], "'--policies': unknown policy 'fifo-magic'"),
        (["experiment", "sweep", "--loads", "1,x"], "'--loads': expected comma-separated floats"),
        (["experiment", "run", "--no-such-option"], "--no-such-option"),
        (["etcd", "start", "--port", "99999"], "'--port'"),
    ],
)
def test_cli_configuration_errors_are_one_line_on_stderr_with_exit_2(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("iadeep ") and ": error: " in err, err
    assert names in err and "Traceback" not in err + out


def test_bad_setting_from_the_environment_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IADEEP_EXTENDER_PORT", "eighty")
    assert main(["extender", "serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "port" in err and "'eighty'" in err, err


def test_console_script_prints_no_traceback(tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "iadeep.cli", "experiment", "run", "--jobs", "60.5"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "'--jobs'" in run.stderr and "Traceback" not in run.stderr
