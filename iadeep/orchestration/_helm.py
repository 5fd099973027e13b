"""Roll out the middleware with its Helm chart (``charts/iadeep``): the ``helm`` method of the
``iadeep_rollout`` DAG, next to the kustomize one (:mod:`._rollout`).

The chart and the kustomize bases render the same objects for the same settings
(``tests/helm/test_chart_render.py`` compares them): the chart's defaults are ``k8s/extender`` +
``k8s/node``, and :func:`local_values` are the values that make it ``k8s/local`` with a local
cluster's own ports written over it (what :func:`iadeep.orchestration.write_local_overlay`
writes as a kustomization).

A release holds every component. ``components`` of a rollout chooses which ones get the new
image (:func:`rollout_values`); the others keep the image the installed release gives them.
:func:`template` renders (``helm template``), :func:`upgrade_install` installs or upgrades
(``helm upgrade --install``: running it again with the same values changes nothing, so retries
are safe), :func:`uninstall` removes the release; readiness is :func:`iadeep.orchestration.wait_ready`
over the rendered objects, as for kustomize.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from iadeep.orchestration._local import GAVEL_MOUNT, REAL_NODE_LABEL, LocalCluster

__all__ = ["CHART", "RELEASE", "deep_merge", "find_helm", "local_values", "release_values", "rollout_values", "template",
           "uninstall", "upgrade_install"]

REPO = Path(__file__).resolve().parents[2]
#: The chart of this source checkout.
CHART = REPO / "charts" / "iadeep"
#: Release name of the rollouts (one release per cluster: the chart's cluster-scoped objects have fixed names).
RELEASE = "iadeep"
NAMESPACE = "iadeep-system"
#: rollout component -> the chart's values sections it covers
COMPONENT_VALUES: dict[str, tuple[str, ...]] = {
    "extender": ("extender",),
    "deviceplugin": ("deviceplugin",),
    "coordinator": ("coordinator",),
    "tuner": ("tuner",),
}


def find_helm() -> Path:
    """``$IADEEP_HELM``, else the binary ``make helm`` built (``tools/helm/build.sh --print-dir``),
    else ``helm`` on ``$PATH``.

    Raises:
        FileNotFoundError: none of them is there (the message says how to build it).
    """
    if os.environ.get("IADEEP_HELM"):
        return Path(os.environ["IADEEP_HELM"])
    script = REPO / "tools" / "helm" / "build.sh"
    if script.is_file():
        res = subprocess.run(["bash", str(script), "--print-dir"], capture_output=True, text=True, timeout=30, check=False)
        built = Path(res.stdout.strip()) / "helm"
        if res.returncode == 0 and os.access(built, os.X_OK):
            return built
    found = shutil.which("helm")
    if found:
        return Path(found)
    raise FileNotFoundError("helm not found: run `make helm` (builds it from Go modules into ~/.cache/iadeep/helm), "
                            "set IADEEP_HELM, or put helm on PATH")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, maps recursively (as Helm merges values files); neither is changed."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def local_values(c: LocalCluster) -> dict[str, Any]:
    """Values that make the chart render ``k8s/local`` with the cluster ``c``'s values over it:
    every service on the host network of the real node (``iadeep.io/real-node``), images from
    ``make images`` (never pulled), the API server and the others on 127.0.0.1, emulated GPUs,
    Gavel's measurements from ``c.throughputs_dir`` (hostPath), the tuner's studies in an emptyDir.
    """
    local = {"hostNetwork": True, "nodeSelector": {REAL_NODE_LABEL: "true"}}
    gavel_mount = [{"name": "gavel", "mountPath": GAVEL_MOUNT, "readOnly": True}]
    gavel_volume = [{"name": "gavel", "hostPath": {"path": str(c.throughputs_dir), "type": "Directory"}}]

    def image(name: str) -> dict[str, str]:
        return {"repository": f"localhost/iadeep/{name}", "tag": "dev", "pullPolicy": "Never"}

    return {
        "etcd": {"endpoints": c.etcd_endpoints.split(","), "prefix": c.etcd_prefix},
        "kubernetesAPI": {"host": "127.0.0.1", "port": str(c.apiserver_port)},
        "extender": {**local, "image": image("extender"), "host": "127.0.0.1", "port": c.ports["extender"],
                     "strategy": {"type": "Recreate"}, "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                     "extraEnv": [{"name": "IADEEP_EXTENDER_HOST", "value": "127.0.0.1"}],
                     "extraVolumes": gavel_volume, "extraVolumeMounts": gavel_mount},
        "scheduler": {**local, "image": {"repository": "localhost/iadeep/kube-scheduler", "tag": local_scheduler_tag(),
                                         "pullPolicy": "Never"},
                      "extenderURL": c.url("extender", "/iadeep"), "bindAddress": "127.0.0.1",
                      "securePort": c.ports["scheduler"], "strategy": {"type": "Recreate"},
                      "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}}},
        "nodeConfig": {"IADEEP_DEVICEPLUGIN_EMULATED__COUNT": "2", "IADEEP_DEVICEPLUGIN_EMULATED__MEM_GIB": "16",
                       **c.node_env},
        "deviceplugin": {**local, "image": image("deviceplugin"), "backend": "emulated", "host": "127.0.0.1",
                         "port": c.ports["deviceplugin"]},
        "coordinator": {**local, "image": image("coordinator"), "host": "127.0.0.1", "port": c.ports["coordinator"],
                        "tunerURL": c.url("tuner"), "resources": {"requests": {"cpu": "20m"}},
                        "extraVolumes": gavel_volume, "extraVolumeMounts": gavel_mount},
        "tuner": {**local, "image": image("tuner"), "host": "127.0.0.1", "port": c.ports["tuner"],
                  "persistence": {"enabled": False}, "resources": {"requests": {"cpu": "20m"}},
                  "extraVolumes": gavel_volume, "extraVolumeMounts": gavel_mount},
    }


def local_scheduler_tag() -> str:
    """The kube-scheduler image tag ``k8s/local`` names (the image made from the cluster's own binary).

    Raises:
        ValueError: ``k8s/local/kustomization.yaml`` names no or several kube-scheduler images.
    """
    path = REPO / "k8s" / "local" / "kustomization.yaml"
    images = (yaml.safe_load(path.read_text()) or {}).get("images") or []
    tags = [i["newTag"] for i in images if str(i.get("name", "")).endswith("/kube-scheduler")]
    if len(tags) != 1:
        raise ValueError(f"{path}: expected one kube-scheduler image, found {tags}")
    return str(tags[0])


def rollout_values(components: list[str], *, image: str | None, tag: str | None, scheduler_image: str | None = None,
                   base: dict[str, Any] | None = None, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values of one rollout: ``base`` (e.g. :func:`local_values`; ``None``: the chart's
    defaults), each component not in ``components`` with its image from ``current`` (the installed
    release's values, :func:`release_values`), each one in it with ``image:tag`` (``None``: as in
    ``base``).

    Args:
        scheduler_image: ``repository:tag`` of the ``iadeep-scheduler`` pod (``None``: as in ``base``).

    Raises:
        ValueError: an unknown component (the message lists the known ones), or a
            ``scheduler_image`` without a tag.
    """
    bad = sorted(set(components) - set(COMPONENT_VALUES))
    if bad or not components:
        raise ValueError(f"unknown components {bad or '(none given)'}; known: {', '.join(COMPONENT_VALUES)}")
    values = dict(base or {})
    for comp, sections in COMPONENT_VALUES.items():
        for section in sections:
            if comp in components:
                over = {k: v for k, v in (("repository", image), ("tag", tag)) if v is not None}
            else:
                over = ((current or {}).get(section) or {}).get("image") or {}
            if over:
                values = deep_merge(values, {section: {"image": over}})
    if scheduler_image is not None:
        repo, sep, stag = scheduler_image.rpartition(":")
        if not sep or not repo or "/" in stag:
            raise ValueError(f"scheduler_image {scheduler_image!r}: expected repository:tag")
        values = deep_merge(values, {"scheduler": {"image": {"repository": repo, "tag": stag}}})
    return values


def _run(argv: list[str], what: str, *, timeout_s: float, stdin: str | None = None) -> str:
    res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def _common(helm: Path | str | None, kubeconfig: str | Path | None, namespace: str) -> list[str]:
    return [str(helm or find_helm()), *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []), f"--namespace={namespace}"]


def template(values: dict[str, Any], *, release: str = RELEASE, namespace: str = NAMESPACE, chart: Path = CHART,
             helm: Path | str | None = None) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``values``: the parsed objects, in the chart's order.

    Raises:
        RuntimeError: helm refused the values (its message names the field) or the chart.
    """
    out = _run([*_common(helm, None, namespace), "template", release, str(chart), "--values=-"],
               f"helm template {chart}", timeout_s=120, stdin=yaml.safe_dump(values))
    return [d for d in yaml.safe_load_all(out) if d]


def release_values(*, release: str = RELEASE, namespace: str = NAMESPACE, kubeconfig: str | Path | None = None,
                   helm: Path | str | None = None) -> dict[str, Any] | None:
    """The values the installed release was given (``helm get values``), ``None`` when there is none.

    Raises:
        RuntimeError: helm failed for another reason than a missing release.
    """
    argv = [*_common(helm, kubeconfig, namespace), "get", "values", release, "--output=json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        if "not found" in res.stderr:
            return None
        raise RuntimeError(f"helm get values {release}: {res.stderr.strip()}")
    return json.loads(res.stdout or "null") or {}


def upgrade_install(values: dict[str, Any], *, kubeconfig: str | Path | None, release: str = RELEASE,
                    namespace: str = NAMESPACE, chart: Path = CHART, helm: Path | str | None = None,
                    timeout_s: float = 300.0) -> str:
    """``helm upgrade --install`` of the chart with ``values`` (creating the namespace when it is
    missing); returns helm's output. Readiness is not waited for here
    (:func:`iadeep.orchestration.wait_ready` over :func:`template`'s objects).

    Raises:
        RuntimeError: helm failed (its message).
    """
    return _run([*_common(helm, kubeconfig, namespace), "upgrade", release, str(chart), "--install", "--create-namespace",
                 "--values=-", f"--timeout={int(timeout_s)}s"], f"helm upgrade --install {release}", timeout_s=timeout_s + 60,
                stdin=yaml.safe_dump(values))


def uninstall(*, kubeconfig: str | Path | None, release: str = RELEASE, namespace: str = NAMESPACE,
              helm: Path | str | None = None, timeout_s: float = 300.0) -> str:
    """``helm uninstall --wait`` of the release: returns once its objects are deleted (pods included).

    Raises:
        RuntimeError: helm failed (its message).
    """
    return _run([*_common(helm, kubeconfig, namespace), "uninstall", release, "--wait", f"--timeout={int(timeout_s)}s"],
                f"helm uninstall {release}", timeout_s=timeout_s + 60)
