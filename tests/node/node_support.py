"""Helpers of the real-node tests: pod manifests, waiting for phases, what teardown must remove."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from iadeep.dev import REAL_NODE_LABEL
from iadeep.dev._nodeclean import CONTAINER_LOG_LINKS, cgroup_hierarchies, cgroup_pids, mounts_under
from iadeep.testing import wait_for


def host_pod(name: str, image: str, command: list[str], *, node: str | None = None, **spec: Any) -> dict[str, Any]:
    """A hostNetwork pod of a local image (never pulled) for the real node."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}],
            **spec,
        },
    }
    if node is None:
        body["spec"]["nodeSelector"] = {REAL_NODE_LABEL: "true"}
    else:
        body["spec"]["nodeName"] = node
    return body


def wait_not_terminating(core: Any, namespace: str, timeout: float = 120.0) -> None:
    """Wait until ``namespace`` is absent or active: an earlier rollout's teardown deletes it
    without waiting, and while the namespace controller empties it the API server refuses new
    objects in it ("unable to create new content ... because it is being terminated")."""
    wait_for(lambda: [n.status.phase for n in core.list_namespace().items if n.metadata.name == namespace],
             lambda phase: phase in ([], ["Active"]), timeout=timeout, what=f"{namespace} not terminating")


def wait_phase(core: Any, namespace: str, name: str, phases: set[str], timeout: float = 120.0) -> Any:
    """Wait until the pod's phase is one of ``phases``; the assertion names the pod's status."""
    pod = wait_for(
        lambda: core.read_namespaced_pod(name, namespace),
        lambda p: p.status.phase in phases,
        timeout=timeout,
        what=f"pod {namespace}/{name} in {sorted(phases)}",
    )
    return pod


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry.name), cmdline.strip()))
    return found


def leftovers(workdir: Path, cgroup: str, kubelet_dir: Path | None = None) -> dict[str, list[Any]]:
    """Everything a stopped node must not leave behind; all lists empty when clean.
    ``kubelet_dir``: the kubelet's root directory when it was kept apart (``NodePaths.kubelet_dir``):
    it must be gone too, with nothing mounted below it."""
    folders = [workdir] + ([kubelet_dir] if kubelet_dir is not None else [])
    links = []
    if CONTAINER_LOG_LINKS.is_dir():
        roots = tuple(str(d.resolve()) for d in folders)
        links = [str(p) for p in CONTAINER_LOG_LINKS.iterdir() if p.is_symlink() and os.readlink(p).startswith(roots)]
    pids = sorted(cgroup_pids(cgroup))
    mounts: set[str] = set()
    for d in folders:
        mounts.update(mounts_under(d))  # this (the host's) namespace, and the node's own (_node.py)
        for pid in pids:
            with contextlib.suppress(OSError):
                mounts.update(mounts_under(d, pid))
    return {
        "processes": sorted({p for d in folders for p in processes_mentioning(str(d))}),
        "cgroup_pids": pids,
        "mounts": sorted(mounts),
        "cgroups": [str(h / cgroup.strip("/")) for h in cgroup_hierarchies() if (h / cgroup.strip("/")).exists()],
        "log_links": links,
        "kubelet_dir": [str(kubelet_dir)] if kubelet_dir is not None and kubelet_dir.exists() else [],
    }


def pod_log(core: Any, namespace: str, name: str) -> str:
    """The pod's log through the API (apiserver -> kubelet), as text (the client's own decoding
    of this endpoint returns the repr of bytes)."""
    resp = core.read_namespaced_pod_log(name, namespace, _preload_content=False)
    return resp.data.decode()


def rbac_for(manifest: Path, namespace: str, suffix: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The ServiceAccounts, ClusterRoles and ClusterRoleBindings of a shipped RBAC manifest
    (``k8s/*/rbac.yaml``), moved to ``namespace`` and with cluster-scoped names ending in
    ``suffix`` (several test modules share one cluster). Returns the objects in creation order
    and the map shipped service-account name -> its name here (the same)."""
    import yaml

    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    out, accounts = [], {}
    for d in docs:
        d = dict(d, metadata=dict(d["metadata"]))
        if d["kind"] == "ServiceAccount":
            d["metadata"]["namespace"] = namespace
            accounts[d["metadata"]["name"]] = d["metadata"]["name"]
        elif d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] += suffix
            if d["kind"] == "ClusterRoleBinding":
                d["roleRef"] = dict(d["roleRef"], name=d["roleRef"]["name"] + suffix)
                d["subjects"] = [dict(s, namespace=namespace) for s in d["subjects"]]
        out.append(d)
    return out, accounts
