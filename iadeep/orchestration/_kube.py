"""Cluster setup steps on any Kubernetes cluster: namespace, GPU node labels, the scheduler profile.

Each step is idempotent (create-or-patch), so an Airflow retry or a second run changes nothing
that is already right. The API client comes from the caller (the DAG builds it from the Airflow
Connection ``iadeep_cluster``: :mod:`iadeep.orchestration._settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["GPU_NODE_LABEL", "SCHEDULER_CONFIGMAP", "api_client", "ensure_namespace", "label_gpu_nodes",
           "apply_scheduler_profile"]

#: Label set on nodes that advertise GPUs (extended resource ``iadeep.io/gpu-count`` or ``nvidia.com/gpu``).
GPU_NODE_LABEL = "iadeep.io/gpu-node"
#: ConfigMap holding the ``iadeep-scheduler`` KubeSchedulerConfiguration (as k8s/extender names it).
SCHEDULER_CONFIGMAP = "iadeep-scheduler-config"
GPU_RESOURCES = ("iadeep.io/gpu-count", "nvidia.com/gpu")
REPO = Path(__file__).resolve().parents[2]


def api_client(kubeconfig: str | Path | None = None, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` from a kubeconfig file (``None``: in-cluster config).

    Raises:
        kubernetes.config.ConfigException: the kubeconfig is missing or malformed.
    """
    from kubernetes import client, config

    if kubeconfig is None:
        config.load_incluster_config()
        return client.ApiClient()
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=cfg)
    return client.ApiClient(cfg)


def ensure_namespace(api: Any, name: str, labels: dict[str, str] | None = None) -> str:
    """Create namespace ``name`` (or patch its labels); returns ``"created"`` or ``"exists"``."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    try:
        core.create_namespace(body)
        return "created"
    except ApiException as exc:
        if exc.status != 409:
            raise
    if labels:
        core.patch_namespace(name, {"metadata": {"labels": labels}})
    return "exists"


def label_gpu_nodes(api: Any, label: str = GPU_NODE_LABEL) -> dict[str, int]:
    """Label every node whose allocatable has GPUs with ``label=true``; remove it from nodes without.

    Returns:
        ``{node name: allocatable GPU devices}`` of the labelled nodes: ``nvidia.com/gpu`` counts
        GPUs; ``iadeep.io/gpu-count`` counts GPUs on kwok nodes but co-location slots (GPUs x
        jobs per GPU) on a node served by the iadeep device plugin (see
        :mod:`iadeep.deviceplugin._service`); the larger of the two is given.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    gpus: dict[str, int] = {}
    for node in core.list_node().items:
        alloc = node.status.allocatable or {}
        n = max((int(alloc.get(r, "0") or 0) for r in GPU_RESOURCES), default=0)
        has = (node.metadata.labels or {}).get(label) == "true"
        if n > 0:
            gpus[node.metadata.name] = n
            if not has:
                core.patch_node(node.metadata.name, {"metadata": {"labels": {label: "true"}}})
        elif label in (node.metadata.labels or {}):
            core.patch_node(node.metadata.name, {"metadata": {"labels": {label: None}}})
    return gpus


def apply_scheduler_profile(api: Any, namespace: str, *, config_file: str | Path | None = None,
                            extender_url: str | None = None) -> dict[str, Any]:
    """Store the ``iadeep-scheduler`` KubeSchedulerConfiguration as ConfigMap ``iadeep-scheduler-config``.

    Args:
        namespace: where the ConfigMap goes (the scheduler's namespace, ``iadeep-system``).
        config_file: the configuration; default ``k8s/extender/kube-scheduler-config.yaml``.
        extender_url: replaces every extender's ``urlPrefix`` (``None``: kept as in the file).

    Returns:
        the configuration written.

    Raises:
        ValueError: the file is not a KubeSchedulerConfiguration with an ``iadeep-scheduler`` profile.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    path = Path(config_file) if config_file else REPO / "k8s" / "extender" / "kube-scheduler-config.yaml"
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "KubeSchedulerConfiguration":
        raise ValueError(f"{path}: not a KubeSchedulerConfiguration")
    if "iadeep-scheduler" not in [p.get("schedulerName") for p in doc.get("profiles") or []]:
        raise ValueError(f"{path}: no profile with schedulerName iadeep-scheduler")
    if extender_url:
        for ext in doc.get("extenders") or []:
            ext["urlPrefix"] = extender_url
    body = {"metadata": {"name": SCHEDULER_CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/part-of": "iadeep"}},
            "data": {"kube-scheduler-config.yaml": yaml.safe_dump(doc, sort_keys=False)}}
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_config_map(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(SCHEDULER_CONFIGMAP, namespace, body)
    return doc
