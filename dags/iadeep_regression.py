"""Airflow DAG ``iadeep_regression``: a daily check that no policy got worse in the simulator.

::

    prepare -> simulate_setting[window x seed] (mapped) -> check
            -> simulate_drawn[drawn setting] (mapped)  -/

- ``prepare``: validates the params into an :class:`iadeep.orchestration.RegressionSpec`, fetches
  the trace and the measurements, and lists the fixed settings (trace window x seed).
- ``simulate_setting``: every policy on one setting (``iadeep experiment sweep``'s step).
- ``check``: compares avg JCT, p99 JCT and makespan with ``baseline.json`` of the regression folder
  (Variable ``iadeep_regression_dir``, else ``$IADEEP_REGRESSION_DIR``, else ``./regression``),
  appends the run to ``history.csv``, redraws ``trend.png``, and fails naming every (setting,
  policy, metric) that is more than ``tolerance`` (relative) above the baseline. The first run
  writes the baseline; ``update_baseline: true`` replaces it (after an intended change).

Beside the fixed settings, every run simulates ``draw`` settings drawn at random
(:func:`iadeep.experiment.draw_settings`: trace, window, load, seed, cluster) from the seed
``draw_seed``, by default the run's logical date (``YYYYMMDD``): a new draw every day. They have no
baseline; ``check`` appends their guard figures (iadeep over the better packing baseline, worst and
median) to ``draws.csv`` and writes their rows to ``draws/<seed>.csv``, so a change that hurts
settings nobody fixed shows up in that history. ``draw: 0`` turns it off. ``draw_repeats: K`` runs
each drawn setting K times, each run with its own measurement noise (``iadeep experiment sweep
--repeats``): the guard reads their mean, and ``draws.csv`` gains the noise band, at K times the
draw's time.

``prepare`` fails before any simulation when the stored baseline measured another experiment
(other ``jobs`` or ``target_load``, or no setting and policy in common with this run) or is not a
baseline at all (the file is named): compare like with like, or replace it with
``update_baseline: true``.

``policy_options`` passes constructor arguments to a policy (e.g. ``{"iadeep": {"colocation_limit": 1}}``)
to see what a parameter change would do before merging it: such a trial is compared and kept in
the history (with its options) but never becomes the baseline. A policy it names must be among
``policies``, each argument one of that policy's constructor's, and ``prepare`` builds each such
policy once with its options, so a value it refuses fails there, naming it.
"""

from __future__ import annotations

from dataclasses import replace as dataclasses_replace
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task


@dag(dag_id="iadeep_regression", schedule="@daily", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
     max_active_runs=1, tags=["iadeep", "simulation", "regression"], doc_md=__doc__,
     params={
         "start_jobs": Param([40000, 60000], type="array", items={"type": "integer", "minimum": 0}, minItems=1,
                             description="Philly trace windows (first job of each)."),
         "seeds": Param([0], type="array", items={"type": "integer", "minimum": 0}, minItems=1, description="Seeds of the workload mix."),
         "target_load": Param(1.5, type="number", exclusiveMinimum=0, description="Mean offered load of each window."),
         "jobs": Param(120, type="integer", minimum=1, description="Jobs per window."),
         "policies": Param(["iadeep", "exclusive", "antman", "gandiva"], type="array", items={"type": "string"}, minItems=1,
                           uniqueItems=True, description="Policies simulated."),
         "tolerance": Param(0.05, type="number", minimum=0, description="Allowed relative increase over the baseline."),
         "policy_options": Param({}, type="object", description="Per policy, constructor arguments (try a change)."),
         "update_baseline": Param(False, type="boolean", description="Replace the baseline with this run's results."),
         "draw": Param(4, type="integer", minimum=0, description="Settings drawn at random beside the fixed ones (0: none)."),
         "draw_seed": Param(None, type=["null", "integer"], minimum=0,
                            description="Seed of the draw; null = the run's logical date (YYYYMMDD)."),
         "draw_repeats": Param(1, type="integer", minimum=1,
                               description="Runs of each drawn setting, each with its own measurement noise; "
                                           "the draw's guard reads their mean."),
         "regression_dir": Param(None, type=["null", "string"],
                                 description="Baseline/history folder; null = Variable iadeep_regression_dir."),
     }, default_args={"retries": 0})
def iadeep_regression() -> None:
    """Simulate fixed settings and compare with the baseline (see the module docstring)."""

    @task
    def prepare(params: dict[str, Any] | None = None, run_id: str | None = None,
                logical_date: Any = None) -> dict[str, Any]:
        import re
        from pathlib import Path

        from airflow.sdk.exceptions import AirflowFailException

        from iadeep.experiment import ExperimentConfig, fetch_inputs
        from iadeep.orchestration import RegressionSpec, check_baseline, load_baseline
        from iadeep.orchestration import dataset_dir, variable_path

        p = dict(params or {})
        directory = str(Path(p.pop("regression_dir") or variable_path("iadeep_regression_dir", "regression")).resolve())
        update = p.pop("update_baseline")
        n_drawn, draw_seed = int(p.pop("draw", 0) or 0), p.pop("draw_seed", None)
        draw_repeats = int(p.pop("draw_repeats", 1) or 1)
        settings = [{"start": s, "seed": seed} for s in p.get("start_jobs", ()) for seed in p.get("seeds", ())]
        out = Path(directory) / "runs" / re.sub(r"[^A-Za-z0-9_.-]", "_", str(run_id))
        try:  # bad conf or a baseline of another experiment: fail before minutes of simulation, without retrying
            spec = RegressionSpec.from_dict(p)
            if update and spec.policy_options:
                raise ValueError("update_baseline with policy_options: the baseline holds the policies' defaults")
            if not update:
                check_baseline(load_baseline(Path(directory)), spec,
                               [f"{s['start']}-{spec.target_load:g}-{s['seed']}" for s in settings])
            base = ExperimentConfig(jobs=spec.jobs, target_load=spec.target_load, policies=spec.policies, out=str(out))
            paths = fetch_inputs(base, progress=False, cache_dir=dataset_dir())
            spec.check_policy_values(paths["throughputs"], base.gpu_type)
            import pendulum as _pendulum

            from iadeep.experiment import draw_inputs
            from iadeep.orchestration import draw_seed_of

            seed = int(draw_seed) if draw_seed is not None else draw_seed_of(logical_date or _pendulum.now("UTC"))
            drawn, inputs = draw_inputs(base, n_drawn, seed, cache_dir=dataset_dir())
            drawn_items = [{**s.fields(), "paths": inputs(s)} for s in drawn]
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        return {"spec": p, "dir": directory, "update": update, "base": base.to_dict(), "paths": paths,
                "settings": settings, "run_id": str(run_id), "drawn": drawn_items, "draw_seed": seed,
                "draw_repeats": draw_repeats}

    @task
    def drawn_of(prepared: dict[str, Any]) -> list[dict[str, Any]]:
        return prepared["drawn"]

    @task(map_index_template="{{ setting['trace'] }}-{{ setting['start_job'] }}")
    def simulate_drawn(setting: dict[str, Any], prepared: dict[str, Any]) -> list[dict[str, Any]]:
        from iadeep.experiment import DrawnSetting, ExperimentConfig, run_draw

        base = ExperimentConfig.from_dict(prepared["base"])
        item = DrawnSetting(**{k: v for k, v in setting.items() if k != "paths"})
        return run_draw({"kube": dataclasses_replace(base, queue="kube")}, [item], lambda _: setting["paths"],
                        repeats=int(prepared.get("draw_repeats", 1))).to_dict("records")

    @task
    def settings_of(prepared: dict[str, Any]) -> list[dict[str, Any]]:
        return prepared["settings"]

    @task(map_index_template="{{ setting['start'] }}-{{ setting['seed'] }}")
    def simulate_setting(setting: dict[str, Any], prepared: dict[str, Any]) -> list[dict[str, Any]]:
        from iadeep.experiment import ExperimentConfig
        from iadeep.experiment import run_setting

        base = ExperimentConfig.from_dict(prepared["base"])
        return run_setting(base, prepared["paths"], int(setting["start"]), base.target_load or 0.0, int(setting["seed"]),
                           options=prepared["spec"].get("policy_options") or {})

    @task(trigger_rule="none_failed")  # runs with no drawn setting too (draw: 0 skips the empty map)
    def check(prepared: dict[str, Any], results: list[list[dict[str, Any]]],
              drawn: list[list[dict[str, Any]]] | None = None) -> dict[str, Any]:
        from pathlib import Path

        from airflow.sdk.exceptions import AirflowFailException

        from iadeep.orchestration import RegressionSpec, compare, load_baseline, record

        spec = RegressionSpec.from_dict(prepared["spec"])
        rows = [r for setting in results for r in setting]
        directory = Path(prepared["dir"])
        regressions = compare(rows, load_baseline(directory), spec)
        info = record(directory, rows, regressions, run_id=prepared["run_id"], spec=spec,
                      update_baseline=bool(prepared["update"]))
        drawn_rows = [r for setting in drawn or () for r in setting]
        if drawn_rows:
            from iadeep.orchestration import record_draw

            guard = record_draw(directory, drawn_rows, seed=int(prepared["draw_seed"]), run_id=prepared["run_id"])
            info = {**info, "draw_worst_vs_packing": guard["worst_vs_packing"],
                    "draw_median_vs_packing": guard["median_vs_packing"], "draw_seed": guard["seed"]}
        if regressions:
            lines = [f"{r['setting']} {r['policy']} {r['metric']}: {r['value']:.1f} vs baseline {r['baseline']:.1f} "
                     f"({r['change']:+.1%}, tolerance {spec.tolerance:.1%})" for r in regressions]
            raise AirflowFailException(f"{len(regressions)} regression(s) (trend: {info['trend']}):\n" + "\n".join(lines))
        return {**info, "regressions": 0, "rows": len(rows)}

    prepared = prepare()
    results = simulate_setting.partial(prepared=prepared).expand(setting=settings_of(prepared))
    drawn = simulate_drawn.partial(prepared=prepared).expand(setting=drawn_of(prepared))
    check(prepared, results, drawn)


iadeep_regression()
