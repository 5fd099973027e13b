"""k8s/extender: every object is valid for the Kubernetes API models and the real kube-apiserver
(strict field validation), the RBAC is enough for the extender and no more, the scheduler
configurations load in the real kube-scheduler, and the addresses agree with each other."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import yaml
from extender_support import REPO, scheduler_config
from extender_support import gpu_pod, wait_for

from iadeep.extender import ExtenderSettings, KubeError, KubernetesPodApi, KubeSettings
from iadeep.state import StateSettings

client = pytest.importorskip("kubernetes.client")
from kubernetes import utils  # noqa: E402

K8S = REPO / "k8s" / "extender"
OBJECT_FILES = ["namespace.yaml", "config.yaml", "rbac.yaml", "admission.yaml", "deployment.yaml", "service.yaml",
                "scheduler.yaml"]
SA_USER = "system:serviceaccount:iadeep-system:iadeep-extender"
INSTALLED = [("ServiceAccount", "iadeep-extender"), ("ClusterRole", "iadeep-extender"), ("ClusterRoleBinding", "iadeep-extender"),
             ("ValidatingAdmissionPolicy", "iadeep-extender-node-annotations"),
             ("ValidatingAdmissionPolicyBinding", "iadeep-extender-node-annotations")]


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _objects() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for f in OBJECT_FILES for d in _docs(f)}


def _model(doc: dict) -> str:
    """The client's model class name, e.g. ``V1Deployment`` for ``apps/v1`` ``Deployment``."""
    return f"{doc['apiVersion'].rsplit('/', 1)[-1].capitalize()}{doc['kind']}"


@pytest.mark.parametrize("name", OBJECT_FILES)
def test_objects_round_trip_through_the_api_models(name):
    """Deserialising into the client's models and back loses nothing: no unknown or misspelt field."""
    api = client.ApiClient()
    for doc in _docs(name):
        obj = api._ApiClient__deserialize(doc, _model(doc))
        assert api.sanitize_for_serialization(obj) == doc


def test_kustomization_lists_every_file():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kust["resources"] == OBJECT_FILES
    assert kust["configMapGenerator"][0]["files"] == ["kube-scheduler-config.yaml"]
    volumes = _objects()[("Deployment", "iadeep-scheduler")]["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["configMap"]["name"] == kust["configMapGenerator"][0]["name"]


def test_rbac_is_least_privilege():
    role = _objects()[("ClusterRole", "iadeep-extender")]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"]}
    assert rules == {
        (("",), ("pods",), ("get", "list", "watch")),  # annotations come with the Binding: no patch
        (("",), ("pods/binding",), ("create",)),
        (("",), ("pods/eviction",), ("create",)),  # preemption and undo records: the Eviction API
        (("",), ("nodes",), ("get", "list", "watch")),
        (("",), ("nodes",), ("patch",)),  # only iadeep.io/ annotations: admission.yaml
        (("", "events.k8s.io"), ("events",), ("create",)),
    }
    dep = _objects()[("Deployment", "iadeep-extender")]["spec"]["template"]["spec"]
    assert dep["serviceAccountName"] == "iadeep-extender"


def test_addresses_agree():
    objs = _objects()
    env = objs[("ConfigMap", "iadeep-extender")]["data"]
    settings = ExtenderSettings.model_validate({"port": env["IADEEP_EXTENDER_PORT"], "url_prefix": env["IADEEP_EXTENDER_URL_PREFIX"],
                                                "call_budget_s": env["IADEEP_EXTENDER_CALL_BUDGET_S"]})
    assert settings.call_budget_s == ExtenderSettings().call_budget_s  # shipped defaults agree
    assert int(env["IADEEP_ETCD_MAX_TXN_OPS"]) == StateSettings().max_txn_ops
    svc = objs[("Service", "iadeep-extender")]
    container = objs[("Deployment", "iadeep-extender")]["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == settings.port == svc["spec"]["ports"][0]["port"]
    assert env["IADEEP_EXTENDER_GPU_MEM_RESOURCE"] == ExtenderSettings().gpu_mem_resource
    # the undo threshold shipped is the policy's own default (the simulator's)
    import inspect

    from iadeep.policy import POLICIES
    default = inspect.signature(POLICIES["iadeep"]).parameters["undo_below"].default
    assert float(env["IADEEP_EXTENDER_UNDO_BELOW"]) == ExtenderSettings().undo_below == default
    for name in ("kube-scheduler-config.yaml", "kube-scheduler-config.control-plane.yaml"):
        (config,) = _docs(name)
        assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
        assert "iadeep-scheduler" in [p["schedulerName"] for p in config["profiles"]]
        (ext,) = config["extenders"]
        url = urlsplit(ext["urlPrefix"])
        assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
        assert url.port == settings.port and url.path == settings.url_prefix
        assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == ("filter", "prioritize", "bind")
        # memory adds up per node; GPUs are shared, so the scheduler must not count them (one pod per GPU)
        assert ext["managedResources"] == [{"name": settings.gpu_mem_resource, "ignoredByScheduler": False},
                                           {"name": settings.gpu_count_resource, "ignoredByScheduler": True}]
        assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False and ext["weight"] >= 1
        # kube-scheduler gives up after httpTimeout: every verb must answer before that
        assert ext["httpTimeout"].endswith("s") and float(ext["httpTimeout"][:-1]) > settings.call_budget_s
    (second,) = _docs("kube-scheduler-config.yaml")
    assert [p["schedulerName"] for p in second["profiles"]] == ["iadeep-scheduler"]  # the default one is left alone


@pytest.fixture(scope="module")
def installed(control_plane):
    """The namespace and the extender's RBAC created for real; everything else dry-run (strict)."""
    api = control_plane.api_client()
    objs = _objects()
    utils.create_from_dict(api, objs[("Namespace", "iadeep-system")])
    for key in INSTALLED:
        utils.create_from_dict(api, objs[key], field_validation="Strict")
    yield api
    api.close()


@pytest.mark.slow
def test_kube_apiserver_accepts_every_object(installed):
    for (kind, name), doc in _objects().items():
        if kind == "Namespace" or (kind, name) in INSTALLED:
            continue  # created for real (strictly validated) by the fixture
        utils.create_from_dict(installed, doc, dry_run="All", field_validation="Strict")


@pytest.mark.slow
def test_the_service_account_can_do_what_the_extender_does_and_no_more(installed, control_plane, k8s_client, k8s_namespace):
    core = client.CoreV1Api(k8s_client)
    pod = core.create_namespaced_pod(k8s_namespace, gpu_pod("rbac", mem=4, namespace=k8s_namespace, scheduler="nobody"))
    (node,) = control_plane.add_nodes(1, prefix="rbac-")
    as_sa = control_plane.api_client()
    as_sa.set_default_header("Impersonate-User", SA_USER)
    api = KubernetesPodApi(KubeSettings(), api_client=as_sa)
    try:
        assert api.read_pod(k8s_namespace, "rbac").metadata.uid == pod.metadata.uid
        with pytest.raises(KubeError):  # a pod re-created under the same name is never bound (UID precondition)
            api.bind(k8s_namespace, "rbac", "not-the-uid", node, {"x": "y"})
        assert not core.read_namespaced_pod("rbac", k8s_namespace).spec.node_name
        api.bind(k8s_namespace, "rbac", pod.metadata.uid, node, {"iadeep.io/gpu-index": "0"})
        assert pod.metadata.uid in {p.uid for p in api.pods()}
        api.event(k8s_namespace, "rbac", pod.metadata.uid, "Test", "rbac check")
        client.CoreV1Api(as_sa).read_node(node)
        with pytest.raises(client.exceptions.ApiException) as denied:
            client.CoreV1Api(as_sa).delete_namespaced_pod("rbac", k8s_namespace)
        assert denied.value.status == 403
        with pytest.raises(client.exceptions.ApiException) as denied:
            client.CoreV1Api(as_sa).list_namespaced_secret(k8s_namespace)
        assert denied.value.status == 403
        with pytest.raises(client.exceptions.ApiException) as denied:  # annotations come with the Binding
            client.CoreV1Api(as_sa).patch_namespaced_pod("rbac", k8s_namespace, {"metadata": {"labels": {"x": "y"}}})
        assert denied.value.status == 403
        # nodes: its own annotation, nothing else (the admission policy; the API server loads a new
        # policy within seconds, so the first refusal is waited for)
        sa_core = client.CoreV1Api(as_sa)

        def refused(patch):
            try:
                sa_core.patch_node(node, patch)
            except client.exceptions.ApiException as exc:
                return exc
            return None

        tries = iter(range(1000))  # a new value each time: a patch that changes nothing is never refused
        exc = wait_for(lambda: refused({"metadata": {"labels": {"iadeep-test": f"v{next(tries)}"}}}), bool, timeout=30,
                       what="the admission policy enforced")
        assert exc.status == 403 and "may not change a node's labels" in exc.body
        for patch in ({"metadata": {"annotations": {"example.com/other": "x"}}}, {"spec": {"unschedulable": True}},
                      {"metadata": {"annotations": {"iadeep.io/gpus": "[]"}}}):  # the node agents' GPU list
            exc = refused(patch)
            assert exc is not None and exc.status == 403, patch
        api.annotate_node(node, {"iadeep.io/gpu-reservations": "[]"})
        live_node = core.read_node(node)
        assert live_node.metadata.annotations["iadeep.io/gpu-reservations"] == "[]"
        assert "example.com/other" not in live_node.metadata.annotations and not live_node.spec.unschedulable
        core.patch_node(node, {"metadata": {"labels": {"iadeep-test": "admin"}}})  # others are not bound by it
    finally:
        api.close()
    live = core.read_namespaced_pod("rbac", k8s_namespace)
    assert live.spec.node_name == node and live.metadata.annotations["iadeep.io/gpu-index"] == "0"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kube-scheduler-config.yaml", "kube-scheduler-config.control-plane.yaml"])
def test_the_real_kube_scheduler_loads_the_configuration(installed, control_plane, extender_port, name):
    (config,) = _docs(name)
    try:
        control_plane.restart_scheduler(config)  # raises when kube-scheduler rejects it or does not get healthy
    finally:
        control_plane.restart_scheduler(scheduler_config(extender_port))
