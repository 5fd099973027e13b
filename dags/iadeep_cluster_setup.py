"""Airflow DAG ``iadeep_cluster_setup``: prepare a Kubernetes cluster for iadeep (idempotent).

::

    namespaces -> label_gpu_nodes -> scheduler_profile

- ``namespaces``: the system namespace (``iadeep-system``) and the Jobs' namespace (the
  ``iadeep_cluster`` Connection's ``namespace`` extra, default ``iadeep-jobs``).
- ``label_gpu_nodes``: ``iadeep.io/gpu-node=true`` on every node whose allocatable has GPUs
  (``iadeep.io/gpu-count`` or ``nvidia.com/gpu``); removed from nodes without.
- ``scheduler_profile``: the ``iadeep-scheduler`` KubeSchedulerConfiguration
  (``k8s/extender/kube-scheduler-config.yaml`` or the ``scheduler_config`` param's file) as
  ConfigMap ``iadeep-scheduler-config``; ``extender_url`` replaces the extenders' URL.

The cluster comes from the Airflow Connection ``iadeep_cluster`` (type kubernetes, extra
``kube_config_path``); see README "Airflow".
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task


@dag(dag_id="iadeep_cluster_setup", schedule=None, catchup=False, tags=["iadeep", "cluster"], doc_md=__doc__,
     params={
         "system_namespace": Param("iadeep-system", type="string", description="Namespace of the middleware's services."),
         "scheduler_config": Param(None, type=["null", "string"],
                                   description="KubeSchedulerConfiguration file; null = k8s/extender/kube-scheduler-config.yaml."),
         "extender_url": Param(None, type=["null", "string"], description="Extender URL prefix; null = as in the file."),
     }, default_args={"retries": 2})
def iadeep_cluster_setup() -> None:
    """Namespaces, GPU node labels and the scheduler profile (see the module docstring)."""

    @task
    def namespaces(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from iadeep.orchestration import ensure_namespace
        from iadeep.orchestration import api_for, cluster_ref

        ref = cluster_ref()
        api = api_for(ref)
        try:
            labels = {"app.kubernetes.io/part-of": "iadeep"}
            return {ns: ensure_namespace(api, ns, labels) for ns in (params["system_namespace"], ref["namespace"])}
        finally:
            api.close()

    @task
    def label_gpu_nodes() -> dict[str, int]:
        from iadeep.orchestration import label_gpu_nodes as label
        from iadeep.orchestration import api_for, cluster_ref

        api = api_for(cluster_ref())
        try:
            return label(api)
        finally:
            api.close()

    @task
    def scheduler_profile(params: dict[str, Any] | None = None) -> list[str]:
        from iadeep.orchestration import apply_scheduler_profile
        from iadeep.orchestration import api_for, cluster_ref

        api = api_for(cluster_ref())
        try:
            doc = apply_scheduler_profile(api, params["system_namespace"], config_file=params["scheduler_config"],
                                          extender_url=params["extender_url"])
        finally:
            api.close()
        return [p["schedulerName"] for p in doc["profiles"]]

    namespaces() >> label_gpu_nodes() >> scheduler_profile()


iadeep_cluster_setup()
