"""bind through HTTP against a real etcd and the real kube-apiserver (the pods/binding subresource):
reservation, annotations, Binding, undo on failure, idempotent retries, concurrent binds, the sweep."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from extender_support import publish
from extender_support import ThreadServer, extender_args, gpu_pod, wire

from iadeep.extender import (
    ANNOTATION_ASSUME_TIME,
    ANNOTATION_BIND_PHASE,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM,
    ANNOTATION_GPU_UUID,
    ANNOTATION_NODE,
    create_app,
    job_record,
)

client = pytest.importorskip("kubernetes.client")

NOBODY = "nobody-schedules-this"  # no scheduler acts on these pods: only our bind does
R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}


@pytest.fixture
def nodes(control_plane, store):
    names = control_plane.add_nodes(2, gpus=2, gpu_mem_gib=16, prefix=f"b{uuid.uuid4().hex[:6]}-")
    publish(store, names)
    return names


@pytest.fixture
def extender(make_service, api):
    def start(**options):
        svc = make_service(pod_api=api, **options)
        return ThreadServer(create_app(service=svc))

    return start


def _create(core, ns, name, mem, **kw):
    pod = gpu_pod(name, mem=mem, namespace=ns, scheduler=NOBODY, annotations=kw.pop("annotations", R18), **kw)
    return core.create_namespaced_pod(ns, pod)


def _bind_body(pod, node):
    return {"PodName": pod.metadata.name, "PodNamespace": pod.metadata.namespace, "PodUID": pod.metadata.uid, "Node": node}


def test_bind_reserves_annotates_and_binds(k8s_client, k8s_namespace, nodes, store, extender):
    core = client.CoreV1Api(k8s_client)
    pod = _create(core, k8s_namespace, "train", 10)
    with extender() as srv:
        f = httpx.post(f"{srv.url}/iadeep/filter", json=extender_args(pod, nodes)).json()
        assert f["NodeNames"] == nodes
        r = httpx.post(f"{srv.url}/iadeep/bind", json=_bind_body(pod, nodes[1]))
        assert r.status_code == 200 and r.json() == {"Error": ""}

    live = core.read_namespaced_pod("train", k8s_namespace)
    assert live.spec.node_name == nodes[1]
    ann = live.metadata.annotations
    (a,) = store.assignments(nodes[1])
    assert (a.pod_uid, a.mem_gib) == (pod.metadata.uid, 10.0)
    assert ann[ANNOTATION_GPU_INDEX] == str(a.gpu)
    assert ann[ANNOTATION_GPU_UUID] == f"GPU-{nodes[1]}-{a.gpu}"
    assert ann[ANNOTATION_GPU_MEM] == "10"
    assert ann[ANNOTATION_BIND_PHASE] == "allocating" and ann[ANNOTATION_NODE] == nodes[1]
    assert abs(int(ann[ANNOTATION_ASSUME_TIME]) / 1e9 - a.assumed_at) < 1e-3
    assert ann["iadeep.io/model"] == "ResNet-18"  # the user's annotations are kept
    job = store.jobs()[pod.metadata.uid]
    assert (job.model, job.batch_size, job.mem_gib, job.name) == ("ResNet-18", 16, 10.0, "train")
    st = store.gpu_states()[(nodes[1], a.gpu)]
    assert st.mem_used_gib == 10.0 and st.pods == (pod.metadata.uid,)


def test_bind_failure_leaves_nothing_behind(k8s_client, k8s_namespace, nodes, store, extender):
    core = client.CoreV1Api(k8s_client)
    # a pod that another scheduler already put on the other node: our Binding is refused (409)
    pod = gpu_pod("taken", mem=8, namespace=k8s_namespace, scheduler=NOBODY, annotations=R18)
    pod.spec.node_name = nodes[0]
    pod = core.create_namespaced_pod(k8s_namespace, pod)
    with extender() as srv:
        r = httpx.post(f"{srv.url}/iadeep/bind", json=_bind_body(pod, nodes[1])).json()
        assert "already assigned to node" in r["Error"] and "reservation released" in r["Error"]
        # a pod that does not exist, and a UID that does not match
        gone = httpx.post(f"{srv.url}/iadeep/bind", json={"PodName": "ghost", "PodNamespace": k8s_namespace,
                                                          "PodUID": "u-ghost", "Node": nodes[1]}).json()
        assert "404" in gone["Error"]
        wrong = httpx.post(f"{srv.url}/iadeep/bind", json={**_bind_body(pod, nodes[1]), "PodUID": "other"}).json()
        assert "has UID" in wrong["Error"]
        doc = httpx.get(f"{srv.url}/inspect").json()
    assert store.assignments() == []
    assert all(st.mem_used_gib == 0 and st.pods == () for st in store.gpu_states().values())
    live = core.read_namespaced_pod("taken", k8s_namespace)
    assert live.spec.node_name == nodes[0]
    assert not set(live.metadata.annotations or {}) & {ANNOTATION_GPU_INDEX, ANNOTATION_BIND_PHASE, ANNOTATION_NODE}
    assert all(not g["jobs"] for gpus in doc["nodes"].values() for g in gpus)  # the cache forgot it too
    events = core.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=taken").items
    assert any(e.reason == "IadeepBindFailed" and e.type == "Warning" for e in events)


def test_a_retried_bind_is_idempotent(k8s_client, k8s_namespace, nodes, store, extender):
    core = client.CoreV1Api(k8s_client)
    pod = _create(core, k8s_namespace, "twice", 8)
    with extender() as srv:
        for _ in range(2):
            assert httpx.post(f"{srv.url}/iadeep/bind", json=_bind_body(pod, nodes[0])).json() == {"Error": ""}
    assert len(store.assignments()) == 1
    assert core.read_namespaced_pod("twice", k8s_namespace).spec.node_name == nodes[0]


def test_concurrent_binds_never_double_allocate(k8s_client, k8s_namespace, nodes, store, extender):
    """24 pods of 8 GiB race for 2 nodes x 2 GPUs x 16 GiB (co-location limit 2): 8 fit."""
    core = client.CoreV1Api(k8s_client)
    pods = [_create(core, k8s_namespace, f"race-{i}", 8) for i in range(24)]
    with extender(policy="antman") as srv, httpx.Client(timeout=30) as http:
        def bind(i):
            return http.post(f"{srv.url}/iadeep/bind", json=_bind_body(pods[i], nodes[i % 2])).json()

        with ThreadPoolExecutor(16) as ex:
            results = list(ex.map(bind, range(24)))
    ok = [p for p, r in zip(pods, results) if r["Error"] == ""]
    assert len(ok) == 8, results
    refused = [r["Error"] for r in results if r["Error"]]
    assert all("not enough free GPU memory" in e or "co-location limit" in e or "eligible" in e for e in refused), refused

    assignments = store.assignments()
    assert sorted(a.pod_uid for a in assignments) == sorted(p.metadata.uid for p in ok)
    per_gpu: dict = {}
    for a in assignments:
        per_gpu.setdefault((a.node, a.gpu), []).append(a)
    states = store.gpu_states()
    for key, held in per_gpu.items():
        assert sum(a.mem_gib for a in held) <= 16 and len(held) <= 2
        assert states[key].mem_used_gib == sum(a.mem_gib for a in held)
        assert sorted(states[key].pods) == sorted(a.pod_uid for a in held)
    by_uid = {a.pod_uid: a for a in assignments}
    for p in core.list_namespaced_pod(k8s_namespace).items:
        a = by_uid.get(p.metadata.uid)
        if a is None:
            assert p.spec.node_name is None and ANNOTATION_GPU_INDEX not in (p.metadata.annotations or {})
        else:
            assert p.spec.node_name == a.node and p.metadata.annotations[ANNOTATION_GPU_INDEX] == str(a.gpu)


def test_sweep_releases_reservations_of_gone_finished_and_stranded_pods(k8s_client, k8s_namespace, nodes, store,
                                                                         make_service, api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api, cache={"sweep_grace_s": 0.5, "sweep_interval_s": 0})
    keep = _create(core, k8s_namespace, "keep", 4)
    gone = _create(core, k8s_namespace, "gone", 4)
    stranded = _create(core, k8s_namespace, "stranded", 4)
    for p in (keep, gone):
        assert svc.bind(_args(p, nodes[0])).error == ""
    # a reservation whose Binding never happened (e.g. the extender died between the two)
    demand = svc._demand(_wire_pod(stranded))
    store.reserve(job_record(demand, time.time()), nodes[1], [0], colocation_limit=2, now_s=time.time() - 5)
    core.delete_namespaced_pod("gone", k8s_namespace, grace_period_seconds=0)
    released = svc.sweep()
    assert sorted(released) == sorted([gone.metadata.uid, stranded.metadata.uid])
    assert [a.pod_uid for a in store.assignments()] == [keep.metadata.uid]


def _args(pod, node):
    from iadeep.extender._wire import ExtenderBindingArgs

    return ExtenderBindingArgs.model_validate(_bind_body(pod, node))


def _wire_pod(pod):
    from iadeep.extender._wire import Pod

    return Pod.model_validate(wire(pod))
