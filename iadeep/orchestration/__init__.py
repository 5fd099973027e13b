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

The Airflow operators and trigger (which import Airflow) are in :mod:`iadeep.orchestration._airflow`,
imported by the DAGs only.
"""

from iadeep.orchestration._helm import (CHART, find_helm, local_values, release_values, rollout_values, template, uninstall,
                                       upgrade_install)
from iadeep.orchestration._kube import GPU_NODE_LABEL, SCHEDULER_CONFIGMAP, api_client, apply_scheduler_profile, ensure_namespace, label_gpu_nodes
from iadeep.orchestration._local import (LocalCluster, label_real_nodes, prepare_local_rollout, stage_throughputs,
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
           "ganesha_config", "job_name", "job_states", "label_gpu_nodes", "label_real_nodes", "load_baseline", "draw_seed_of", "record_draw", "plan_submissions", "plan_trace", "prepare_local_rollout", "record",
           "render", "SCRAPE_JOBS", "SCRAPED_SERVICES", "scrape_targets", "stage_throughputs", "submit_due", "volume_manifests", "wait_ready", "write_local_overlay", "write_scrape_targets"]
