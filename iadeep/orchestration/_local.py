"""The rollout onto a local cluster's real node: ``k8s/local`` plus the values only the cluster knows.

``k8s/local`` (committed) says everything about the local node that does not depend on the
cluster: host network, the local images, emulated GPUs, no storage provisioner. What does - the
API server's port, etcd's endpoint, a free loopback port per service (host network: ports are the
machine's), the ``iadeep-scheduler`` profile's extender URL, the folder of Gavel's measurements -
:func:`write_local_overlay` writes into a kustomization over it at rollout time, which
:func:`iadeep.orchestration.render` then renders like any other. Nothing machine-specific is
committed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from iadeep._host import free_port
from iadeep.orchestration._kube import GPU_NODE_LABEL

__all__ = ["LOCAL_SERVICES", "REAL_NODE_LABEL", "LocalCluster", "label_real_nodes", "local_overlay_dir",
           "prepare_local_rollout", "stage_throughputs", "write_local_overlay"]

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "iadeep-system"
#: Label of the local cluster's real nodes (:class:`iadeep.dev.Node` sets it).
REAL_NODE_LABEL = "iadeep.io/real-node"
#: Services that listen on a port of their own, as ``k8s/`` names their workload and container.
LOCAL_SERVICES: dict[str, tuple[str, str, str]] = {  # service -> (kind, workload, container)
    "extender": ("Deployment", "iadeep-extender", "extender"),
    "scheduler": ("Deployment", "iadeep-scheduler", "kube-scheduler"),
    "deviceplugin": ("DaemonSet", "iadeep-deviceplugin", "deviceplugin"),
    "coordinator": ("DaemonSet", "iadeep-coordinator", "coordinator"),
    "tuner": ("Deployment", "iadeep-tuner", "tuner"),
}
GAVEL_MOUNT = "/var/lib/iadeep/gavel"  # where the ConfigMaps of k8s/ expect simulation_throughputs.json


def local_overlay_dir() -> Path:
    """``k8s/local`` of this source checkout."""
    path = REPO / "k8s" / "local"
    if not (path / "kustomization.yaml").is_file():
        raise FileNotFoundError(f"{path}: no kustomization (the local rollout needs a source checkout of iadeep)")
    return path


@dataclass(frozen=True)
class LocalCluster:
    """What one rollout onto a local cluster needs to know about it.

    Attributes:
        apiserver_port: the API server's port on 127.0.0.1 (:meth:`from_kubeconfig` reads it).
        etcd_endpoints: etcd client URL(s) on loopback for ``IADEEP_ETCD_ENDPOINTS`` (comma-separated).
        throughputs_dir: host folder holding Gavel's ``simulation_throughputs.json``, mounted
            read-only into the extender, coordinator and tuner (:func:`stage_throughputs`).
        etcd_prefix: key prefix of iadeep's records in that etcd.
        ports: a free loopback port per service of :data:`LOCAL_SERVICES` (picked when omitted).
        node_env: further ``iadeep-node`` ConfigMap entries (e.g. ``IADEEP_DEVICEPLUGIN_EMULATED__COUNT``).
    """

    apiserver_port: int
    etcd_endpoints: str
    throughputs_dir: Path
    etcd_prefix: str = "/iadeep"
    ports: dict[str, int] = field(default_factory=lambda: {s: free_port() for s in LOCAL_SERVICES})
    node_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | Path, **kwargs: Any) -> LocalCluster:
        """The API server's port from the kubeconfig's current cluster, which must be on loopback.

        Raises:
            ValueError: the kubeconfig names no cluster, or its server is not on 127.0.0.1.
        """
        doc = yaml.safe_load(Path(kubeconfig).read_text()) or {}
        contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
        clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
        ctx = contexts.get(doc.get("current-context", ""), {})
        cluster = clusters.get(ctx.get("cluster", "")) or (next(iter(clusters.values())) if len(clusters) == 1 else None)
        if not cluster or not cluster.get("server"):
            raise ValueError(f"{kubeconfig}: no cluster server in its current context")
        url = urlsplit(cluster["server"])
        if url.hostname != "127.0.0.1" or url.port is None:
            raise ValueError(f"{kubeconfig}: server {cluster['server']} is not a local cluster's (https://127.0.0.1:PORT)")
        return cls(apiserver_port=url.port, **kwargs)

    def url(self, service: str, path: str = "") -> str:
        """``http://127.0.0.1:<port><path>`` of a service of :data:`LOCAL_SERVICES`."""
        return f"http://127.0.0.1:{self.ports[service]}{path}"


def stage_throughputs(source: Path, folder: Path) -> Path:
    """Copy Gavel's measurements into ``folder`` readable by the services' user (UID 65532; a
    hostPath is mounted as it is) and return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    dest = folder / "simulation_throughputs.json"
    shutil.copyfile(source, dest)
    dest.chmod(0o644)
    return folder


def _patches(c: LocalCluster) -> list[dict[str, Any]]:
    """Strategic-merge patches: the API server on loopback for every container (without
    ``KUBERNETES_SERVICE_HOST/PORT`` of its own a container gets the ``kubernetes`` Service's cluster
    IP from the kubelet, which nothing here routes), the scheduler's serving port, Gavel's folder."""
    api_env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
               {"name": "KUBERNETES_SERVICE_PORT", "value": str(c.apiserver_port)}]
    gavel_mount = {"name": "gavel", "mountPath": GAVEL_MOUNT, "readOnly": True}
    gavel_volume = {"name": "gavel", "hostPath": {"path": str(c.throughputs_dir), "type": "Directory"}}
    probe = {"httpGet": {"path": "/healthz", "port": c.ports["scheduler"], "scheme": "HTTPS"}}
    containers: dict[str, dict[str, Any]] = {
        "extender": {"volumeMounts": [gavel_mount]},
        "deviceplugin": {},
        "coordinator": {"volumeMounts": [gavel_mount]},
        "tuner": {"volumeMounts": [gavel_mount]},
        "scheduler": {
            "command": ["kube-scheduler", "--config=/etc/iadeep-scheduler/kube-scheduler-config.yaml",
                        "--bind-address=127.0.0.1", f"--secure-port={c.ports['scheduler']}"],
            "livenessProbe": {**probe, "initialDelaySeconds": 15}, "readinessProbe": probe,
        },
    }
    out = []
    for service, extra in containers.items():
        kind, name, container = LOCAL_SERVICES[service]
        spec: dict[str, Any] = {"containers": [{"name": container, "env": api_env, **extra}]}
        if "volumeMounts" in extra:
            spec["volumes"] = [gavel_volume]
        out.append({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"template": {"spec": spec}}})
    return out


def _port_patches(c: LocalCluster) -> list[dict[str, Any]]:
    """JSON patches of each service's one container port (a strategic merge would add a second one:
    ``containerPort`` is the list's merge key)."""
    out = []
    for service in ("extender", "deviceplugin", "coordinator", "tuner"):
        kind, name, _ = LOCAL_SERVICES[service]
        op = [{"op": "replace", "path": "/spec/template/spec/containers/0/ports/0/containerPort", "value": c.ports[service]}]
        out.append({"target": {"kind": kind, "name": name, "namespace": NAMESPACE}, "patch": yaml.safe_dump(op)})
    return out


def write_local_overlay(c: LocalCluster, out: Path, overlay: Path | None = None) -> Path:
    """Write a kustomization in ``out`` that is ``k8s/local`` (or ``overlay``) plus the values of ``c``.

    Returns:
        ``out``: render it with :func:`iadeep.orchestration.render` (``kustomization=out``) or
        apply it with ``kubectl apply -k``.
    """
    overlay = overlay or local_overlay_dir()
    out.mkdir(parents=True, exist_ok=True)
    scheduler = yaml.safe_load((overlay.parent / "extender" / "kube-scheduler-config.yaml").read_text())
    for ext in scheduler.get("extenders") or []:
        ext["urlPrefix"] = c.url("extender", urlsplit(ext["urlPrefix"]).path)
    (out / "kube-scheduler-config.yaml").write_text(yaml.safe_dump(scheduler, sort_keys=False))
    (out / "cluster.yaml").write_text(yaml.safe_dump_all(_patches(c), sort_keys=False))
    etcd = [f"IADEEP_ETCD_ENDPOINTS={c.etcd_endpoints}", f"IADEEP_ETCD_PREFIX={c.etcd_prefix}"]
    node = {"IADEEP_DEVICEPLUGIN_PORT": c.ports["deviceplugin"], "IADEEP_COORDINATOR_PORT": c.ports["coordinator"],
            "IADEEP_COORDINATOR_TUNER_URL": c.url("tuner"), "IADEEP_TUNER_PORT": c.ports["tuner"], **c.node_env}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, out)],
        "patches": [{"path": "cluster.yaml"}, *_port_patches(c)],
        "configMapGenerator": [
            {"name": "iadeep-extender", "namespace": NAMESPACE, "behavior": "merge",
             "literals": [*etcd, f"IADEEP_EXTENDER_PORT={c.ports['extender']}"]},
            {"name": "iadeep-node", "namespace": NAMESPACE, "behavior": "merge",
             "literals": [*etcd, *(f"{k}={v}" for k, v in node.items())]},
            {"name": "iadeep-scheduler-config", "namespace": NAMESPACE, "behavior": "replace",
             "files": ["kube-scheduler-config.yaml"]},
        ],
        "generatorOptions": {"disableNameSuffixHash": True},
    }
    (out / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return out


def prepare_local_rollout(out: Path, *, kubeconfig: str | Path, etcd_endpoints: str, throughputs_file: Path,
                          etcd_prefix: str = "/iadeep", node_env: dict[str, str] | None = None) -> tuple[LocalCluster, Path]:
    """Everything a rollout onto a local cluster's real node needs before :func:`render`: Gavel's
    measurements staged in ``out/gavel``, a free loopback port per service, the kustomization in
    ``out/overlay`` (the ``iadeep_rollout`` DAG's ``local`` mode and ``iadeep dev deploy``).

    Args:
        kubeconfig: the local cluster's kubeconfig (its server gives the API server's port).
        etcd_endpoints: the cluster's etcd on loopback (the services' state store).
        throughputs_file: Gavel's ``simulation_throughputs.json`` (``iadeep datasets fetch gavel-throughputs``).

    Returns:
        (the cluster's values, the kustomization folder to render).

    Raises:
        ValueError: the kubeconfig's server is not a local cluster's.
    """
    cluster = LocalCluster.from_kubeconfig(
        kubeconfig, etcd_endpoints=etcd_endpoints, etcd_prefix=etcd_prefix, node_env=dict(node_env or {}),
        throughputs_dir=stage_throughputs(Path(throughputs_file), out / "gavel"),
    )  # fmt: skip
    return cluster, write_local_overlay(cluster, out / "overlay")


def label_real_nodes(api: Any) -> list[str]:
    """Label the local cluster's Ready real nodes as GPU nodes (``iadeep.io/gpu-node=true``): the
    device plugin's DaemonSet runs only there, and it is what gives them (emulated) GPUs. A real
    node that is gone (its Node object left NotReady) is not labelled: the DaemonSets would wait
    for a pod there forever.

    Returns:
        the labelled nodes' names.

    Raises:
        RuntimeError: the cluster has no Ready node labelled ``iadeep.io/real-node=true``.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    names = [n.metadata.name for n in core.list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
             if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]
    if not names:
        raise RuntimeError(f"no Ready node labelled {REAL_NODE_LABEL}=true: start one (`iadeep dev node up` or "
                           "`iadeep dev cluster up --real-node`)")
    for name in names:
        core.patch_node(name, {"metadata": {"labels": {GPU_NODE_LABEL: "true"}}})
    return names
