"""What the DAGs refuse before they work, on a real Airflow metadata DB (``dag.test()``, SQLite):
a second run into an ``out`` folder another run holds, a sweep conf with a key the sweep does not
use or a reference it does not run, a regression baseline of another experiment, and a missing
Connection (no retries). Each failure is read back from the task's log (``dag.test()`` writes it to
the test's output): it names what was wrong. Also what a sweep conf passes on: ``repeats`` reaches
every mapped setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]


def _states(dag_id: str, run_id: str) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).all()
        return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in tis}


def _fresh(dag_id: str):
    """The DAG parsed anew from its file: ``dag.test()`` leaves a run's conf in the DAG object's
    params, where the next run in the same process would take it as its defaults."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_FOLDER / f"{dag_id}.py")).dags[dag_id]


def _run(dag, capfd, **kwargs):
    """``dag.test(**kwargs)`` on the DAG parsed anew, and its task logs (stdout and stderr of the
    in-process run)."""
    capfd.readouterr()
    run = _fresh(dag.dag_id).test(**kwargs)
    out, err = capfd.readouterr()
    return run, out + err


def _tries(dag_id: str, run_id: str, task_id: str) -> int:
    """The task's ``try_number`` in the metadata DB (1: it was not retried)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                                                TaskInstance.task_id == task_id).one()
        return int(ti.try_number)


def _running_run(dag_id: str, run_id: str, state: str = "running") -> None:
    """A run of ``dag_id`` in the metadata DB, as the scheduler leaves one that is in progress."""
    import pendulum
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    with create_session() as session:
        session.add(DagRun(dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=state,
                           start_date=pendulum.now("UTC"), triggered_by=DagRunTriggeredByType.TEST))


def _set_state(dag_id: str, run_id: str, state: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).update({"state": state})


@pytest.mark.slow
def test_a_second_run_into_a_held_out_folder_fails_and_leaves_it_alone(dagbag, airflow_db, real_data, capfd,
                                                                      tmp_path: Path) -> None:
    """Two runs writing one folder would both report the files written last: the second fails at its
    first task naming the run that holds the folder; once that run has ended, the folder is taken over."""
    dag = dagbag.dags["iadeep_experiment"]
    out = tmp_path / "shared"
    out.mkdir()
    (out / "summary.json").write_text('{"from": "the other run"}')
    (out / ".iadeep-run.json").write_text(json.dumps({"dag_id": "iadeep_sweep", "run_id": "other-run"}))
    _running_run("iadeep_sweep", "other-run")

    run, log = _run(dag, capfd, run_conf={"jobs": 20, "policies": ["exclusive"], "out": str(out)})
    states = _states(dag.dag_id, run.run_id)
    assert states["fetch_datasets"] == "failed" and "success" not in states.values(), states
    assert "is in use by run 'other-run' of DAG 'iadeep_sweep'" in log and str(out) in log, log[-2000:]
    assert (out / "summary.json").read_text() == '{"from": "the other run"}'
    assert not (out / "workload.csv").exists()
    assert json.loads((out / ".iadeep-run.json").read_text())["run_id"] == "other-run"

    _set_state("iadeep_sweep", "other-run", "failed")  # it ended: its claim no longer holds the folder
    again, _ = _run(dag, capfd, run_conf={"jobs": 20, "policies": ["exclusive"], "out": str(out)})
    assert _states(dag.dag_id, again.run_id)["report"] == "success", _states(dag.dag_id, again.run_id)
    claim = json.loads((out / ".iadeep-run.json").read_text())
    assert claim["dag_id"] == "iadeep_experiment" and claim["run_id"] == again.run_id
    assert json.loads((out / "summary.json").read_text())["trace"]["jobs"] == 20


@pytest.mark.parametrize("conf, message", [
    ({"seed": 3}, "parameters ['seed'] are not used by iadeep_sweep"),
    ({"reference": "gandiva", "policies": ["iadeep", "antman"]},
     "parameter 'reference': 'gandiva' is not among the policies run (iadeep, antman)"),
    ({"mix": "imaginary"}, "'mix'"),
    # refused in prepare, not in the mapped tasks after a retry
    ({"start_jobs": [99999999]}, "parameter 'start_jobs': the window starting at job 99999999 cannot be built"),
    ({"throughputs_file": "/nonexistent/table.json"}, "parameter 'throughputs_file': /nonexistent/table.json: no such file"),
])
def test_sweep_refuses_a_conf_it_would_misread_before_any_work(dagbag, airflow_db, capfd, tmp_path: Path,
                                                              conf: dict, message: str) -> None:
    dag = dagbag.dags["iadeep_sweep"]
    assert dag.default_args["retries"] == 1
    out = tmp_path / "sweep"
    run, log = _run(dag, capfd, run_conf={"start_jobs": [40000], "loads": [1.0], "seeds": [0], "jobs": 20,
                                          "out": str(out), **conf})
    states = _states(dag.dag_id, run.run_id)
    assert states["prepare"] == "failed" and "success" not in states.values(), states
    assert message in log, log[-2000:]
    assert _tries(dag.dag_id, run.run_id, "prepare") == 1  # bad input is not retried
    assert not out.exists()


def test_the_sweep_runs_each_setting_as_many_times_as_its_conf_asks(dagbag, airflow_db, capfd, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "sweep"
    run, log = _run(dagbag.dags["iadeep_sweep"], capfd,
                    run_conf={"start_jobs": [40000], "loads": [2.0], "seeds": [0], "jobs": 40, "queue": "kube",
                              "policies": ["iadeep", "gandiva"], "repeats": 3, "out": str(out)})
    states = _states("iadeep_sweep", run.run_id)
    assert set(states.values()) == {"success"}, (states, log[-2000:])
    df = pd.read_csv(out / "sweep.csv")
    assert (df["repeats"] == 3).all()
    assert ((df["avg_jct_lo_s"] <= df["avg_jct_s"] + 1e-6) & (df["avg_jct_s"] <= df["avg_jct_hi_s"] + 1e-6)).all()
    assert json.loads((out / "guard.json").read_text())["repeats"] == 3
    for policy in ("iadeep", "gandiva"):
        assert (out / "40000-2-0" / "noise-2" / f"jobs-{policy}.csv").is_file()


@pytest.mark.slow
def test_regression_refuses_a_baseline_of_another_experiment_and_a_trial_never_becomes_one(
        dagbag, airflow_db, real_data, capfd, tmp_path: Path) -> None:
    dag = dagbag.dags["iadeep_regression"]
    directory = tmp_path / "regression"
    conf = {"start_jobs": [40000], "seeds": [0], "jobs": 20, "target_load": 1.5, "policies": ["iadeep", "exclusive"],
            "regression_dir": str(directory)}

    # a trial with changed parameters and no baseline yet: compared with nothing, recorded, not the baseline
    trial, _ = _run(dag, capfd, run_conf={**conf, "policy_options": {"iadeep": {"colocation_limit": 1}}})
    assert _states(dag.dag_id, trial.run_id)["check"] == "success"
    assert not (directory / "baseline.json").exists()
    history = (directory / "history.csv").read_text()
    assert '"{""colocation_limit"": 1}"' in history

    first, _ = _run(dag, capfd, run_conf=conf)  # the defaults: the baseline
    assert _states(dag.dag_id, first.run_id)["check"] == "success"
    baseline = json.loads((directory / "baseline.json").read_text())
    assert baseline["run_id"] == first.run_id and baseline["spec"]["jobs"] == 20

    other, log = _run(dag, capfd, run_conf={**conf, "jobs": 30})  # same setting name, another workload
    states = _states(dag.dag_id, other.run_id)
    assert states["prepare"] == "failed" and "success" not in states.values(), states
    assert "measured another experiment: jobs 20 (this run: 30)" in log, log[-2000:]
    moved, log = _run(dag, capfd, run_conf={**conf, "start_jobs": [60000]})  # nothing in common to compare
    assert "has none of this run's settings and policies (60000-1.5-0/exclusive" in log, log[-2000:]
    assert json.loads((directory / "baseline.json").read_text()) == baseline

    for bad, message in [({"policies": ["antman"]}, "has none of this run's settings and policies"),
                         ({"policies": ["nope"]}, "policies: unknown ['nope']"),
                         ({"policy_options": {"iadeep": {"colocation_limit": "two"}}},
                          "policy_options['iadeep'] = {\"colocation_limit\": \"two\"}: "),
                         ({"policy_options": {"gandiva": {"colocation_limit": 1}}},
                          "policy_options: 'gandiva' is not among the policies simulated (iadeep, exclusive)"),
                         ({"policy_options": {"iadeep": {"colocation_limt": 1}}},
                          "policy_options['iadeep']: unknown arguments ['colocation_limt']"),
                         ({"policy_options": {"iadeep": {"colocation_limit": 1}}, "update_baseline": True},
                          "update_baseline with policy_options")]:
        run, log = _run(dag, capfd, run_conf={**conf, **bad})
        assert _states(dag.dag_id, run.run_id)["prepare"] == "failed"
        assert message in log, message
    (directory / "baseline.json").write_text('{"run_id": "x", "spec": {"jobs": 20')  # cut short
    run, log = _run(dag, capfd, run_conf=conf)
    assert _states(dag.dag_id, run.run_id)["prepare"] == "failed"
    assert f"{directory / 'baseline.json'}: not JSON" in log, log[-2000:]


def test_a_missing_connection_fails_at_once_without_retries(dagbag, airflow_db, capfd, monkeypatch) -> None:
    """``iadeep_cluster_setup`` has two retries for a cluster that is briefly away; a Connection that
    is not defined cannot appear by retrying (it took 10.5 min to fail before)."""
    monkeypatch.delenv("AIRFLOW_CONN_IADEEP_CLUSTER", raising=False)
    dag = dagbag.dags["iadeep_cluster_setup"]
    assert dag.default_args["retries"] == 2
    run, log = _run(dag, capfd)
    states = _states(dag.dag_id, run.run_id)
    assert states["namespaces"] == "failed" and "success" not in states.values(), states
    assert "Airflow Connection 'iadeep_cluster' is not defined" in log and "AIRFLOW_CONN_IADEEP_CLUSTER" in log, log[-2000:]
    assert _tries(dag.dag_id, run.run_id, "namespaces") == 1


@pytest.mark.slow
def test_experiment_reads_the_variables_folders(dagbag, airflow_db, real_data, monkeypatch, tmp_path: Path) -> None:
    """The dataset folder ``iadeep_datasets`` fetches into (Variable ``iadeep_dataset_dir``) is the one
    the experiment reads, and a relative ``out`` lands under Variable ``iadeep_runs_dir``: both win
    over the environment's ``IADEEP_CACHE_DIR`` / ``IADEEP_RUNS_DIR`` (the Variables were ignored before)."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("IADEEP_RUNS_DIR", str(tmp_path / "env-runs"))
    monkeypatch.setenv("AIRFLOW_VAR_IADEEP_DATASET_DIR", str(tmp_path / "var-cache"))
    monkeypatch.setenv("AIRFLOW_VAR_IADEEP_RUNS_DIR", str(tmp_path / "var-runs"))
    dag = dagbag.dags["iadeep_experiment"]
    run = _fresh(dag.dag_id).test(run_conf={"jobs": 20, "policies": ["exclusive"], "out": "rel/run"})
    assert _states(dag.dag_id, run.run_id)["report"] == "success"
    summary = json.loads((tmp_path / "var-runs" / "rel" / "run" / "summary.json").read_text())
    assert summary["trace"]["jobs"] == 20
    assert (tmp_path / "var-cache" / "datasets" / "philly").is_dir()
    assert (tmp_path / "var-cache" / "datasets" / "gavel-throughputs").is_dir()
    assert not (tmp_path / "env-cache").exists() and not (tmp_path / "env-runs").exists()


def test_a_missing_cluster_file_fails_the_first_task_naming_it_and_leaves_no_folder(dagbag, airflow_db, capfd,
                                                                                    tmp_path: Path) -> None:
    """It was a bare ``FileNotFoundError`` from a later task, after the folder had been made."""
    dag = dagbag.dags["iadeep_experiment"]
    out = tmp_path / "never"
    run, log = _run(dag, capfd, run_conf={"jobs": 20, "cluster_file": str(tmp_path / "nodes.yaml"), "out": str(out)})
    states = _states(dag.dag_id, run.run_id)
    assert states["fetch_datasets"] == "failed" and "success" not in states.values(), states
    assert f"parameter 'cluster_file': {tmp_path / 'nodes.yaml'}: no such file" in log, log[-2000:]
    assert not out.exists()
