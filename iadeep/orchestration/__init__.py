"""Orchestration steps behind the Airflow DAGs in ``dags/`` (each DAG task is a thin call into these).

- cluster setup (:func:`ensure_namespace`, :func:`label_gpu_nodes`, :func:`apply_scheduler_profile`);
- rollout of the components from ``k8s/`` (:func:`render`, :func:`apply`, :func:`wait_ready`) or with
  the chart ``charts/iadeep`` (:func:`rollout_values`, :func:`local_values`, :func:`template`,
  :func:`upgrade_install`, :func:`uninstall`), onto a
  local cluster's real node through ``k8s/local`` and the cluster's own values
  (:func:`prepare_local_rollout`, :class:`LocalCluster`, :func:`label_real_nodes`);
- the dataset folder over NFS (:class:`NfsExport`, :func:`ganesha_config`, :func:`apply_volume`,
  :func:`check_export`);
- trace submission as Jobs (:func:`plan_submissions`, :func:`submit_due`, :func:`job_states`,
  :func:`collect_jobs`);
- the regression check (:class:`RegressionSpec`, :func:`check_baseline`, :func:`compare`, :func:`record`).

The Airflow side, used by the DAGs: the operators (:class:`SubmitTraceOperator`,
:class:`WaitJobsOperator`), the trigger (:class:`JobsFinishedTrigger`, defined in
:mod:`iadeep.orchestration.triggers`, its stored classpath), the Connections and Variables
(:func:`cluster_ref`, :func:`etcd_ref`, :func:`api_for`, :func:`dataset_dir`, :func:`runs_dir`,
:func:`variable_path`), the claim of an ``out`` folder (:func:`claim_out`, :func:`check_claim`,
:func:`results_url`, :func:`refuse_unused`) and the experiment DAGs' parameters
(:data:`EXPERIMENT_PARAMS`, :func:`config_from_params`, :func:`resolve_out`). These names import
Airflow, so they load on first use (module ``__getattr__``): the steps above do not need it.
"""

from iadeep.orchestration._helm import (CHART, find_helm, local_values, release_values, rollout_values, template, uninstall,
                                       upgrade_install)
from iadeep.orchestration._kube import GPU_NODE_LABEL, SCHEDULER_CONFIGMAP, api_client, apply_scheduler_profile, ensure_namespace, label_gpu_nodes
from iadeep.orchestration._local import (LocalCluster, label_real_nodes, local_overlay_dir, prepare_local_rollout, stage_throughputs,
                                        write_local_overlay)
from iadeep.orchestration._nfs import NfsExport, apply_volume, check_export, ganesha_config, volume_manifests
from iadeep.orchestration._regression import (RegressionSpec, check_baseline, compare, draw_seed_of, load_baseline, record,
                                             record_draw)
from iadeep.orchestration._rollout import COMPONENTS, apply, render, wait_ready
from iadeep.orchestration._scrape import SCRAPE_JOBS, SCRAPED_SERVICES, scrape_targets, write_scrape_targets
from iadeep.orchestration._submit import collect_jobs, job_name, job_states, plan_submissions, plan_trace, submit_due

__all__ = ["CHART", "COMPONENTS", "find_helm", "local_values", "release_values", "rollout_values", "template", "uninstall",
           "upgrade_install", "GPU_NODE_LABEL", "SCHEDULER_CONFIGMAP", "LocalCluster", "NfsExport", "RegressionSpec", "api_client", "apply",
           "apply_scheduler_profile", "apply_volume", "check_baseline", "check_export", "collect_jobs", "compare", "ensure_namespace",
           "ganesha_config", "job_name", "job_states", "label_gpu_nodes", "label_real_nodes", "load_baseline", "local_overlay_dir", "draw_seed_of", "record_draw", "plan_submissions", "plan_trace", "prepare_local_rollout", "record",
           "render", "SCRAPE_JOBS", "SCRAPED_SERVICES", "scrape_targets", "stage_throughputs", "submit_due", "volume_manifests", "wait_ready", "write_local_overlay", "write_scrape_targets"]

# The Airflow side: name -> (module, attribute), imported on first use.
_AIRFLOW = {
    **{name: ("iadeep.orchestration._airflow", name) for name in (
        "CLAIM_FILE", "CLUSTER_CONN_ID", "ETCD_CONN_ID", "ClusterRef", "SubmitTraceOperator", "WaitJobsOperator", "api_for",
        "check_claim", "claim_out", "cluster_ref", "dataset_dir", "etcd_ref", "get_connection", "refuse_unused", "results_url",
        "runs_dir", "variable_path")},
    "JobsFinishedTrigger": ("iadeep.orchestration.triggers", "JobsFinishedTrigger"),
    "EXPERIMENT_PARAMS": ("iadeep.orchestration._experiment_params", "PARAMS"),
    "ENV_RUNS_DIR": ("iadeep.orchestration._experiment_params", "ENV_RUNS_DIR"),
    "config_from_params": ("iadeep.orchestration._experiment_params", "config_from_params"),
    "resolve_out": ("iadeep.orchestration._experiment_params", "resolve_out"),
}
__all__ += sorted(_AIRFLOW)


def __getattr__(name: str) -> object:
    """The Airflow side (see the module docstring), imported on first use.

    Raises:
        AttributeError: ``name`` is not exported here.
    """
    if name not in _AIRFLOW:
        raise AttributeError(f"module 'iadeep.orchestration' has no attribute {name!r}")
    import importlib

    module, attr = _AIRFLOW[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
