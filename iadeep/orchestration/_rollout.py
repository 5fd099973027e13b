"""Roll out the middleware's components from the kustomizations in ``k8s/``.

``k8s/extender`` (the extender and the ``iadeep-scheduler`` second scheduler) and ``k8s/node``
(device plugin, coordinator, tuner) are rendered with ``kubectl kustomize``; :func:`render` keeps
the chosen components' objects (by their ``app.kubernetes.io/name`` label, plus the shared objects
without one: namespace, ConfigMaps) and sets their images; :func:`apply` applies them server-side
(``kubectl apply --server-side``: re-applying changes nothing, so retries are safe) and
:func:`wait_ready` waits for each Deployment/DaemonSet/StatefulSet's rollout.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

__all__ = ["COMPONENTS", "render", "apply", "wait_ready"]

REPO = Path(__file__).resolve().parents[2]
#: component -> (kustomization under k8s/, objects' app.kubernetes.io/name values)
COMPONENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "extender": ("extender", ("iadeep-extender", "iadeep-scheduler")),
    "deviceplugin": ("node", ("iadeep-deviceplugin",)),
    "coordinator": ("node", ("iadeep-coordinator",)),
    "tuner": ("node", ("iadeep-tuner",)),
}
IMAGE = "ghcr.io/iadeep/iadeep"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


def render(components: list[str], *, image: str = IMAGE, tag: str = "0.1.0", scheduler_image: str | None = None,
           kubectl: str = "kubectl", k8s_dir: Path | None = None,
           kustomization: str | Path | None = None) -> list[dict[str, Any]]:
    """The objects of ``components`` with the middleware image ``image:tag``.

    Args:
        scheduler_image: the ``iadeep-scheduler`` pod's kube-scheduler image (``None``: as committed).
        kustomization: one kustomization holding every component (an overlay such as the one
            :func:`iadeep.orchestration.write_local_overlay` writes); ``None``: ``k8s/extender``
            and ``k8s/node``. Containers whose image is not ``ghcr.io/iadeep/iadeep`` (an
            overlay's own images) keep it.

    Raises:
        ValueError: an unknown component (the message lists the known ones).
        RuntimeError: ``kubectl kustomize`` failed (its error output).
    """
    bad = sorted(set(components) - set(COMPONENTS))
    if bad or not components:
        raise ValueError(f"unknown components {bad or '(none given)'}; known: {', '.join(COMPONENTS)}")
    base = k8s_dir or REPO / "k8s"
    docs: list[dict[str, Any]] = []
    dirs = {Path(kustomization): components} if kustomization else {
        base / k: [c for c in components if COMPONENTS[c][0] == k] for k in dict.fromkeys(COMPONENTS[c][0] for c in components)}
    for path, chosen in dirs.items():
        res = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"kubectl kustomize {path}: {res.stderr.strip()}")
        wanted = {n for c in chosen for n in COMPONENTS[c][1]}
        for doc in yaml.safe_load_all(res.stdout):
            if not doc:
                continue
            name = ((doc.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name")
            if name is None or name in wanted:
                docs.append(doc)
    for doc in docs:
        pod = (((doc.get("spec") or {}).get("template") or {}).get("spec")) or {}
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            if c.get("image", "").startswith(IMAGE + ":"):
                c["image"] = f"{image}:{tag}"
            elif scheduler_image and "kube-scheduler" in c.get("image", ""):
                c["image"] = scheduler_image
    return docs


def apply(docs: list[dict[str, Any]], *, kubeconfig: str | None, kubectl: str = "kubectl",
          field_manager: str = "iadeep-airflow") -> list[str]:
    """``kubectl apply --server-side`` of ``docs``; returns kubectl's lines (one per object).

    Raises:
        RuntimeError: kubectl failed (its error output).
    """
    argv = [kubectl, *( [f"--kubeconfig={kubeconfig}"] if kubeconfig else []), "apply", "--server-side",
            "--force-conflicts", f"--field-manager={field_manager}", "-f", "-"]
    res = subprocess.run(argv, input=yaml.safe_dump_all(docs, sort_keys=False), capture_output=True, text=True,
                         timeout=120, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"kubectl apply failed: {res.stderr.strip()}")
    return res.stdout.splitlines()


def wait_ready(api: Any, docs: list[dict[str, Any]], timeout_s: float = 300.0) -> dict[str, str]:
    """Until every workload in ``docs`` has all replicas updated and ready.

    A workload counts only once its controller has seen its current spec (``status.observedGeneration``
    at ``metadata.generation``): right after an apply the status is still empty or the old one's,
    and would read as "0 of 0 ready". Deployments and StatefulSets want ``spec.replicas``; a
    DaemonSet wants one pod per node it selects (none selected counts as ready).

    Returns:
        ``{"Kind/namespace/name": "ready"}``.

    Raises:
        TimeoutError: names the workloads not ready and their ready/desired counts.
    """
    from kubernetes import client

    apps = client.AppsV1Api(api)
    read = {"Deployment": apps.read_namespaced_deployment_status, "DaemonSet": apps.read_namespaced_daemon_set_status,
            "StatefulSet": apps.read_namespaced_stateful_set_status}
    pending = {(d["kind"], d["metadata"].get("namespace", "default"), d["metadata"]["name"])
               for d in docs if d.get("kind") in WORKLOADS}
    status: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while pending:
        for kind, ns, name in sorted(pending):
            obj = read[kind](name, ns)
            s, key = obj.status, f"{kind}/{ns}/{name}"
            if (s.observed_generation or 0) < (obj.metadata.generation or 1):
                status[key] = "not observed by its controller yet"
                continue
            if kind == "DaemonSet":
                want, ready, updated = s.desired_number_scheduled or 0, s.number_ready or 0, s.updated_number_scheduled or 0
                total = s.current_number_scheduled or 0
            else:
                want = 1 if obj.spec.replicas is None else obj.spec.replicas
                ready, updated, total = s.ready_replicas or 0, s.updated_replicas or 0, s.replicas or 0
            status[key] = f"{ready}/{want} ready, {updated}/{want} updated"
            if ready >= want and updated >= want and total <= want:
                pending.discard((kind, ns, name))
                status[key] = "ready"
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {timeout_s:.0f}s: " + ", ".join(f"{k}: {v}" for k, v in status.items() if v != "ready"))
        if pending:
            time.sleep(1.0)
    return status
