"""The chart ``charts/iadeep`` against the kustomize bases, without a cluster: ``helm lint``; the
chart's defaults render the objects of ``k8s/extender`` + ``k8s/node`` and its local values those
of ``k8s/local`` with a cluster's values over it (parsed objects compared, not text); the values
schema refuses bad values naming the field; the Prometheus Operator objects and the dashboard
appear only when asked for; a rollout's values change only the chosen components' images."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from iadeep.orchestration import (CHART, COMPONENTS, SCRAPED_SERVICES, LocalCluster, local_values, render, rollout_values, template,
                                  write_local_overlay)

HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")
SCHEDULER_FILE = "kube-scheduler-config.yaml"

Key = tuple[str, str, str]


def _sort_named(value: Any) -> Any:
    """Lists whose items all carry a ``name`` (containers, env, volumes, mounts, ports) sorted by
    it: the API treats them as maps keyed by name, and a kustomize patch appends where a template
    writes in place."""
    if isinstance(value, dict):
        return {k: _sort_named(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_sort_named(v) for v in value]
        if items and all(isinstance(i, dict) and "name" in i for i in items):
            items.sort(key=lambda i: str(i["name"]))
        return items
    return value


def normalised(doc: dict[str, Any], *, drop_annotations: tuple[str, ...] = ()) -> dict[str, Any]:
    """``doc`` less what only Helm adds: its three labels and the ``checksum/`` annotations that
    roll a pod when its ConfigMap changes; the scheduler's configuration file parsed."""
    doc = copy.deepcopy(doc)
    metas = [doc.get("metadata") or {}, (((doc.get("spec") or {}).get("template") or {}).get("metadata")) or {}]
    for meta in metas:
        labels = meta.get("labels") or {}
        for k in HELM_LABELS:
            labels.pop(k, None)
        if "labels" in meta and not labels:
            del meta["labels"]
        ann = meta.get("annotations") or {}
        for k in [k for k in ann if k.startswith("checksum/") or k in drop_annotations]:
            del ann[k]
        if "annotations" in meta and not ann:
            del meta["annotations"]
    data = doc.get("data") or {}
    if doc["kind"] == "ConfigMap" and SCHEDULER_FILE in data:
        data[SCHEDULER_FILE] = yaml.safe_load(data[SCHEDULER_FILE])
    return _sort_named(doc)


def by_key(docs: list[dict[str, Any]], **kw: Any) -> dict[Key, dict[str, Any]]:
    out = {}
    for d in docs:
        key = (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = normalised(d, **kw)
    return out


def assert_same_objects(kustomized: dict[Key, Any], charted: dict[Key, Any]) -> None:
    assert sorted(kustomized) == sorted(charted)
    for key in kustomized:
        if kustomized[key] != charted[key]:  # the first differing object, in full, both ways
            pytest.fail(f"{key} differs:\nkustomize:\n{yaml.safe_dump(kustomized[key])}\nhelm:\n"
                        f"{yaml.safe_dump(charted[key])}", pytrace=False)


def test_helm_lint_passes_strict(helm: Path) -> None:
    res = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 chart(s) failed" in res.stdout


def test_the_defaults_render_the_objects_of_the_kustomize_bases(helm: Path) -> None:
    # The Namespace is the one object the chart leaves to `helm install --create-namespace`.
    kustomized = by_key([d for d in render(list(COMPONENTS)) if d["kind"] != "Namespace"])
    charted = by_key(template({}, helm=helm))
    assert_same_objects(kustomized, charted)
    # and the Helm labels are on every object, so that a release's objects can be found
    for d in template({}, helm=helm):
        assert d["metadata"]["labels"]["app.kubernetes.io/instance"] == "iadeep", d["metadata"]["name"]


def test_the_local_values_render_the_local_overlay_with_the_clusters_values(helm: Path, tmp_path: Path) -> None:
    c = LocalCluster(apiserver_port=6443, etcd_endpoints="http://127.0.0.1:2379,http://127.0.0.1:2380",
                     throughputs_dir=tmp_path / "gavel", etcd_prefix="/t-local",
                     node_env={"IADEEP_DEVICEPLUGIN_EMULATED__COUNT": "4"})
    overlay = write_local_overlay(c, tmp_path / "overlay")
    # k8s/local moves the services' ports but not their prometheus.io/port annotations; the chart does.
    kustomized = by_key([d for d in render(list(COMPONENTS), kustomization=overlay) if d["kind"] != "Namespace"],
                        drop_annotations=("prometheus.io/port",))
    charted = template(local_values(c), helm=helm)
    assert_same_objects(kustomized, by_key(charted, drop_annotations=("prometheus.io/port",)))
    extender = next(d for d in charted if d["kind"] == "Deployment" and d["metadata"]["name"] == "iadeep-extender")
    annotations = extender["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(c.ports["extender"])
    # all traffic of the local cluster stays on loopback: every pod on the host network, every
    # address it is given (env, args, configuration) in 127.0.0.0/8, the API server included
    import ipaddress
    import re

    pods = [d["spec"]["template"]["spec"] for d in charted if d["kind"] in ("Deployment", "DaemonSet")]
    assert pods and all(p.get("hostNetwork") for p in pods)
    text = yaml.safe_dump_all(charted)
    addresses = {ipaddress.ip_address(a) for a in re.findall(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])", text)}
    assert addresses and all(a.is_loopback for a in addresses), sorted(map(str, addresses))


def test_a_release_in_another_namespace_points_every_address_there(helm: Path) -> None:
    docs = template({}, namespace="gpu-system", helm=helm)
    assert {d["metadata"].get("namespace") for d in docs} == {"gpu-system", "kube-system", None}
    sched = yaml.safe_load(next(d for d in docs if d["metadata"]["name"] == "iadeep-scheduler-config")["data"][SCHEDULER_FILE])
    assert sched["extenders"][0]["urlPrefix"] == "http://iadeep-extender.gpu-system.svc:8888/iadeep"
    assert sched["leaderElection"]["resourceNamespace"] == "gpu-system"
    node = next(d for d in docs if d["metadata"]["name"] == "iadeep-node")["data"]
    assert node["IADEEP_COORDINATOR_TUNER_URL"] == "http://iadeep-tuner.gpu-system.svc:8890"
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    assert "system:serviceaccount:gpu-system:iadeep-extender" in policy["spec"]["matchConditions"][0]["expression"]
    for d in docs:
        for s in d.get("subjects") or []:
            assert s["namespace"] == "gpu-system", d["metadata"]["name"]


def test_the_settings_values_reach_the_services_configuration(helm: Path) -> None:
    docs = template({"policy": "gandiva", "colocationLimit": 3, "etcd": {"endpoints": ["http://etcd-a:2379", "http://etcd-b:2379"]},
                     "extender": {"undoBelow": 0.85}, "image": {"tag": "0.2.0"},
                     "deviceplugin": {"nodeSelector": {"pool": "a100"}, "image": {"tag": "0.2.1"}}}, helm=helm)
    ext = next(d for d in docs if d["metadata"]["name"] == "iadeep-extender" and d["kind"] == "ConfigMap")["data"]
    assert ext["IADEEP_EXTENDER_POLICY"] == "gandiva" and ext["IADEEP_EXTENDER_COLOCATION_LIMIT"] == "3"
    assert ext["IADEEP_ETCD_ENDPOINTS"] == "http://etcd-a:2379,http://etcd-b:2379"
    assert ext["IADEEP_EXTENDER_UNDO_BELOW"] == "0.85"
    images = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["image"]
              for d in docs if d["kind"] in ("Deployment", "DaemonSet")}
    assert images == {"iadeep-extender": "ghcr.io/iadeep/iadeep:0.2.0", "iadeep-tuner": "ghcr.io/iadeep/iadeep:0.2.0",
                      "iadeep-coordinator": "ghcr.io/iadeep/iadeep:0.2.0", "iadeep-deviceplugin": "ghcr.io/iadeep/iadeep:0.2.1",
                      "iadeep-scheduler": "registry.k8s.io/kube-scheduler:v1.36.3"}
    plugin = next(d for d in docs if d["metadata"]["name"] == "iadeep-deviceplugin" and d["kind"] == "DaemonSet")
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"iadeep.io/gpu-node": "true", "pool": "a100"}


def test_the_schedulers_feature_gates_turn_on_kubernetes_gang_scheduling(helm: Path) -> None:
    def command(values):
        docs = template(values, helm=helm)
        sched = next(d for d in docs if d["metadata"]["name"] == "iadeep-scheduler" and d["kind"] == "Deployment")
        return sched["spec"]["template"]["spec"]["containers"][0]["command"]

    assert not [a for a in command({}) if a.startswith("--feature-gates")]
    gates = command({"scheduler": {"featureGates": {"GenericWorkload": True, "GangScheduling": True}}})
    assert "--feature-gates=GangScheduling=true,GenericWorkload=true" in gates


@pytest.mark.parametrize(("values", "message"), [
    ({"deviceplugin": {"backend": "cuda"}}, "at '/deviceplugin/backend': value must be one of 'nvml', 'emulated'"),
    ({"scheduler": {"featureGates": {"GangScheduling": "yes"}}}, "at '/scheduler/featureGates/GangScheduling'"),
    ({"extender": {"prot": 8888}}, "at '/extender': additional properties 'prot' not allowed"),
    ({"etcd": {"endpoints": ["127.0.0.1:2379"]}}, "at '/etcd/endpoints/0'"),
    ({"colocationLimit": 0}, "at '/colocationLimit'"),
    ({"tuner": {"port": 70000}}, "at '/tuner/port'"),
])
def test_the_schema_refuses_bad_values_naming_the_field(helm: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RuntimeError) as err:
        template(values, helm=helm)
    assert message in str(err.value)


def test_monitors_and_dashboard_only_when_enabled(helm: Path) -> None:
    kinds = {d["kind"] for d in template({}, helm=helm)}
    assert not kinds & {"PodMonitor", "ServiceMonitor"}
    assert "iadeep-dashboard" not in {d["metadata"]["name"] for d in template({}, helm=helm)}
    docs = template({"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}},
                                 "serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}}}, helm=helm)
    pods = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Deployment", "DaemonSet")}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for kind in ("PodMonitor", "ServiceMonitor"):
        monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
        assert set(monitors) == set(SCRAPED_SERVICES.values()), kind  # every service serving /metrics
        for name, mon in monitors.items():
            (endpoint,) = mon["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
            assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
            selector = mon["spec"]["selector"]["matchLabels"]
            pod = pods[name]["spec"]["template"]
            if kind == "PodMonitor":  # selects the pods, whose container names the port
                assert selector.items() <= pod["metadata"]["labels"].items()
                assert any(p["name"] == "http" for p in pod["spec"]["containers"][0]["ports"])
            else:  # selects a Service of the pods with that port
                svc = next(s for s in services.values() if selector.items() <= s["metadata"]["labels"].items()
                           and s["spec"]["selector"].items() <= pod["metadata"]["labels"].items())
                assert any(p["name"] == "http" for p in svc["spec"]["ports"])
        if kind == "PodMonitor":
            assert all(m["metadata"]["labels"]["release"] == "kube-prometheus" for m in monitors.values())
    board = next(d for d in docs if d["metadata"]["name"] == "iadeep-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["iadeep.json"]) == json.loads((CHART / "dashboards" / "iadeep.json").read_text())


def test_a_rollout_gives_the_new_image_only_to_the_chosen_components() -> None:
    current = {"extender": {"image": {"tag": "0.1.0"}}, "tuner": {"image": {"repository": "r/t", "tag": "0.0.9"}}}
    values = rollout_values(["extender", "coordinator"], image="ghcr.io/iadeep/iadeep", tag="0.1.1",
                            scheduler_image="localhost/kube-scheduler:v1", current=current)
    assert values["extender"]["image"] == values["coordinator"]["image"] == {"repository": "ghcr.io/iadeep/iadeep", "tag": "0.1.1"}
    assert values["tuner"]["image"] == {"repository": "r/t", "tag": "0.0.9"}  # kept from the release
    assert "deviceplugin" not in values  # the chart's default
    assert values["scheduler"]["image"] == {"repository": "localhost/kube-scheduler", "tag": "v1"}
    with pytest.raises(ValueError, match="unknown components \\['scheduler'\\]; known: extender, deviceplugin"):
        rollout_values(["scheduler"], image=None, tag="1")
    with pytest.raises(ValueError, match="expected repository:tag"):
        rollout_values(["tuner"], image=None, tag=None, scheduler_image="localhost:5000/kube-scheduler")
