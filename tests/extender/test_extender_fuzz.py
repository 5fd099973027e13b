"""Property-based fuzzing of every route's body: never a 5xx, never a crash, never a half-made
reservation. A bounded number of examples per route keeps it to seconds."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from extender_support import publish
from extender_support import ThreadServer, gpu_pod, wire
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from iadeep.extender import ExtenderService, ExtenderSettings, KubernetesPodApi, KubeSettings, create_app
from iadeep.state import EtcdStateStore, StateSettings

NODES = ["fz-a", "fz-b"]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
quantities = st.one_of(
    st.sampled_from(["2", "4", "8", "12"]),
    st.sampled_from(["1", "8", "16", "0", "-3", "1Gi", "500m", "1e3", "1e999", "NaN", "inf", "", " 4 ", "0x10", "8.5"]),
    st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
annotation_values = st.one_of(st.sampled_from(["ResNet-18", "ResNet-50", "LM", "A3C", "GPT-9", "", "16", "-1", "0",
                                               "nan", "1e400", "99999999999999999999", "9e99999999"]), st.text(max_size=12))
resource_names = st.sampled_from(["iadeep.io/gpu-mem", "iadeep.io/gpu-mem", "iadeep.io/gpu-count", "cpu", "nvidia.com/gpu"])


@st.composite
def pods(draw):
    containers = []
    for k in range(draw(st.integers(0, 3))):
        res = {}
        for part in ("limits", "requests"):
            if draw(st.booleans()):
                res[part] = draw(st.dictionaries(resource_names, quantities, max_size=3))
        containers.append({"name": f"c{k}", "resources": res})
    annotations = draw(st.dictionaries(
        st.sampled_from(["iadeep.io/model", "iadeep.io/batch-size", "iadeep.io/duration-s", "other"]),
        annotation_values, max_size=4))
    pod = wire(gpu_pod("seed", mem=8))
    pod["metadata"] = {"name": draw(st.text(min_size=0, max_size=12)), "namespace": draw(st.text(max_size=8)),
                       "uid": draw(st.text(max_size=12)), "annotations": annotations}
    pod["spec"]["containers"] = containers
    if draw(st.booleans()):
        pod["spec"]["initContainers"] = containers[:1]
    return pod


@st.composite
def extender_args(draw):
    names = draw(st.lists(st.sampled_from(NODES) | st.sampled_from(NODES) | st.text(max_size=10), max_size=5))
    body = {"Pod": draw(pods())}
    if draw(st.booleans()):
        body["NodeNames"] = names
    else:
        body["Nodes"] = {"items": [{"metadata": {"name": n}, "status": draw(json_values)} for n in names]}
    if draw(st.integers(0, 7)) == 0:  # now and then drop a field
        body.pop(draw(st.sampled_from(sorted(body))))
    return body


binding_args = st.fixed_dictionaries({}, optional={
    "PodName": st.text(max_size=20) | json_values,
    "PodNamespace": st.text(max_size=12),
    "PodUID": st.text(max_size=20),
    "Node": st.sampled_from(NODES) | st.text(max_size=10),
})


@pytest.fixture(scope="module")
def fuzz_target(etcd, model, throughputs_path, control_plane):
    """One extender for the module (real etcd under its own prefix, real kube-apiserver)."""
    state = StateSettings(endpoints=[etcd.endpoint], prefix=f"/fuzz-{uuid.uuid4().hex[:8]}")
    store = EtcdStateStore(state)
    publish(store, NODES)
    api = KubernetesPodApi(KubeSettings(), api_client=control_plane.api_client())
    s = ExtenderSettings(etcd=state, throughputs_file=throughputs_path, cache={"sweep_interval_s": 0})
    svc = ExtenderService(s, store=store, pod_api=api, model=model)
    with ThreadServer(create_app(service=svc)) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        yield http, store
    api.close()
    store.close()


def _post(http, route, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = http.post(f"/iadeep/{route}", content=raw, headers={"content-type": "application/json"})
    assert r.status_code in (200, 400), (r.status_code, r.text)
    out = r.json()
    if r.status_code == 400:
        assert out["Error"].startswith(f"invalid {route} request: ")
    return r.status_code, out


@FUZZ
@given(body=json_values)
def test_any_json_body(fuzz_target, body):
    http, _ = fuzz_target
    for route in ("filter", "prioritize", "bind"):
        _post(http, route, body)


@FUZZ
@given(raw=st.binary(max_size=64))
def test_any_bytes(fuzz_target, raw):
    http, _ = fuzz_target
    for route in ("filter", "prioritize", "bind"):
        _post(http, route, raw)


@FUZZ
@given(body=extender_args())
def test_filter_and_prioritize_bodies(fuzz_target, body):
    http, _ = fuzz_target
    status, out = _post(http, "filter", body)
    event(f"filter: HTTP {status}")
    if status == 200:
        asked = [n for n in body.get("NodeNames") or []] or [i["metadata"]["name"] for i in (body.get("Nodes") or {}).get("items", [])]
        assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
        passed = out["NodeNames"] if out["NodeNames"] is not None else [i["metadata"]["name"] for i in (out["Nodes"] or {}).get("items") or []]
        assert set(passed) <= set(asked)
        judged = set(passed) | set(out["FailedNodes"]) | set(out["FailedAndUnresolvableNodes"])
        event("filter: some node passed" if passed else "filter: no node passed")
        assert out["Error"] or judged == set(asked)
    status, out = _post(http, "prioritize", body)
    if status == 200:
        assert all(0 <= h["Score"] <= 10 and set(h) == {"Host", "Score"} for h in out)


@FUZZ
@given(body=binding_args)
def test_bind_bodies(fuzz_target, body):
    http, store = fuzz_target
    status, out = _post(http, "bind", body)
    if status == 200:
        assert out["Error"]  # none of these pods exists
    assert store.assignments() == []  # nothing half-made
