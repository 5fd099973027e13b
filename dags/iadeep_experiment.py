"""Airflow DAG ``iadeep_experiment``: replay a GPU-cluster trace against the scheduling policies.

The same experiment as ``iadeep experiment run`` (the CLI), split into Airflow tasks::

    fetch_datasets -> build_workload -> simulate[policy] (one mapped task per policy) -> report
                                     +-> run_kubernetes ----------------------------+

- ``fetch_datasets``: validates the run's parameters into an :class:`iadeep.experiment.ExperimentConfig`,
  resolves the output folder and fetches (or locates) the trace and Gavel's throughput
  measurements through the dataset registry (``$IADEEP_DATASET_MIRROR`` / ``$IADEEP_CACHE_DIR``
  apply as for the CLI).
- ``build_workload``: filters/rescales the trace into ``workload.csv`` + ``workload.json``.
- ``simulate``: dynamically mapped over ``policies``; each instance simulates one policy and writes
  ``jobs-<policy>.csv``, ``timeline-<policy>.csv`` and ``metrics-<policy>.json``.
- ``run_kubernetes`` (``backend: kubernetes`` only; skipped for the simulator, whose ``simulate``
  then maps over no policy): the CLI's kubernetes backend - the local control plane (real
  kube-apiserver, kube-scheduler with the ``iadeep-scheduler`` profile, kube-controller-manager,
  kwok GPU nodes), etcd, the extender and the GPU emulator; per policy the Jobs are submitted at
  their arrival times / ``speedup`` and read back from their conditions and the emulator's
  annotations into the same per-policy files. Needs ``make controlplane``.
- ``report``: ``summary.json``, ``report.md`` and the plots (``jct_cdf.png``, ``normalised.png``,
  ``queue_length.png``).

Only small JSON (the config dict, file paths, policy names, per-policy metrics) goes through XCom;
the tables travel through the output folder, so all tasks must see the same file system.

Parameters mirror the CLI's options (and :class:`~iadeep.experiment.ExperimentConfig`) with the same
defaults: the project's main job, 400 Philly jobs from job 40,000 on, all four policies.
As in the CLI, ``jobs: 0`` means all jobs and ``target_load: 0`` keeps the trace's timing (``null``
works for both too). The first task validates the whole conf with the CLI's validator before any
work: unknown keys (typos), wrong types (``{"jobs": 60.5}``, ``{"nodes": "2"}``) and values out of
bounds fail it with a message naming the parameter; whole-number floats (``{"jobs": 60.0}``, which
Airflow's JSON Schema accepts as integers) are converted.

Output folder (``out``): an absolute path is used as is. A relative one is resolved under the
Variable ``iadeep_runs_dir``, else ``$IADEEP_RUNS_DIR``, else the worker's current working
directory, so the default ``runs/latest`` lands in ``./runs/latest`` as with the CLI. The first task
claims the folder for the run (``.iadeep-run.json``): a second run into the same ``out`` while the
first is queued or running fails at once naming it, and every later task checks the claim before
it writes. A run that has ended leaves its files to be overwritten by the next run into the folder.
Datasets come from the Variable ``iadeep_dataset_dir`` (else ``$IADEEP_CACHE_DIR``, else the
registry's user cache folder), where ``iadeep_datasets`` fetches them.

Usage (``AIRFLOW_HOME`` set, this folder as ``dags_folder``, and ``airflow db migrate`` run once)::

    export IADEEP_DATASET_MIRROR=/path/to/shared/data   # offline machines; else upstream hosts
    airflow dags test iadeep_experiment --conf '{"jobs": 60, "out": "/tmp/iadeep-run"}'
    airflow dags test iadeep_experiment --conf '{"policies": ["iadeep", "exclusive"], "seed": 1}'

or trigger it from the UI / REST API with the same conf. ``iadeep`` is imported inside the tasks
only, so parsing this file stays fast.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import dag, task

from iadeep.orchestration import ENV_RUNS_DIR, config_from_params, resolve_out
from iadeep.orchestration import EXPERIMENT_PARAMS as PARAMS

__all__ = ["ENV_RUNS_DIR", "PARAMS", "config_from_params", "resolve_out"]


@dag(
    dag_id="iadeep_experiment",
    schedule=None,
    catchup=False,
    tags=["iadeep", "simulation", "experiment"],
    params=PARAMS,
    doc_md=__doc__,
    default_args={"retries": 0},
)
def iadeep_experiment() -> None:
    """Trace-driven comparison of GPU-sharing policies (see the module docstring)."""

    @task
    def fetch_datasets(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Validate the params into a config (first, before any work), create the output folder,
        fetch the trace and throughputs."""
        from airflow.sdk import get_current_context

        from iadeep.experiment import ExperimentConfig, fetch_inputs
        from iadeep.orchestration import claim_out, dataset_dir, runs_dir

        config = config_from_params(params or {}, runs_dir())
        cfg = ExperimentConfig.from_dict(config)
        paths = fetch_inputs(cfg, progress=False, cache_dir=dataset_dir())  # writes nothing into out
        claim_out(cfg.out, get_current_context())  # after the checks: a refused conf leaves no folder
        return {"config": config, **paths}

    @task
    def build_workload(inputs: dict[str, Any]) -> list[str]:
        """Write workload.csv/.json into the output folder; return the policy names to map over."""
        from airflow.sdk import get_current_context

        from iadeep.experiment import ExperimentConfig
        from iadeep.experiment import build_workload as build
        from iadeep.orchestration import check_claim

        cfg = ExperimentConfig.from_dict(inputs["config"])
        check_claim(cfg.out, get_current_context())
        _, meta = build(cfg, inputs["trace"], inputs["throughputs"])
        print(f"{meta['jobs']} jobs ({meta['multi_gpu_jobs']} multi-GPU) in {cfg.out}; offered load mean "
              f"{meta['offered_load_mean']}, peak {meta['offered_load_peak']}; dropped {meta['dropped']}, "
              f"flagged {meta['flagged']}")
        if cfg.jobs and meta["jobs"] < cfg.jobs:
            print(f"only {meta['jobs']} of the {cfg.jobs} jobs asked for: the trace has no more after job {cfg.start_job}")
        return list(cfg.policies) if cfg.backend == "simulator" else []

    @task
    def run_kubernetes(inputs: dict[str, Any]) -> dict[str, Any]:
        """The kubernetes backend over all policies (skipped for the simulator backend)."""
        from pathlib import Path

        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from iadeep.experiment import ExperimentConfig, load_workload
        from iadeep.experiment import run_live
        from iadeep.orchestration import check_claim

        cfg = ExperimentConfig.from_dict(inputs["config"])
        if cfg.backend != "kubernetes":
            raise AirflowSkipException("backend is simulator")
        check_claim(cfg.out, get_current_context())
        workload, _ = load_workload(Path(cfg.out))
        metrics = run_live(cfg, workload, inputs["throughputs"])
        return {p: {k: m[k] for k in ("avg_jct_s", "makespan_s", "failed_jobs", "reservations_left") if k in m}
                for p, m in metrics.items()}

    @task(map_index_template="{{ policy }}")
    def simulate(policy: str, inputs: dict[str, Any]) -> dict[str, Any]:
        """Simulate one policy on the workload in the output folder; return its metrics."""
        import json
        from pathlib import Path

        from airflow.sdk import get_current_context

        from iadeep.experiment import ExperimentConfig, load_workload, run_policy
        from iadeep.orchestration import check_claim

        cfg = ExperimentConfig.from_dict(inputs["config"])
        check_claim(cfg.out, get_current_context())
        workload, _ = load_workload(Path(cfg.out))
        run_policy(cfg, policy, workload, inputs["throughputs"])
        metrics_path = Path(cfg.out) / f"metrics-{policy}.json"
        return {"policy": policy, "metrics_path": str(metrics_path), "metrics": json.loads(metrics_path.read_text())}

    @task(trigger_rule="none_failed_min_one_success")
    def report(inputs: dict[str, Any], results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """summary.json, report.md and plots for the policies run; returns the per-policy metrics and
        ``results_url``, the run's results page in the Airflow UI (the iadeep plugin's tab)."""
        import logging
        from pathlib import Path

        from airflow.sdk import get_current_context

        from iadeep.experiment import ExperimentConfig, write_report
        from iadeep.orchestration import check_claim, results_url

        context = get_current_context()
        cfg = ExperimentConfig.from_dict(inputs["config"])
        check_claim(cfg.out, context)
        names = [r["policy"] for r in results or []] or list(cfg.policies)
        summary = write_report(cfg, names)
        out = Path(cfg.out)
        url = results_url(context)
        logging.getLogger(__name__).info("results: %s (files in %s)", url, out)
        return {"out": str(out), "summary": str(out / "summary.json"), "report": str(out / "report.md"),
                "results_url": url, "policies": summary["policies"]}

    inputs = fetch_datasets()  # {"config": ExperimentConfig.to_dict(), "trace": path, "throughputs": path}
    policies = build_workload(inputs)
    results = simulate.partial(inputs=inputs).expand(policy=policies)
    live = run_kubernetes(inputs)
    policies >> live
    report(inputs, results) << live


iadeep_experiment()
