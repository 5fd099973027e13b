"""The HTTP routes against a real etcd: filter, prioritize, errors, readiness, inspect, metrics.

Bodies are built from real ``V1Pod``/``V1Node`` objects serialised as kube-scheduler sends them.
"""

from __future__ import annotations

import time

import httpx
import pytest
from extender_support import publish
from extender_support import ThreadServer, extender_args, gpu_pod, node, wait_for, wire

from iadeep.extender import create_app
from iadeep.dev import LocalEtcd
from iadeep.state import EtcdStateStore, InterferenceSampleRecord, JobRecord, StateSettings


@pytest.fixture
def serve(make_service):
    """Start the extender app (uvicorn, loopback) over a service built with the given options."""
    servers = []

    def start(**options):
        svc = make_service(**options)
        srv = ThreadServer(create_app(service=svc)).__enter__()
        servers.append(srv)
        return srv.url, svc

    yield start
    for s in servers:
        s.__exit__(None, None, None)


def _reserve(store, uid, node, gpu, mem, model="ResNet-18", bs=64):
    job = JobRecord(uid, "ns", uid, model, bs, 1, mem, remaining_s=600.0)
    return store.reserve(job, node, [gpu], colocation_limit=2, now_s=time.time())


def test_filter_with_node_names(serve, store):
    publish(store, ["a", "b"])
    url, _ = serve()
    body = extender_args(gpu_pod("p", mem=8, uid="u1"), ["a", "b", "c"])
    r = httpx.post(f"{url}/iadeep/filter", json=body)
    assert r.status_code == 200
    out = r.json()
    assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert out["NodeNames"] == ["a", "b"] and out["Nodes"] is None and out["Error"] == ""
    assert out["FailedNodes"] == {}
    assert out["FailedAndUnresolvableNodes"] == {
        "c": "iadeep: node has no GPU inventory published by the iadeep device plugin"}


def test_filter_with_node_objects_hands_back_the_passing_nodes_untouched(serve, store):
    publish(store, ["a"])
    url, _ = serve()
    nodes = [node("a"), node("z")]
    body = extender_args(gpu_pod("p", mem=8, uid="u1"), nodes, cache_capable=False)
    out = httpx.post(f"{url}/iadeep/filter", json=body).json()
    assert out["NodeNames"] is None
    assert out["Nodes"]["items"] == [wire(nodes[0])]
    assert list(out["FailedAndUnresolvableNodes"]) == ["z"]


def test_filter_reasons_for_full_and_too_small_nodes(serve, store):
    publish(store, ["full", "free"])
    _reserve(store, "x0", "full", 0, 12.0)
    _reserve(store, "x1", "full", 1, 12.0)
    url, _ = serve()
    out = httpx.post(f"{url}/iadeep/filter", json=extender_args(gpu_pod("p", mem=8, uid="u1"), ["full", "free"])).json()
    assert out["NodeNames"] == ["free"]
    assert out["FailedNodes"] == {"full": "iadeep: needs 1 GPU(s), 0 eligible; not enough free GPU memory"}
    # larger than any GPU, or more GPUs than the node has: nothing would ever help
    big = httpx.post(f"{url}/iadeep/filter", json=extender_args(gpu_pod("big", mem=20, uid="u2"), ["free"])).json()
    assert big["NodeNames"] == []
    assert "needs 20 GiB on each of 1 GPU(s); 0 GPU(s)" in big["FailedAndUnresolvableNodes"]["free"]
    gang = httpx.post(f"{url}/iadeep/filter", json=extender_args(gpu_pod("g", mem=8, gpus=4, uid="u3"), ["free"])).json()
    assert gang["FailedAndUnresolvableNodes"] == {"free": "iadeep: pod needs 4 GPU(s), the node has 2"}


def test_prioritize_scores_free_gpus_highest(serve, store):
    publish(store, ["busy", "idle"])
    _reserve(store, "x0", "busy", 0, 4.0)
    _reserve(store, "x1", "busy", 1, 4.0)
    url, _ = serve()
    body = extender_args(gpu_pod("p", mem=4, uid="u1", annotations={"iadeep.io/model": "ResNet-18"}), ["busy", "idle", "nope"])
    httpx.post(f"{url}/iadeep/filter", json=body)
    r = httpx.post(f"{url}/iadeep/prioritize", json=body)
    assert r.status_code == 200
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert [h["Host"] for h in r.json()] == ["busy", "idle", "nope"]
    assert scores["idle"] == 10 and 0 < scores["busy"] < 10 and scores["nope"] == 0
    # without a preceding filter the same answer
    again = httpx.post(f"{url}/iadeep/prioritize", json=extender_args(gpu_pod("q", mem=4, uid="u9", annotations={
        "iadeep.io/model": "ResNet-18"}), ["busy", "idle", "nope"], cache_capable=False)).json()
    assert {h["Host"]: h["Score"] for h in again} == scores


def test_pods_that_are_not_ours_pass_untouched(serve, store):
    url, _ = serve()
    body = extender_args(gpu_pod("cpu", mem=None, uid="u1"), ["a", "b"])
    assert httpx.post(f"{url}/iadeep/filter", json=body).json()["NodeNames"] == ["a", "b"]
    assert httpx.post(f"{url}/iadeep/prioritize", json=body).json() == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_bad_pod_annotations_fail_every_node_with_the_reason(serve, store):
    publish(store, ["a"])
    url, _ = serve()
    pod = gpu_pod("p", mem=4, uid="u1", annotations={"iadeep.io/model": "GPT-9"})
    out = httpx.post(f"{url}/iadeep/filter", json=extender_args(pod, ["a"])).json()
    assert out["NodeNames"] == [] and out["Error"] == ""
    assert "model 'GPT-9' is not in the interference model" in out["FailedAndUnresolvableNodes"]["a"]


@pytest.mark.parametrize(("route", "body", "field"), [
    ("filter", b"{not json", "Invalid JSON"),
    ("filter", b"[]", "Input should be an object"),
    ("filter", b'{"NodeNames": ["a"]}', "Pod: Field required"),
    ("filter", b'{"Pod": {"metadata": {}}, "NodeNames": ["a"]}', "Pod.metadata.name: Field required"),
    ("prioritize", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}', "NodeNames: Input should be a valid array"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": {"x": []}}}]}}}',
     "Pod.spec.containers.0.resources.limits.x"),
    ("bind", b'{"PodName": "p", "PodNamespace": "d", "Node": "n"}', "PodUID: Field required"),
    ("bind", b'{"PodName": "", "PodNamespace": "d", "PodUID": "u", "Node": "n"}', "PodName: String should have at least 1"),
])
def test_malformed_requests_get_400_naming_the_field(serve, store, route, body, field):
    url, _ = serve()
    r = httpx.post(f"{url}/iadeep/{route}", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert field in r.json()["Error"], r.json()


def test_store_unreachable_filter_error_and_not_ready(serve, store, tmp_path):
    """etcd goes away mid-run: filter answers Error (no 5xx), /readyz fails; both recover with etcd."""
    etcd = LocalEtcd(tmp_path / "etcd").start()
    try:
        own = EtcdStateStore(StateSettings(endpoints=[etcd.endpoint], prefix="/outage",
                                           retry={"attempts": 2, "initial_backoff_s": 0.01, "deadline_s": 1.0}))
        publish(own, ["a"])
        url, _ = serve(state_store=own, etcd=own.settings)
        svc_store_body = extender_args(gpu_pod("p", mem=4, uid="u1"), ["a"])
        assert httpx.get(f"{url}/readyz").status_code == 200
        assert httpx.post(f"{url}/iadeep/filter", json=svc_store_body).json()["NodeNames"] == ["a"]
        etcd.stop()
        wait_for(lambda: httpx.get(f"{url}/readyz"), lambda r: r.status_code == 503, timeout=15, what="readyz 503")
        out = wait_for(lambda: httpx.post(f"{url}/iadeep/filter", json=svc_store_body),
                       lambda r: r.json()["Error"] != "", timeout=15, what="filter Error")
        assert out.status_code == 200
        assert out.json()["Error"].startswith("iadeep: state store unavailable") and out.json()["NodeNames"] is None
        assert httpx.get(f"{url}/healthz").text == "ok"
        p = httpx.post(f"{url}/iadeep/prioritize", json=svc_store_body)
        assert p.status_code == 503 and p.json()["Error"].startswith("iadeep:")
        assert httpx.get(f"{url}/inspect").status_code == 503
        etcd.start()
        wait_for(lambda: httpx.get(f"{url}/readyz"), lambda r: r.status_code == 200, timeout=15, what="readyz again")
        assert httpx.post(f"{url}/iadeep/filter", json=svc_store_body).json()["NodeNames"] == ["a"]
    finally:
        etcd.stop()


def test_never_reachable_store_starts_unready(serve, throughputs_path):
    from extender_support import free_port

    dead = StateSettings(endpoints=[f"http://127.0.0.1:{free_port()}"], prefix="/none",
                         retry={"attempts": 1, "deadline_s": 0.5})
    url, _ = serve(state_store=EtcdStateStore(dead), etcd=dead)
    assert httpx.get(f"{url}/readyz").status_code == 503


def test_inspect_and_metrics_show_reservations_and_predictions(serve, store):
    publish(store, ["a"])
    _reserve(store, "x0", "a", 0, 4.0, "ResNet-18", 64)
    _reserve(store, "x1", "a", 0, 6.0, "Transformer", 32)
    store.add_samples([InterferenceSampleRecord("ResNet-18", 64, "Transformer", 32, 0.42, at=1.0)] * 5)
    url, svc = serve()
    doc = httpx.get(f"{url}/inspect").json()
    assert doc["policy"] == "iadeep" and doc["colocation_limit"] == 2 and doc["samples_learned"] == 5
    gpu0, gpu1 = doc["nodes"]["a"]
    assert (gpu0["mem_total_gib"], gpu0["mem_used_gib"], gpu0["mem_free_gib"]) == (16.0, 10.0, 6.0)
    assert [j["pod_uid"] for j in gpu0["jobs"]] == ["x0", "x1"] and gpu1["jobs"] == []
    rn18 = gpu0["jobs"][0]
    assert rn18["model"] == "ResNet-18" and rn18["mem_gib"] == 4.0
    # five samples of 0.42 pull the learned prediction well below the prior (0.655)
    assert rn18["predicted_normalised_throughput"] < 0.55
    assert httpx.get(f"{url}/inspect", params={"node": "a"}).json()["nodes"].keys() == {"a"}
    assert httpx.get(f"{url}/inspect", params={"node": "zz"}).status_code == 404

    httpx.post(f"{url}/iadeep/filter", json=extender_args(gpu_pod("p", mem=4, uid="u1"), ["a"]))
    text = httpx.get(f"{url}/metrics").text
    assert 'iadeep_gpu_memory_used_gib{gpu="0",node="a"} 10.0' in text
    assert 'iadeep_gpu_memory_total_gib{gpu="1",node="a"} 16.0' in text
    assert 'iadeep_gpu_jobs{gpu="0",node="a"} 2.0' in text
    assert 'iadeep_pod_gpu_memory_gib{gpu="0",node="a",pod="ns/x1"} 6.0' in text
    assert 'iadeep_pod_predicted_normalised_throughput{gpu="0",node="a",pod="ns/x0"}' in text
    assert 'iadeep_extender_requests_total{outcome="ok",verb="filter"} 1.0' in text
    assert 'iadeep_extender_filter_nodes_total{result="passed"} 1.0' in text
    assert "iadeep_state_store_up 1.0" in text
    assert 'iadeep_extender_samples_learned 5.0' in text


def test_reservations_by_other_writers_show_up_after_a_refresh(serve, store):
    publish(store, ["a"])
    url, _ = serve()
    body = extender_args(gpu_pod("p", mem=10, uid="u1"), ["a"])
    assert httpx.post(f"{url}/iadeep/filter", json=body).json()["NodeNames"] == ["a"]
    _reserve(store, "o0", "a", 0, 8.0)
    _reserve(store, "o1", "a", 1, 8.0)  # another replica filled both GPUs
    wait_for(lambda: httpx.post(f"{url}/iadeep/filter", json=body).json(), lambda o: o["NodeNames"] == [],
             timeout=5, what="the other writer's reservations")
