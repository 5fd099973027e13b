"""The ``iadeep_experiment`` DAG: it parses, mirrors the CLI's options, and runs on the real Philly trace."""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

DAG_ID = "iadeep_experiment"
TASKS = {"fetch_datasets", "build_workload", "simulate", "run_kubernetes", "report"}
ALL_POLICIES = ["iadeep", "exclusive", "antman", "gandiva"]
SUMMARY_KEYS = {"avg_jct_s", "p99_jct_s", "makespan_s", "mean_slowdown"}


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags[DAG_ID]


def test_dagbag_imports_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert DAG_ID in dagbag.dags


def test_dag_shape(dag) -> None:
    assert {t.task_id for t in dag.tasks} == TASKS
    assert dag.schedule is None and not dag.timetable.can_be_scheduled
    assert dag.catchup is False
    assert {"iadeep", "experiment"} <= set(dag.tags)
    assert dag.doc_md and "airflow dags test iadeep_experiment" in dag.doc_md
    fetch, build, sim, report = (dag.get_task(t) for t in ("fetch_datasets", "build_workload", "simulate", "report"))
    assert build.upstream_task_ids == {"fetch_datasets"}
    assert sim.upstream_task_ids == {"fetch_datasets", "build_workload"}
    assert report.upstream_task_ids == {"fetch_datasets", "simulate", "run_kubernetes"}
    assert report.trigger_rule == "none_failed_min_one_success"  # one backend's branch is skipped
    assert dag.get_task("run_kubernetes").upstream_task_ids == {"fetch_datasets", "build_workload"}
    assert dag.params.get_param("backend").schema["enum"] == ["simulator", "kubernetes"]
    assert not fetch.upstream_task_ids


def test_simulate_is_mapped_over_the_policy_list(dag) -> None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    sim = dag.get_task("simulate")
    assert isinstance(sim, MappedOperator)
    mapped = sim.op_kwargs_expand_input.value  # TaskFlow: the kwargs given to .expand()
    assert set(mapped) == {"policy"}
    assert mapped["policy"].operator.task_id == "build_workload"
    assert not isinstance(dag.get_task("report"), MappedOperator)


def test_params_mirror_experiment_config_defaults(dag) -> None:
    from iadeep.experiment import TRACE_DATASETS, ExperimentConfig

    defaults = ExperimentConfig().to_dict()
    params = dag.params.dump()
    assert set(params) <= set(defaults), set(params) - set(defaults)
    # the params' defaults (some None = "the config's default rule") give the default config
    assert ExperimentConfig.from_dict(params) == ExperimentConfig()
    for name in params:
        assert dag.params.get_param(name).description, f"param {name} is undocumented"
    assert dag.params.get_param("trace").schema["enum"] == list(TRACE_DATASETS)


#: ``experiment run`` options about the CLI's own process, with no DAG counterpart: ``workers`` (the
#: policies' processes; the DAG runs each policy as its own mapped task).
CLI_ONLY = {"workers"}


def test_params_cover_every_cli_option(dag) -> None:
    from iadeep.experiment._cli import run_cmd

    cli_options = set(inspect.signature(run_cmd).parameters) - CLI_ONLY
    assert cli_options <= set(dag.params.dump()), cli_options - set(dag.params.dump())
    assert not CLI_ONLY & set(dag.params.dump())


@pytest.mark.parametrize("conf", [{"jobs": -1}, {"policies": []}, {"trace": "nope"}, {"gpu_type": "a100"},
                                  {"predictor": "psychic"}, {"nodes": 0}])
def test_params_reject_invalid_values(dag, conf: dict) -> None:
    from airflow.sdk.definitions.param import ParamValidationError

    params = copy.deepcopy(dag.params)
    with pytest.raises(ParamValidationError):
        params.update(conf)
        params.validate()


def test_config_from_params_resolves_out_and_cli_conventions(dag_module, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, dag) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(dag_module.ENV_RUNS_DIR, raising=False)
    params = dag.params.dump()
    cfg = dag_module.config_from_params({**params, "jobs": 0, "target_load": 0})
    assert cfg["out"] == str(tmp_path / "runs" / "latest")
    assert cfg["jobs"] is None and cfg["target_load"] is None
    assert cfg["policies"] == ALL_POLICIES

    monkeypatch.setenv(dag_module.ENV_RUNS_DIR, str(tmp_path / "base"))
    assert dag_module.config_from_params({**params, "out": "exp1"})["out"] == str(tmp_path / "base" / "exp1")
    assert dag_module.config_from_params({**params, "out": "/abs/exp"})["out"] == "/abs/exp"


@pytest.mark.parametrize(("conf", "match"), [
    ({"jbos": 10}, "parameter 'jbos': unknown parameter"),
    ({"policies": ["iadeep", "fifo-magic"]}, "parameter 'policies': unknown policy 'fifo-magic'"),
    ({"mix": "nope"}, "parameter 'mix': unknown mix 'nope'"),
    ({"trace": "philly-json"}, "parameter 'trace_file'"),
    ({"jobs": 60.5}, "parameter 'jobs': expected an integer, got 60.5"),
    ({"nodes": "2"}, "parameter 'nodes': expected an integer, got '2'"),
    ({"out": 5}, "parameter 'out': expected a string"),
    ({"window_start_s": 100, "window_end_s": 50}, "parameter 'window_end_s'"),
])
def test_config_from_params_rejects_bad_conf(dag_module, dag, conf: dict, match: str) -> None:
    from iadeep.experiment import ConfigError

    with pytest.raises(ConfigError, match=match):
        dag_module.config_from_params({**dag.params.dump(), **conf})


def test_whole_number_floats_pass_the_dag_schema_and_become_ints(dag_module, dag, tmp_path: Path) -> None:
    # The example of the field report: Airflow's JSON Schema accepts 60.0 as an "integer" ...
    params = copy.deepcopy(dag.params)
    params.update({"jobs": 60.0, "nodes": 2.0, "seed": 3.0})
    params.validate()
    # ... and the first task's validator hands every later task real ints.
    cfg = dag_module.config_from_params({**params.dump(), "out": str(tmp_path)})
    assert (cfg["jobs"], cfg["nodes"], cfg["seed"]) == (60, 2, 3)
    assert all(type(cfg[k]) is int for k in ("jobs", "nodes", "seed"))


def _task_instances(run_id: str) -> list:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id).all()
        return [(ti.task_id, ti.map_index, ti.rendered_map_index, str(ti.state)) for ti in tis]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_dag_run_on_real_philly_matches_run_experiment(dag, airflow_db, real_data, tmp_path: Path) -> None:
    from iadeep.experiment import ExperimentConfig, run_experiment

    out = tmp_path / "dag-run"
    # Whole-number floats (as a JSON conf may carry them) run like ints.
    conf = {"jobs": 60.0, "policies": ALL_POLICIES, "seed": 3.0, "nodes": 5.0, "out": str(out)}
    run = dag.test(run_conf=conf)
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state

    tis = _task_instances(run.run_id)
    assert all(state.endswith("success") for t, *_, state in tis if t != "run_kubernetes"), tis
    assert [state for t, *_, state in tis if t == "run_kubernetes"][0].endswith("skipped"), tis
    mapped = sorted((m, r) for t, m, r, _ in tis if t == "simulate")
    assert mapped == list(enumerate(ALL_POLICIES))

    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["policies"]) == ALL_POLICIES
    for name, metrics in summary["policies"].items():
        assert SUMMARY_KEYS <= set(metrics), name
        assert (out / f"jobs-{name}.csv").is_file() and (out / f"metrics-{name}.json").is_file()
    assert summary["trace"]["jobs"] == 60 and summary["trace"]["name"] == "philly"
    assert summary["config"]["out"] == str(out)
    for name in ("report.md", "jct_cdf.png", "normalised.png", "queue_length.png", "workload.csv"):
        assert (out / name).is_file(), name

    cli_out = tmp_path / "direct"
    direct = run_experiment(ExperimentConfig.from_dict({**conf, "out": str(cli_out)}), progress=False)
    assert summary["policies"] == direct["policies"]  # same seed -> identical numbers
    assert summary["trace"] == direct["trace"]
    assert {**summary["config"], "out": None} == {**direct["config"], "out": None}
    assert (out / "workload.csv").read_bytes() == (cli_out / "workload.csv").read_bytes()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_dag_run_with_a_typo_in_conf_fails_before_fetching(dag, airflow_db, tmp_path: Path) -> None:
    out = tmp_path / "typo"
    run = dag.test(run_conf={"jbos": 60, "out": str(out)})
    assert str(run.state) in ("failed", "DagRunState.FAILED"), run.state
    states = {t: state for t, _, _, state in _task_instances(run.run_id)}
    assert states["fetch_datasets"].endswith("failed"), states
    assert not any(s.endswith("success") for s in states.values()), states
    assert not out.exists()
