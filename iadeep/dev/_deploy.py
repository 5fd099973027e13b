"""``iadeep dev deploy``: roll every component out onto a local cluster's real node.

The same steps as the ``iadeep_rollout`` DAG with ``local`` (:mod:`iadeep.orchestration`):
``k8s/local`` with the cluster's own ports written over it, rendered with ``kubectl kustomize``,
applied server-side, waited for. kubectl is ``$IADEEP_KUBECTL`` or ``kubectl`` on ``$PATH``
(``make node`` does not build one; Debian's ``kubectl`` package works).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from iadeep.dev._errors import ControlPlaneError
from iadeep.orchestration import (COMPONENTS, api_client, apply, label_real_nodes, local_overlay_dir, prepare_local_rollout,
                                  render, stage_throughputs, wait_ready)

__all__ = ["deploy_local", "find_kubectl", "local_scheduler_tag", "prepare_throughputs"]


def prepare_throughputs(source: Path, node_dir: Path) -> Path:
    """Copy Gavel's measurements into a world-readable folder of the node (the services run as
    UID 65532 and a hostPath is mounted as it is) and return that folder."""
    return stage_throughputs(source, node_dir / "data" / "gavel")


def local_scheduler_tag() -> str:
    """The kube-scheduler image tag ``k8s/local`` names (the image is made from the cluster's own binary)."""
    images = yaml.safe_load((local_overlay_dir() / "kustomization.yaml").read_text()).get("images") or []
    tags = [i["newTag"] for i in images if str(i.get("name", "")).endswith("/kube-scheduler")]
    if len(tags) != 1:
        raise ControlPlaneError(f"{local_overlay_dir()}: expected one kube-scheduler image, found {tags}")
    return str(tags[0])


def find_kubectl() -> Path:
    """``$IADEEP_KUBECTL`` or ``kubectl`` on ``$PATH``.

    Raises:
        ControlPlaneError: neither is there.
    """
    found = os.environ.get("IADEEP_KUBECTL") or shutil.which("kubectl")
    if not found:
        raise ControlPlaneError("kubectl not found (set IADEEP_KUBECTL or put kubectl on PATH); it renders and applies k8s/local")
    return Path(found)


def deploy_local(*, kubeconfig: Path, etcd_endpoints: str, throughputs_file: Path, workdir: Path,
                 timeout_s: float = 300.0) -> dict[str, Any]:
    """Render, apply and wait for every component on the cluster's real node.

    Returns:
        ``{"dir": the rendered kustomization, "applied": kubectl's lines, "ready": workload -> "ready",
        "cluster": its :class:`~iadeep.orchestration.LocalCluster`}``.

    Raises:
        ControlPlaneError: kubectl, the kubeconfig or a workload's readiness failed (the message says which).
    """
    kubectl = str(find_kubectl())
    out = Path(tempfile.mkdtemp(prefix="iadeep-deploy-", dir=workdir))
    try:
        cluster, overlay = prepare_local_rollout(out, kubeconfig=kubeconfig, etcd_endpoints=etcd_endpoints,
                                                 throughputs_file=throughputs_file)
        docs = render(list(COMPONENTS), kustomization=overlay, kubectl=kubectl)
        api = api_client(kubeconfig)
        try:
            label_real_nodes(api)
            applied = apply(docs, kubeconfig=str(kubeconfig), kubectl=kubectl, field_manager="iadeep-dev")
            ready = wait_ready(api, docs, timeout_s=timeout_s)
        finally:
            api.close()
    except (RuntimeError, ValueError, TimeoutError) as exc:
        raise ControlPlaneError(f"deploying k8s/local: {exc}") from exc
    return {"dir": str(overlay), "applied": applied, "ready": ready, "cluster": cluster}

