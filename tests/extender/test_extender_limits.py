"""Store limits and interrupted binds as the extender meets them, against a real etcd (and, for
bind, the real kube-apiserver): filter and bind agree on pods wider than one etcd transaction,
and a pod's own earlier, unbound reservation never blocks its bind."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from extender_support import ThreadServer, extender_args, gpu_pod, publish

from iadeep.extender import create_app
from iadeep.extender._wire import ExtenderArgs
from iadeep.state import EtcdStateStore, JobRecord

client = pytest.importorskip("kubernetes.client")

NOBODY = "nobody-schedules-this"
R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}


def test_filter_fails_a_48_gpu_pod_as_unresolvable_naming_the_limit(make_service, store):
    """The field report: a 48-GPU node passed filter and every bind failed; now filter says why."""
    publish(store, ["big"], gpus=48, gpu_mem_gib=80.0)
    with ThreadServer(create_app(service=make_service())) as srv:
        wide = httpx.post(f"{srv.url}/iadeep/filter",
                          json=extender_args(gpu_pod("w", mem=10, gpus=48, uid="u48"), ["big"])).json()
        fits = httpx.post(f"{srv.url}/iadeep/filter",
                          json=extender_args(gpu_pod("f", mem=10, gpus=41, uid="u41"), ["big"])).json()
    reason = wide["FailedAndUnresolvableNodes"]["big"]
    assert wide["NodeNames"] == [] and wide["Error"] == ""
    assert "48 GPUs" in reason and "at most 41" in reason and "--max-txn-ops" in reason
    assert fits["NodeNames"] == ["big"]


def test_the_limit_comes_from_configuration(make_service, store, etcd_settings):
    publish(store, ["big"], gpus=48, gpu_mem_gib=80.0)
    narrow = EtcdStateStore(etcd_settings.model_copy(update={"max_txn_ops": 64}))  # etcd --max-txn-ops=64
    try:
        svc = make_service(state_store=narrow)
        out = svc.filter(ExtenderArgs.model_validate(extender_args(gpu_pod("m", mem=10, gpus=20, uid="u20"), ["big"])))
        assert "at most 19 GPUs" in out.failed_and_unresolvable["big"] and out.node_names == []
    finally:
        narrow.close()


# -- bind against the real kube-apiserver --------------------------------------------------------

def _bind(srv, pod, node):
    body = {"PodName": pod.metadata.name, "PodNamespace": pod.metadata.namespace, "PodUID": pod.metadata.uid,
            "Node": node}
    return httpx.post(f"{srv.url}/iadeep/bind", json=body, timeout=30).json()


def test_bind_of_a_48_gpu_pod_names_the_limit_not_the_store(k8s_client, k8s_namespace, control_plane, store,
                                                            make_service, api):
    (big,) = control_plane.add_nodes(1, gpus=48, gpu_mem_gib=80, prefix=f"w{uuid.uuid4().hex[:6]}-")
    publish(store, [big], gpus=48, gpu_mem_gib=80.0)
    core = client.CoreV1Api(k8s_client)
    pod = core.create_namespaced_pod(k8s_namespace, gpu_pod("wide", mem=10, gpus=48, namespace=k8s_namespace,
                                                            scheduler=NOBODY, annotations=R18))
    with ThreadServer(create_app(service=make_service(pod_api=api))) as srv:
        error = _bind(srv, pod, big)["Error"]
    assert "at most 41 GPUs per pod" in error and "unavailable" not in error
    assert store.assignments() == [] and store.jobs() == {}


@pytest.fixture
def nodes(control_plane, store):
    names = control_plane.add_nodes(2, gpus=2, gpu_mem_gib=16, prefix=f"s{uuid.uuid4().hex[:6]}-")
    publish(store, names)
    return names


def _orphan(store, pod, node):
    """The reservation an interrupted bind leaves: committed, and no Binding made."""
    job = JobRecord(pod.metadata.uid, pod.metadata.namespace, pod.metadata.name, "ResNet-18", 16, 1, 6.0,
                    remaining_s=600.0)
    store.reserve(job, node, [1], colocation_limit=2, now_s=time.time())


def test_a_retried_bind_on_another_node_supersedes_the_pods_own_orphan(k8s_client, k8s_namespace, nodes, store,
                                                                       make_service, api):
    core = client.CoreV1Api(k8s_client)
    pod = core.create_namespaced_pod(k8s_namespace, gpu_pod("two", mem=6, namespace=k8s_namespace, scheduler=NOBODY,
                                                            annotations=R18))
    _orphan(store, pod, nodes[0])
    with ThreadServer(create_app(service=make_service(pod_api=api))) as srv:
        assert _bind(srv, pod, nodes[1]) == {"Error": ""}
        doc = httpx.get(f"{srv.url}/inspect").json()
    assert core.read_namespaced_pod("two", k8s_namespace).spec.node_name == nodes[1]
    assert [(a.pod_uid, a.node) for a in store.assignments()] == [(pod.metadata.uid, nodes[1])]
    assert (nodes[0], 1) not in store.gpu_states()
    on = {n: [j["pod_uid"] for g in gpus for j in g["jobs"]] for n, gpus in doc["nodes"].items()}
    assert on[nodes[0]] == [] and on[nodes[1]] == [pod.metadata.uid]


def test_a_reservation_of_a_bound_pod_is_never_superseded(k8s_client, k8s_namespace, nodes, store, make_service, api):
    core = client.CoreV1Api(k8s_client)
    manifest = gpu_pod("bound", mem=6, namespace=k8s_namespace, scheduler=NOBODY, annotations=R18)
    manifest.spec.node_name = nodes[0]
    pod = core.create_namespaced_pod(k8s_namespace, manifest)
    _orphan(store, pod, nodes[0])
    with ThreadServer(create_app(service=make_service(pod_api=api))) as srv:
        error = _bind(srv, pod, nodes[1])["Error"]
    assert "already holds a reservation on" in error
    assert [(a.pod_uid, a.node) for a in store.assignments()] == [(pod.metadata.uid, nodes[0])]
