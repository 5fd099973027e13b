"""Every DAG in ``dags/`` imports without errors and has the structure its docstring describes."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow

# dag id -> {task: upstream task ids}
STRUCTURE = {
    "iadeep_cluster_setup": {"namespaces": set(), "label_gpu_nodes": {"namespaces"}, "scheduler_profile": {"label_gpu_nodes"}},
    "iadeep_datasets": {"names": set(), "fetch": {"names"}, "summary": {"fetch"}},
    "iadeep_nfs": {"export_config": set(), "verify_export": {"export_config"}, "volume": {"verify_export"}},
    "iadeep_rollout": {"render": set(), "apply": {"render"}, "wait_ready": {"render", "apply"}},
    "iadeep_submit_trace": {"plan": set(), "submit": {"plan"}, "wait_jobs": {"submit"}, "collect": {"plan", "wait_jobs"}},
    "iadeep_experiment": {"fetch_datasets": set(), "build_workload": {"fetch_datasets"},
                          "simulate": {"fetch_datasets", "build_workload"},
                          "run_kubernetes": {"fetch_datasets", "build_workload"},
                          "report": {"fetch_datasets", "simulate", "run_kubernetes"}},
    "iadeep_regression": {"prepare": set(), "settings_of": {"prepare"}, "simulate_setting": {"prepare", "settings_of"},
                          "drawn_of": {"prepare"}, "simulate_drawn": {"prepare", "drawn_of"},
                          "check": {"prepare", "simulate_setting", "simulate_drawn"}},
    "iadeep_sweep": {"prepare": set(), "settings_of": {"prepare"}, "run_setting": {"prepare", "settings_of"},
                     "combine": {"prepare", "run_setting"}},
}
MAPPED = {("iadeep_datasets", "fetch"), ("iadeep_experiment", "simulate"), ("iadeep_regression", "simulate_setting"), ("iadeep_regression", "simulate_drawn"),
          ("iadeep_sweep", "run_setting")}


def test_no_import_errors_and_exactly_the_known_dags(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == set(STRUCTURE)


@pytest.mark.parametrize("dag_id", sorted(STRUCTURE))
def test_structure(dagbag, dag_id: str) -> None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    dag = dagbag.dags[dag_id]
    assert {t.task_id: set(t.upstream_task_ids) for t in dag.tasks} == STRUCTURE[dag_id]
    for t in dag.tasks:
        assert isinstance(t, MappedOperator) == ((dag_id, t.task_id) in MAPPED), t.task_id
    assert "iadeep" in dag.tags and dag.doc_md and dag_id in dag.doc_md
    assert dag.catchup is False
    for name in dag.params:
        assert dag.params.get_param(name).description, f"{dag_id}: param {name} is undocumented"


def test_only_the_regression_dag_is_scheduled_and_daily(dagbag) -> None:
    from datetime import timedelta

    scheduled = {d for d, dag in dagbag.dags.items() if dag.timetable.can_be_scheduled}
    assert scheduled == {"iadeep_regression"}
    dag = dagbag.dags["iadeep_regression"]
    # one run a day: consecutive run times of the scheduler's timetable are a day apart
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable

    timetable = coerce_to_core_timetable(dag.timetable)
    first = timetable._get_next(pendulum.datetime(2026, 3, 1, 5, tz="UTC"))
    assert timetable._get_next(first) - first == timedelta(days=1)
    assert dag.max_active_runs == 1


def test_submit_and_wait_are_deferrable_operators(dagbag) -> None:
    from iadeep.orchestration import JobsFinishedTrigger, SubmitTraceOperator, WaitJobsOperator

    dag = dagbag.dags["iadeep_submit_trace"]
    assert isinstance(dag.get_task("submit"), SubmitTraceOperator)
    assert isinstance(dag.get_task("wait_jobs"), WaitJobsOperator)
    # the trigger round-trips through its serialized form (the triggerer re-creates it from that)
    trig = JobsFinishedTrigger({"kubeconfig": "/k", "context": None, "namespace": "ns"}, "r1", 3, 100.0)
    path, kwargs = trig.serialize()
    module, _, cls = path.rpartition(".")
    import importlib

    again = getattr(importlib.import_module(module), cls)(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_rollout_components_param_lists_the_known_components(dagbag) -> None:
    from iadeep.orchestration import COMPONENTS

    schema = dagbag.dags["iadeep_rollout"].params.get_param("components").schema
    assert schema["items"]["enum"] == list(COMPONENTS)


def test_dag_files_stay_thin(dagbag) -> None:
    """DAG files import Airflow and iadeep's orchestration layer only at parse time (no pandas, simulator)."""
    import subprocess
    import sys

    from pathlib import Path

    DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
    code = ("import sys, runpy, glob\n"
            f"for f in sorted(glob.glob({str(DAGS_FOLDER)!r} + '/*.py')): runpy.run_path(f)\n"
            "bad = sorted(m for m in ('pandas', 'iadeep.sim', 'iadeep.experiment', 'kubernetes') if m in sys.modules)\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_sweep_combine_writes_guard_json_strictly_as_the_cli_does(tmp_path) -> None:
    """``combine`` (:func:`iadeep.experiment._sweep.write_sweep_files`) writes the guard figures as
    ``guard.json`` (the CLI's name) with the report's strict writer: an undefined figure (here over
    exclusive's undefined avg JCT) is ``null``, never ``NaN``."""
    import json
    import math

    from iadeep.experiment._sweep import write_sweep_files

    out = tmp_path / "sweep"
    rows = [{"setting": "0-1-0", "policy": "iadeep", "avg_jct_s": 10.0},
            {"setting": "0-1-0", "policy": "antman", "avg_jct_s": 20.0},
            {"setting": "0-1-0", "policy": "exclusive", "avg_jct_s": math.nan}]
    result = write_sweep_files(rows, out, "iadeep")
    assert not (out / "sweep.json").exists()

    def no_nan(token: str) -> float:
        raise AssertionError(f"guard.json holds {token}")

    guard = json.loads((out / "guard.json").read_text(), parse_constant=no_nan)
    assert guard["worst_vs_packing"] == 0.5
    assert guard["worst_vs_exclusive"] is None and "worst_vs_exclusive" in guard["null_reasons"]
    assert result["guard"] == guard
