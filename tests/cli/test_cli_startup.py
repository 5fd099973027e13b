"""``iadeep --help`` and ``--version`` import nothing but the standard library; a sub-command loads
typer and its own module only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Packages no sub-command's listing needs: plotting, tables, the live services' clients and
#: servers, the tuner's search, the training workloads, and the settings and wire libraries.
HEAVY = ("matplotlib", "pandas", "numpy", "kubernetes", "airflow", "fastapi", "starlette", "uvicorn", "grpc",
         "google.protobuf", "optuna", "sqlalchemy", "torch", "httpx", "etcd3gw", "pydantic", "yaml", "msgspec",
         "psutil", "prometheus_client")


#: ``python -m iadeep.cli ARGS`` that prints, at exit, the names of every module it imported (one JSON line on stderr).
_RUN = ("import atexit, json, runpy, sys; atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr)); "
        "sys.argv[0] = 'iadeep'; runpy.run_module('iadeep.cli', run_name='__main__')")


def _imported(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``iadeep ARGS`` as ``python -m iadeep.cli`` does; return the process and the modules it imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, env=env, timeout=120)
    *rest, last = run.stderr.splitlines() or [""]
    return subprocess.CompletedProcess(run.args, run.returncode, run.stdout, "\n".join(rest)), set(json.loads(last))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["--version"], []], ids=["help", "version", "no-args"])
def test_the_root_command_imports_no_heavy_package(args):
    run, modules = _imported(*args)
    assert run.returncode == (2 if not args else 0), run.stderr[-2000:]
    assert "iadeep" in modules and "json" in modules  # the measurement itself works
    assert _heavy(modules) == []
    assert "typer" not in modules and "click" not in modules  # typer's import alone is about 5x a bare start
    assert not any(m.startswith("iadeep.") for m in modules), sorted(m for m in modules if m.startswith("iadeep."))


def test_the_typer_app_shows_the_same_root_help():
    """``main`` answers ``--help`` itself; the typer app (CliRunner, the CLI reference) prints the same text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "100"}
    fast = subprocess.run([sys.executable, "-m", "iadeep.cli", "--help"], capture_output=True, text=True, env=env,
                          timeout=120)
    code = "from iadeep._climain import run_cli; from iadeep.cli import app; run_cli(app, ['--help'])"
    full = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert fast.returncode == full.returncode == 0, full.stderr[-2000:]
    assert fast.stdout == full.stdout
    assert "Commands:" in fast.stdout and "--version" in fast.stdout


def test_help_lists_every_subcommand_with_its_help():
    from iadeep.cli import SUBCOMMANDS

    run, _ = _imported("--help")
    listed = [line.split()[0] for line in run.stdout.split("Commands:", 1)[1].splitlines() if line.startswith("  ") and
              not line.startswith("   ")]
    assert listed == list(SUBCOMMANDS)
    assert "Replay" not in run.stdout  # the experiment group's own commands are not loaded for the listing


def test_a_subcommand_loads_only_its_own_module():
    run, modules = _imported("experiment", "--help")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "run" in run.stdout and "sweep" in run.stdout
    assert "iadeep.experiment._cli" in modules
    assert not {"iadeep.extender._cli", "iadeep.dev._cli", "iadeep.tuner._cli", "iadeep.training._cli"} & modules


def test_version_is_the_package_metadata_and_pyproject_version():
    from importlib.metadata import version

    run, _ = _imported("--version")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert run.stdout.strip() == f"iadeep {version('iadeep')}" == f"iadeep {project['version']}"


def test_an_unknown_command_is_one_line_with_a_suggestion():
    run, _ = _imported("experimnt")
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == "iadeep: error: No such command 'experimnt'. Did you mean 'experiment'?"


def test_a_subcommand_whose_extra_is_missing_names_the_extra():
    """As in the light install (``make experiment``): fastapi absent, ``iadeep extender`` is one line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; sys.modules['fastapi'] = None; sys.argv[0] = 'iadeep'; import runpy; runpy.run_module('iadeep.cli', run_name='__main__')"
    run = subprocess.run([sys.executable, "-c", code, "extender", "--help"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip() == ("iadeep: error: `iadeep extender` needs the 'services' extra, which is not installed "
                                  "(no module 'fastapi'): pip install 'iadeep[services]' (in a checkout: make venv)")


@pytest.mark.parametrize("args", [
    ["experiment", "compare", "--jobs", "5"],
    ["experiment", "run", "--backend", "kubernetes", "--jobs", "5"],
])
def test_an_experiment_on_the_live_cluster_without_the_services_extra_names_the_extra(args, tmp_path):
    """As in the light install (``make experiment``, no msgspec): the live replay is one line
    naming the extra, not a traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; sys.modules['msgspec'] = None; sys.argv[0] = 'iadeep'; import runpy; runpy.run_module('iadeep.cli', run_name='__main__')"
    run = subprocess.run([sys.executable, "-c", code, *args, "--out", str(tmp_path / "out")], capture_output=True,
                         text=True, env=env, timeout=300)
    command = "iadeep " + " ".join(args[:2])
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"{command}: error: `{command}")
    assert ("needs the 'services' extra, which is not installed (no module 'msgspec'): pip install "
            "'iadeep[services]' (in a checkout: make venv)") in run.stderr
