"""k8s/node: every object is valid for the Kubernetes API models and the real kube-apiserver
(strict field validation, dry run), the ConfigMap is a valid configuration of each service, the
addresses agree, and the RBAC is least privilege (the device plugin may list and patch pods and
nothing else; the coordinator and the tuner get no token)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client, utils

from iadeep.coordinator import CoordinatorSettings
from iadeep.deviceplugin import DevicePluginSettings
from iadeep.tuner import TunerSettings

K8S = Path(__file__).resolve().parents[2] / "k8s" / "node"
FILES = ["config.yaml", "rbac.yaml", "deviceplugin.yaml", "coordinator.yaml", "tuner.yaml"]


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def objects() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for f in FILES for d in docs(f)}


def model_name(doc: dict) -> str:
    return f"{doc['apiVersion'].rsplit('/', 1)[-1].capitalize()}{doc['kind']}"


@pytest.mark.parametrize("name", FILES)
def test_objects_round_trip_through_the_api_models(name) -> None:
    api = client.ApiClient()
    for doc in docs(name):
        obj = api._ApiClient__deserialize(doc, model_name(doc))
        assert api.sanitize_for_serialization(obj) == doc


def test_kustomization_lists_every_file() -> None:
    assert yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"] == FILES


def test_configmap_configures_each_service_and_addresses_agree(monkeypatch, tmp_path) -> None:
    objs = objects()
    env = objs[("ConfigMap", "iadeep-node")]["data"]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("IADEEP_DEVICEPLUGIN_NODE", "n1")  # the downward API's part
    monkeypatch.setenv("IADEEP_COORDINATOR_NODE", "n1")
    dp, co, tu = DevicePluginSettings(), CoordinatorSettings(), TunerSettings()
    svc = objs[("Service", "iadeep-tuner")]
    url = urlsplit(co.tuner_url)
    assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert url.port == tu.port == svc["spec"]["ports"][0]["port"]
    for kind, name, port in (("DaemonSet", "iadeep-deviceplugin", dp.port), ("DaemonSet", "iadeep-coordinator", co.port),
                             ("Deployment", "iadeep-tuner", tu.port)):
        pod = objs[(kind, name)]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert c["ports"][0]["containerPort"] == port
        assert c["envFrom"] == [{"configMapRef": {"name": "iadeep-node"}}]
    ds = objs[("DaemonSet", "iadeep-deviceplugin")]["spec"]["template"]["spec"]
    mount = ds["containers"][0]["volumeMounts"][0]["mountPath"]
    assert Path(mount) == dp.socket_dir and ds["volumes"][0]["hostPath"]["path"] == mount
    for kind, name, var in (("DaemonSet", "iadeep-deviceplugin", "IADEEP_DEVICEPLUGIN_NODE"),
                            ("DaemonSet", "iadeep-coordinator", "IADEEP_COORDINATOR_NODE")):
        env_vars = objs[(kind, name)]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": var, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env_vars
    tuner = objs[("Deployment", "iadeep-tuner")]["spec"]["template"]["spec"]
    db = Path(tu.storage_url.removeprefix("sqlite:///"))
    assert db.parent == Path(tuner["containers"][0]["volumeMounts"][0]["mountPath"])


def test_rbac_is_least_privilege() -> None:
    objs = objects()
    rules = objs[("ClusterRole", "iadeep-deviceplugin")]["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}]
    assert [k for k in objs if k[0] in ("ClusterRole", "Role")] == [("ClusterRole", "iadeep-deviceplugin")]
    for name in ("iadeep-coordinator", "iadeep-tuner"):
        assert objs[("ServiceAccount", name)]["automountServiceAccountToken"] is False


@pytest.mark.slow
def test_kube_apiserver_accepts_every_object(control_plane) -> None:
    api = control_plane.api_client()
    try:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "iadeep-system"}}
        try:
            utils.create_from_dict(api, ns)
        except utils.FailToCreateError:
            pass  # already there
        for doc in objects().values():
            utils.create_from_dict(api, doc, dry_run="All", field_validation="Strict")
    finally:
        api.close()
