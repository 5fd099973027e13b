"""Airflow DAG ``iadeep_sweep``: ``iadeep experiment sweep`` as mapped tasks (windows x loads x seeds).

::

    prepare -> run_setting[start x load x seed] (mapped) -> combine

Each mapped instance simulates every policy on one setting and writes its files under
``<out>/<start>-<load>-<seed>/``; with the Celery or Kubernetes executor the settings fan out
over the workers (the output folder must be shared, e.g. the NFS export). ``combine`` writes
``sweep.csv``, ``sweep.png`` and ``guard.json`` (the guard figures against the packing baselines, strict
JSON as ``iadeep experiment sweep`` writes it: an undefined figure is ``null``).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from iadeep.orchestration._experiment_params import PARAMS as EXPERIMENT_PARAMS
from iadeep.orchestration._experiment_params import config_from_params

_KEEP = ("trace", "trace_file", "jobs", "mix", "policies", "nodes", "gpus_per_node", "gpu_mem_gib", "gpu_type", "queue",
         "predictor")
PARAMS = {k: EXPERIMENT_PARAMS[k] for k in _KEEP}
PARAMS.update({
    "start_jobs": Param([20000, 40000, 60000], type="array", items={"type": "integer", "minimum": 0}, minItems=1,
                        description="Trace windows (first job of each)."),
    "loads": Param([1.0, 2.0], type="array", items={"type": "number", "exclusiveMinimum": 0}, minItems=1,
                   description="Target mean offered loads."),
    "seeds": Param([0, 1], type="array", items={"type": "integer"}, minItems=1, description="Seeds."),
    "reference": Param("iadeep", type="string", description="Policy the others are compared with."),
    "out": Param("runs/sweep", type="string", minLength=1, description="Output folder (as iadeep_experiment's)."),
})


@dag(dag_id="iadeep_sweep", schedule=None, catchup=False, tags=["iadeep", "simulation", "sweep"], doc_md=__doc__,
     params=PARAMS, default_args={"retries": 1})
def iadeep_sweep() -> None:
    """Fan a sweep out over mapped tasks (see the module docstring)."""

    @task
    def prepare(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from iadeep.experiment import ExperimentConfig, fetch_inputs

        p = dict(params or {})
        grid = {k: p.pop(k) for k in ("start_jobs", "loads", "seeds", "reference")}
        config = config_from_params(p)
        paths = fetch_inputs(ExperimentConfig.from_dict(config), progress=False)
        settings = [{"start": s, "load": float(x), "seed": seed} for s in grid["start_jobs"] for x in grid["loads"]
                    for seed in grid["seeds"]]
        return {"config": config, "paths": paths, "settings": settings, "reference": grid["reference"]}

    @task
    def settings_of(prepared: dict[str, Any]) -> list[dict[str, Any]]:
        return prepared["settings"]

    @task(map_index_template="{{ setting['start'] }}-{{ setting['load'] }}-{{ setting['seed'] }}")
    def run_setting(setting: dict[str, Any], prepared: dict[str, Any]) -> list[dict[str, Any]]:
        from iadeep.experiment import ExperimentConfig
        from iadeep.experiment._sweep import run_setting as run

        return run(ExperimentConfig.from_dict(prepared["config"]), prepared["paths"], int(setting["start"]),
                   float(setting["load"]), int(setting["seed"]))

    @task
    def combine(prepared: dict[str, Any], results: list[list[dict[str, Any]]]) -> dict[str, Any]:
        from pathlib import Path

        from iadeep.experiment._sweep import guard_figures, plot_sweep, sweep_table
        from iadeep.report import write_json

        out = Path(prepared["config"]["out"])
        out.mkdir(parents=True, exist_ok=True)
        df = sweep_table([r for rows in results for r in rows], prepared["reference"])
        df.to_csv(out / "sweep.csv", index=False)
        if f"avg_jct_vs_{prepared['reference']}" in df:
            plot_sweep(df, out / "sweep.png", prepared["reference"])
        guard = write_json(out / "guard.json", guard_figures(df, prepared["reference"]))
        return {"out": str(out), "rows": len(df), "guard": guard}

    prepared = prepare()
    combine(prepared, run_setting.partial(prepared=prepared).expand(setting=settings_of(prepared)))


iadeep_sweep()
