"""Airflow DAG ``iadeep_experiment``: replay a GPU-cluster trace against the scheduling policies.

The same experiment as ``iadeep experiment run`` (the CLI), split into Airflow tasks::

    fetch_datasets -> build_workload -> simulate[policy] (one mapped task per policy) -> report

- ``fetch_datasets``: validates the run's parameters into an :class:`iadeep.experiment.ExperimentConfig`,
  resolves the output folder and fetches (or locates) the trace and Gavel's throughput
  measurements through the dataset registry (``$IADEEP_DATASET_MIRROR`` / ``$IADEEP_CACHE_DIR``
  apply as for the CLI).
- ``build_workload``: filters/rescales the trace into ``workload.csv`` + ``workload.json``.
- ``simulate``: dynamically mapped over ``policies``; each instance simulates one policy and writes
  ``jobs-<policy>.csv``, ``timeline-<policy>.csv`` and ``metrics-<policy>.json``.
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

Output folder (``out``): an absolute path is used as is. A relative one is resolved under
``$IADEEP_RUNS_DIR`` when that is set, else under the worker's current working directory, so the
default ``runs/latest`` lands in ``./runs/latest`` as with the CLI. The folder is overwritten by the
next run with the same ``out``: give concurrent runs different folders.

Usage (``AIRFLOW_HOME`` set, ``airflow db migrate`` done, this folder as ``dags_folder``)::

    export IADEEP_DATASET_MIRROR=/path/to/shared/data   # offline machines; else upstream hosts
    airflow dags test iadeep_experiment --conf '{"jobs": 60, "out": "/tmp/iadeep-run"}'
    airflow dags test iadeep_experiment --conf '{"policies": ["iadeep", "exclusive"], "seed": 1}'

or trigger it from the UI / REST API with the same conf. ``iadeep`` is imported inside the tasks
only, so parsing this file stays fast.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import Param, dag, task

#: Relative ``out`` folders are resolved under this directory (default: the current working directory).
ENV_RUNS_DIR = "IADEEP_RUNS_DIR"

_NULL_INT = ["null", "integer"]
_NULL_NUM = ["null", "number"]

# Defaults are those of ExperimentConfig (a test checks that they stay equal); they are spelled out
# here rather than imported so that parsing the DAG does not import iadeep (pandas, the simulator).
PARAMS: dict[str, Param] = {
    "trace": Param("philly", type="string", enum=["philly", "ms-itp", "openb", "philly-json"],
                   description="Trace format. philly, ms-itp and openb are fetched through the dataset registry; "
                               "philly-json (Philly cluster_job_log) needs trace_file."),
    "trace_file": Param(None, type=["null", "string"],
                        description="Use this trace file/folder (on the workers' file system) instead of the registry's."),
    "jobs": Param(400, type=_NULL_INT, minimum=0, description="Number of jobs (after filters); 0 or null = all."),
    "start_job": Param(None, type=_NULL_INT, minimum=0,
                       description="Skip this many jobs first; null = 40,000 for the registry's Philly trace, else 0."),
    "window_start_s": Param(None, type=_NULL_NUM, minimum=0,
                            description="Keep jobs submitted at or after this (s from trace start); null = from the start."),
    "window_end_s": Param(None, type=_NULL_NUM, minimum=0,
                          description="Keep jobs submitted before this (s from trace start); null = to the end."),
    "virtual_cluster": Param(None, type=["null", "string"], description="Philly virtual cluster / ITP cluster to keep; null = all."),
    "max_gpus": Param(None, type=_NULL_INT, minimum=1,
                      description="Drop jobs needing more GPUs; null = the cluster's size (wider jobs: wider_than_cluster)."),
    "arrival_scale": Param(1.0, type="number", exclusiveMinimum=0, description="Multiply inter-arrival gaps."),
    "iadeep_arrival_rule": Param(False, type="boolean", description="IADeep artifact's rule: gap / 1000 x arrival_scale."),
    "target_load": Param(1.0, type=_NULL_NUM, minimum=0,
                         description="Rescale arrivals to this mean offered load; 0 or null = keep the trace's timing."),
    "mix": Param("iadeep", type="string", description="Workload mix: iadeep (IADeep's five models) or gavel (Gavel's 26 job types)."),
    "skip_bad_rows": Param(False, type="boolean", description="Skip and count malformed trace rows instead of stopping."),
    "strict": Param(False, type="boolean", description="Stop at the first known quirk of the trace (censored job, ...) too."),
    "include_censored": Param(False, type="boolean", description="Count censored jobs in the JCT statistics."),
    "infeasible": Param("drop", type="string", enum=["drop", "keep"],
                        description="Jobs that can never run on the cluster: drop before the run, or keep as unschedulable."),
    "cluster_file": Param(None, type=["null", "string"], description="YAML cluster file (node groups) instead of nodes x GPUs."),
    "policies": Param(["iadeep", "exclusive", "antman", "gandiva"], type="array", items={"type": "string"}, minItems=1,
                      uniqueItems=True, description="Policies to compare; one mapped simulate task each."),
    "nodes": Param(5, type="integer", minimum=1, description="Nodes in the cluster."),
    "gpus_per_node": Param(4, type="integer", minimum=1, description="GPUs per node."),
    "gpu_mem_gib": Param(24.0, type="number", exclusiveMinimum=0, description="Memory per GPU (GiB)."),
    "gpu_type": Param("v100", type="string", enum=["v100", "p100", "k80"],
                      description="Use Gavel's throughput measurements of this GPU type."),
    "throughputs_file": Param(None, type=["null", "string"],
                              description="Measurements in Gavel's schema (e.g. from `iadeep profile`, under one of the GPU "
                                          "types above) instead of the published ones; null = the registry's."),
    "seed": Param(0, type="integer", description="Seed of the workload mix and measurement noise."),
    "backfill": Param(False, type="boolean", description="Let jobs behind a waiting queue head start."),
    "queue": Param("fifo", type="string", enum=["fifo", "backfill", "kube"],
                   description="Simulator queue: strict FIFO, FIFO with backfill, or kube-scheduler's queue."),
    "scheduler_config": Param(None, type=["null", "string"],
                              description="KubeSchedulerConfiguration whose pod backoff the kube queue uses; null = defaults."),
    "backend": Param("simulator", type="string", enum=["simulator"],
                     description="Only the simulator runs from this DAG yet; the CLI's --backend kubernetes replays on a cluster."),
    "speedup": Param(1000.0, type="number", exclusiveMinimum=0, description="Kubernetes backend: time compression."),
    "timeout_s": Param(None, type=_NULL_NUM, exclusiveMinimum=0,
                       description="Kubernetes backend: wall-clock bound per policy (s); null = from the trace."),
    "kubeconfig": Param(None, type="null",
                        description="Kubernetes backend on a user's cluster: the CLI's --kubeconfig; this DAG runs the simulator only."),
    "predictor": Param("learned", type="string", enum=["learned", "oracle"],
                       description="iadeep's interference predictor: learned (online) or oracle (the measured table)."),
    "out": Param("runs/latest", type="string", minLength=1,
                 description=f"Output folder; relative paths are resolved under ${ENV_RUNS_DIR} if set, "
                             "else the worker's current working directory."),
}


def resolve_out(out: str) -> str:
    """Absolute output folder: ``out`` itself, or ``out`` under ``$IADEEP_RUNS_DIR`` / the cwd."""
    path = os.path.expanduser(out)
    if not os.path.isabs(path):
        path = os.path.join(os.environ.get(ENV_RUNS_DIR) or os.getcwd(), path)
    return os.path.abspath(path)


def config_from_params(params: dict[str, Any]) -> dict[str, Any]:
    """The run's params as a validated ``ExperimentConfig.to_dict()`` with an absolute ``out``.

    The one validator shared with the CLI (:func:`iadeep.experiment.validate_params`) converts
    every value into its typed field (``{"jobs": 60.0}`` becomes ``60``; ``60.5`` fails) before
    any work, so no later task sees an unconverted value.

    Raises:
        iadeep.experiment.ConfigError: (a ``ValueError``) an unknown key (e.g. a typo in the
            run's conf), a value of the wrong type or out of bounds, or an unknown trace, policy
            or mix; the message names the parameter.
    """
    import dataclasses

    from iadeep.experiment import ExperimentConfig

    cfg = ExperimentConfig.from_dict(params)
    return dataclasses.replace(cfg, out=resolve_out(cfg.out)).to_dict()


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
        from pathlib import Path

        from iadeep.experiment import ExperimentConfig, fetch_inputs

        config = config_from_params(params or {})
        cfg = ExperimentConfig.from_dict(config)
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        paths = fetch_inputs(cfg, progress=False)
        return {"config": config, **paths}

    @task
    def build_workload(inputs: dict[str, Any]) -> list[str]:
        """Write workload.csv/.json into the output folder; return the policy names to map over."""
        from iadeep.experiment import ExperimentConfig
        from iadeep.experiment import build_workload as build

        cfg = ExperimentConfig.from_dict(inputs["config"])
        _, meta = build(cfg, inputs["trace"], inputs["throughputs"])
        print(f"{meta['jobs']} jobs ({meta['multi_gpu_jobs']} multi-GPU) in {cfg.out}; offered load mean "
              f"{meta['offered_load_mean']}, peak {meta['offered_load_peak']}; dropped {meta['dropped']}, "
              f"flagged {meta['flagged']}")
        return list(cfg.policies)

    @task(map_index_template="{{ policy }}")
    def simulate(policy: str, inputs: dict[str, Any]) -> dict[str, Any]:
        """Simulate one policy on the workload in the output folder; return its metrics."""
        import json
        from pathlib import Path

        from iadeep.experiment import ExperimentConfig, load_workload, run_policy

        cfg = ExperimentConfig.from_dict(inputs["config"])
        workload, _ = load_workload(Path(cfg.out))
        run_policy(cfg, policy, workload, inputs["throughputs"])
        metrics_path = Path(cfg.out) / f"metrics-{policy}.json"
        return {"policy": policy, "metrics_path": str(metrics_path), "metrics": json.loads(metrics_path.read_text())}

    @task
    def report(inputs: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        """summary.json, report.md and plots for the simulated policies; returns the per-policy metrics."""
        from pathlib import Path

        from iadeep.experiment import ExperimentConfig, write_report

        cfg = ExperimentConfig.from_dict(inputs["config"])
        names = [r["policy"] for r in results]
        summary = write_report(cfg, names)
        out = Path(cfg.out)
        return {"out": str(out), "summary": str(out / "summary.json"), "report": str(out / "report.md"),
                "policies": summary["policies"]}

    inputs = fetch_datasets()  # {"config": ExperimentConfig.to_dict(), "trace": path, "throughputs": path}
    policies = build_workload(inputs)
    results = simulate.partial(inputs=inputs).expand(policy=policies)
    report(inputs, results)


iadeep_experiment()
