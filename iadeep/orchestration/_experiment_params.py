"""Parameters of the ``iadeep_experiment`` DAG (and the trace DAGs that share them), and their validation.

Defaults are those of :class:`iadeep.experiment.ExperimentConfig` (a test checks that they stay
equal); they are spelled out rather than imported so that parsing a DAG file imports only this
module (no pandas, no simulator).
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import Param

__all__ = ["ENV_RUNS_DIR", "PARAMS", "config_from_params", "resolve_out"]

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
    "drop_zero_duration": Param(False, type="boolean",
                                description="Drop the trace's jobs of 0 s (default: kept, they complete at once)."),
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
    "seed": Param(0, type="integer", minimum=0, description="Seed of the workload mix and measurement noise."),
    "backfill": Param(False, type="boolean", description="Let jobs behind a waiting queue head start."),
    "queue": Param("fifo", type="string", enum=["fifo", "backfill", "kube"],
                   description="Simulator queue: strict FIFO, FIFO with backfill, or kube-scheduler's queue."),
    "gang_placement": Param("pods", type="string", enum=["pods", "any-gpus"],
                            description="Simulator: a job wider than a node as a gang of per-node pods (as live), or on "
                                        "any GPUs (as peers' simulators)."),
    "kube_preemption": Param(True, type="boolean",
                             description="kube queue: iadeep's head-of-line preemption for the pod nothing pending is "
                                         "ahead of (live: the extender evicts the victim; its Job replaces it, progress kept)."),
    "scheduler_config": Param(None, type=["null", "string"],
                              description="KubeSchedulerConfiguration whose pod backoff the kube queue uses; null = defaults."),
    "backend": Param("simulator", type="string", enum=["simulator", "kubernetes"],
                     description="simulator: the trace-driven simulator; kubernetes: Jobs on the local control plane "
                                 "(kwok GPU nodes, the real kube-scheduler, the extender, the GPU emulator)."),
    "speedup": Param(1000.0, type="number", exclusiveMinimum=0, description="Kubernetes backend: time compression."),
    "timeout_s": Param(None, type=_NULL_NUM, exclusiveMinimum=0,
                       description="Kubernetes backend: wall-clock bound per policy (s); null = from the trace."),
    "held_clock": Param(True, type="boolean",
                        description="Kubernetes backend, local cluster: time stands still while kube-scheduler decides an "
                                    "arrived pod, the emulator completes one and a tuning session runs."),
    "kubeconfig": Param(None, type=["null", "string"],
                        description="Kubernetes backend on a user's cluster with the extender deployed (a path on "
                                    "the workers; one policy, the deployed one); null = the local control plane."),
    "predictor": Param("learned", type="string", enum=["learned", "oracle"],
                       description="iadeep's interference predictor: learned (online) or oracle (the measured table)."),
    "out": Param("runs/latest", type="string", minLength=1,
                 description=f"Output folder; relative paths are resolved under ${ENV_RUNS_DIR} if set, "
                             "else the worker's current working directory."),
}


def resolve_out(out: str, runs_dir: str | None = None) -> str:
    """Absolute output folder: ``out`` itself, or ``out`` under ``runs_dir`` (the DAGs pass
    :func:`iadeep.orchestration._airflow.runs_dir`: the Variable ``iadeep_runs_dir`` first), else
    ``$IADEEP_RUNS_DIR``, else the cwd."""
    path = os.path.expanduser(out)
    if not os.path.isabs(path):
        path = os.path.join(runs_dir or os.environ.get(ENV_RUNS_DIR) or os.getcwd(), path)
    return os.path.abspath(path)


def config_from_params(params: dict[str, Any], runs_dir: str | None = None) -> dict[str, Any]:
    """The run's params as a validated ``ExperimentConfig.to_dict()`` with an absolute ``out``
    (a relative one under ``runs_dir``, see :func:`resolve_out`).

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
    return dataclasses.replace(cfg, out=resolve_out(cfg.out, runs_dir)).to_dict()
