"""Deploy ``k8s/local`` (the extender and ``iadeep-scheduler``) onto a local cluster's real node.

The committed overlay says everything that does not depend on the cluster; this module renders
it once more in a temporary kustomization with what does - the API server's port, etcd's
endpoint, a free port each for the extender and the scheduler (host network: ports are the
machine's), the scheduler configuration's extender URL, the Gavel measurements as a hostPath -
and applies it with ``kubectl apply -k`` (kustomize is built into kubectl; ``$IADEEP_KUBECTL`` or
``kubectl`` on ``$PATH``: ``make node`` does not build one yet, see tools/node/build.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from iadeep.dev._errors import ControlPlaneError

__all__ = ["LocalDeployment", "local_overlay_dir", "render_local_overlay"]

NAMESPACE = "iadeep-system"


def local_overlay_dir() -> Path:
    """``k8s/local`` of this source checkout."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "k8s" / "local" / "kustomization.yaml"
        if candidate.is_file():
            return candidate.parent
    raise ControlPlaneError("k8s/local not found: deploying needs a source checkout of iadeep")


@dataclass(frozen=True)
class LocalDeployment:
    """The cluster-specific values of one deployment of ``k8s/local``.

    Attributes:
        apiserver_port: the local API server's port on 127.0.0.1.
        etcd_endpoints: etcd client URLs for ``IADEEP_ETCD_ENDPOINTS`` (loopback).
        etcd_prefix: key prefix of iadeep's records in that etcd.
        extender_port / scheduler_port: free ports on 127.0.0.1 (the pods use the host network).
        throughputs_dir: host directory holding Gavel's ``simulation_throughputs.json``, mounted
            read-only at ``/var/lib/iadeep/gavel``.
    """

    apiserver_port: int
    etcd_endpoints: str
    extender_port: int
    scheduler_port: int
    throughputs_dir: Path
    etcd_prefix: str = "/iadeep"

    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.extender_port}/iadeep"


def _scheduler_config(base: Path, d: LocalDeployment) -> str:
    config = yaml.safe_load(base.read_text())
    for ext in config.get("extenders", []):
        path = urlsplit(ext["urlPrefix"]).path
        ext["urlPrefix"] = f"http://127.0.0.1:{d.extender_port}{path}"
    return yaml.safe_dump(config, sort_keys=False)


def _patches(d: LocalDeployment) -> list[dict[str, Any]]:
    api_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(d.apiserver_port)},
    ]
    extender = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "iadeep-extender", "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "extender",
                            "env": api_env,
                            "ports": [{"name": "http", "containerPort": d.extender_port, "protocol": "TCP"}],
                            "volumeMounts": [{"name": "gavel", "mountPath": "/var/lib/iadeep/gavel", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "gavel", "hostPath": {"path": str(d.throughputs_dir), "type": "Directory"}}],
                }
            }
        },
    }
    probe = {"httpGet": {"path": "/healthz", "port": d.scheduler_port, "scheme": "HTTPS"}}
    scheduler = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "iadeep-scheduler", "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "kube-scheduler",
                            "command": [
                                "kube-scheduler",
                                "--config=/etc/iadeep-scheduler/kube-scheduler-config.yaml",
                                "--bind-address=127.0.0.1",
                                f"--secure-port={d.scheduler_port}",
                            ],
                            "env": api_env,
                            "livenessProbe": {**probe, "initialDelaySeconds": 15},
                            "readinessProbe": probe,
                        }
                    ]
                }
            }
        },
    }
    return [extender, scheduler]


def render_local_overlay(d: LocalDeployment, out: Path, overlay: Path | None = None) -> Path:
    """Write a kustomization in ``out`` that is ``k8s/local`` plus the values of ``d``.

    Returns:
        ``out`` (apply it with ``kubectl apply -k``).
    """
    overlay = overlay or local_overlay_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "kube-scheduler-config.yaml").write_text(
        _scheduler_config(overlay.parent / "extender" / "kube-scheduler-config.yaml", d)
    )
    (out / "cluster.yaml").write_text(yaml.safe_dump_all(_patches(d), sort_keys=False))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, out)],
        "patches": [{"path": "cluster.yaml"}],
        "configMapGenerator": [
            {
                "name": "iadeep-extender",
                "namespace": NAMESPACE,
                "behavior": "merge",
                "literals": [
                    f"IADEEP_ETCD_ENDPOINTS={d.etcd_endpoints}",
                    f"IADEEP_ETCD_PREFIX={d.etcd_prefix}",
                    "IADEEP_EXTENDER_HOST=127.0.0.1",
                    f"IADEEP_EXTENDER_PORT={d.extender_port}",
                ],
            },
            {
                "name": "iadeep-scheduler-config",
                "namespace": NAMESPACE,
                "behavior": "replace",
                "files": ["kube-scheduler-config.yaml"],
            },
        ],
        "generatorOptions": {"disableNameSuffixHash": True},
    }
    (out / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return out


def prepare_throughputs(source: Path, node_dir: Path) -> Path:
    """Copy Gavel's measurements into a world-readable folder of the node (the extender runs as
    UID 65532 and the hostPath is mounted as it is) and return that folder."""
    target = node_dir / "data" / "gavel"
    target.mkdir(parents=True, exist_ok=True)
    target.chmod(0o755)
    dest = target / "simulation_throughputs.json"
    shutil.copyfile(source, dest)
    dest.chmod(0o644)
    return target


def find_kubectl() -> Path:
    """``$IADEEP_KUBECTL`` or ``kubectl`` on ``$PATH``.

    Raises:
        ControlPlaneError: neither is there.
    """
    found = os.environ.get("IADEEP_KUBECTL") or shutil.which("kubectl")
    if not found:
        raise ControlPlaneError("kubectl not found (set IADEEP_KUBECTL or put kubectl on PATH); it applies k8s/local with -k")
    return Path(found)


def kubectl_apply_k(kubectl: Path, kubeconfig: Path, directory: Path) -> str:
    """``kubectl apply -k DIRECTORY``; returns its output.

    Raises:
        ControlPlaneError: kubectl failed (its stderr is in the message).
    """
    res = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "apply", "--server-side", "--force-conflicts", "-k", str(directory)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise ControlPlaneError(f"kubectl apply -k {directory} failed: {res.stderr.strip()}")
    return res.stdout


def deploy_local(
    d: LocalDeployment, *, kubectl: Path, kubeconfig: Path, workdir: Path | None = None
) -> dict[str, Any]:
    """Render and apply; returns ``{"dir": rendered kustomization, "applied": kubectl's lines}``."""
    out = Path(tempfile.mkdtemp(prefix="iadeep-deploy-", dir=workdir)) if workdir else Path(tempfile.mkdtemp())
    render_local_overlay(d, out)
    applied = kubectl_apply_k(kubectl, kubeconfig, out)
    return {"dir": str(out), "applied": applied.splitlines(), "values": json.loads(json.dumps(d.__dict__, default=str))}
