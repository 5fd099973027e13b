"""Airflow DAG ``iadeep_sweep``: ``iadeep experiment sweep`` as mapped tasks (windows x loads x seeds).

::

    prepare -> run_setting[start x load x seed] (mapped) -> combine

Each mapped instance simulates every policy on one setting (``repeats`` times, each run with its
own measurement noise: :func:`iadeep.experiment.run_setting`) and writes its files under
``<out>/<start>-<load>-<seed>/``; with the Celery or Kubernetes executor the settings fan out
over the workers (the output folder must be shared, e.g. the NFS export). A setting's rows travel
to ``combine`` as lists of ``[column, value]`` pairs, not as objects: a Postgres metadata database
keeps XComs as JSONB, which orders an object's keys by length, and ``sweep.csv``'s columns would
come out in that order instead of the CLI's. ``combine`` writes
``sweep.csv``, ``sweep.png`` and ``guard.json`` (the guard figures against the packing baselines, strict
JSON as ``iadeep experiment sweep`` writes it: an undefined figure is ``null``).

``prepare`` checks the whole conf before any work and fails without retrying on a key this DAG
does not use (``seed`` or ``target_load``: the sweep's are ``seeds`` and ``loads``), a ``reference``
that is not among ``policies``, a value the experiment's validator refuses, a value given twice
(``loads: [1, 1.0]``), or a window the trace does not have (the largest start job's window is
built first, as the CLI does: :func:`iadeep.experiment.check_grid`). It claims ``out`` for
the run as ``iadeep_experiment`` does (a second run into the same folder while this one is active
fails naming it).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from iadeep.orchestration import EXPERIMENT_PARAMS, config_from_params

_KEEP = ("trace", "trace_file", "jobs", "mix", "policies", "nodes", "gpus_per_node", "gpu_mem_gib", "gpu_type", "queue",
         "predictor", "throughputs_file")
PARAMS = {k: EXPERIMENT_PARAMS[k] for k in _KEEP}
PARAMS.update({
    "start_jobs": Param([20000, 40000, 60000], type="array", items={"type": "integer", "minimum": 0}, minItems=1,
                        uniqueItems=True, description="Trace windows (first job of each)."),
    "loads": Param([1.0, 2.0], type="array", items={"type": "number", "exclusiveMinimum": 0}, minItems=1,
                   uniqueItems=True, description="Target mean offered loads."),
    "seeds": Param([0, 1], type="array", items={"type": "integer", "minimum": 0}, minItems=1, uniqueItems=True,
                   description="Seeds."),
    "repeats": Param(1, type="integer", minimum=1,
                     description="Runs of every policy per setting, each with its own measurement noise (the same "
                                 "jobs); sweep.csv and the guard take their means (iadeep experiment sweep --repeats)."),
    "reference": Param("iadeep", type="string", description="Policy the others are compared with (one of policies)."),
    "out": Param("runs/sweep", type="string", minLength=1, description="Output folder (as iadeep_experiment's)."),
})


@dag(dag_id="iadeep_sweep", schedule=None, catchup=False, tags=["iadeep", "simulation", "sweep"], doc_md=__doc__,
     params=PARAMS, default_args={"retries": 1})
def iadeep_sweep() -> None:
    """Fan a sweep out over mapped tasks (see the module docstring)."""

    @task
    def prepare(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowFailException

        from iadeep.experiment import ExperimentConfig, fetch_inputs
        from iadeep.experiment import check_grid
        from iadeep.orchestration import claim_out, dataset_dir, refuse_unused, runs_dir

        p = dict(params or {})
        refuse_unused(p, PARAMS, "iadeep_sweep")
        grid = {k: p.pop(k) for k in ("start_jobs", "loads", "seeds", "reference", "repeats")}
        try:
            config = config_from_params(p, runs_dir())
        except ValueError as exc:  # bad conf: retrying cannot fix it
            raise AirflowFailException(str(exc)) from None
        if grid["reference"] not in config["policies"]:
            raise AirflowFailException(f"parameter 'reference': {grid['reference']!r} is not among the policies run "
                                       f"({', '.join(config['policies'])})")
        base = ExperimentConfig.from_dict(config)
        try:  # a trace, throughputs or cluster file that does not exist, a repeated value, a window past the end
            paths = fetch_inputs(base, progress=False, cache_dir=dataset_dir())
            check_grid(base, paths, grid["start_jobs"], [float(x) for x in grid["loads"]], grid["seeds"])
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        claim_out(config["out"], get_current_context())
        settings = [{"start": s, "load": float(x), "seed": seed} for s in grid["start_jobs"] for x in grid["loads"]
                    for seed in grid["seeds"]]
        return {"config": config, "paths": paths, "settings": settings, "reference": grid["reference"],
                "repeats": int(grid["repeats"])}

    @task
    def settings_of(prepared: dict[str, Any]) -> list[dict[str, Any]]:
        return prepared["settings"]

    @task(map_index_template="{{ setting['start'] }}-{{ setting['load'] }}-{{ setting['seed'] }}")
    def run_setting(setting: dict[str, Any], prepared: dict[str, Any]) -> list[list[list[Any]]]:
        from airflow.sdk import get_current_context

        from iadeep.experiment import ExperimentConfig
        from iadeep.experiment import run_setting as run
        from iadeep.orchestration import check_claim

        check_claim(prepared["config"]["out"], get_current_context())
        rows = run(ExperimentConfig.from_dict(prepared["config"]), prepared["paths"], int(setting["start"]),
                   float(setting["load"]), int(setting["seed"]), repeats=int(prepared.get("repeats", 1)))
        return [[[k, v] for k, v in row.items()] for row in rows]  # ordered pairs: see the module docstring

    @task
    def combine(prepared: dict[str, Any], results: list[list[list[list[Any]]]]) -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from iadeep.experiment import write_sweep_files
        from iadeep.orchestration import check_claim, results_url

        context = get_current_context()
        out = check_claim(prepared["config"]["out"], context)
        rows = [dict(pairs) for setting_rows in results for pairs in setting_rows]
        return {**write_sweep_files(rows, out, prepared["reference"]), "results_url": results_url(context)}

    prepared = prepare()
    combine(prepared, run_setting.partial(prepared=prepared).expand(setting=settings_of(prepared)))


iadeep_sweep()
