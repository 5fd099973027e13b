"""Gangs on the local control plane: the real kube-scheduler calls our extender for the pods of an
Indexed Job of 4 pods x 4 GPUs (16 GPUs) on kwok nodes of 4 GPUs; the gang binds whole or not at
all, and its reservations are released together (the decision, the permit wait, the timeout)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from extender_support import SCHEDULER, extender_args, publish, wait_for

from iadeep.extender import ANNOTATION_GPU_INDEX
from iadeep.extender._wire import ExtenderArgs, ExtenderBindingArgs
from iadeep.dev import FAKE_RUN_DURATION_ANNOTATION
from iadeep.podspec import ANNOTATION_GANG_INDEX, ANNOTATION_GANG_SIZE, GANG_LABEL

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")

R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}
GPU_MEM, GPU_COUNT = "iadeep.io/gpu-mem", "iadeep.io/gpu-count"


@pytest.fixture
def nodes(control_plane, store):
    """Four kwok nodes of 4 GPUs x 16 GiB, their inventories published in this test's store."""
    names = control_plane.add_nodes(4, gpus=4, gpu_mem_gib=16, prefix=f"g{uuid.uuid4().hex[:6]}-")
    publish(store, names, gpus=4, gpu_mem_gib=16.0)
    return names


def _container(mem_gib: int, gpus: int) -> dict:
    res = {GPU_MEM: str(mem_gib * gpus), GPU_COUNT: str(gpus)}
    return {"name": "train", "image": "registry.invalid/iadeep/trainer:fake",
            "resources": {"limits": dict(res), "requests": dict(res, cpu="100m")}}


def _gang_job(name: str, *, pods: int = 4, gpus: int = 4, mem_gib: int = 8, run: str = "600s") -> dict:
    """An Indexed Job of ``pods`` members of ``gpus`` GPUs, labelled as one gang."""
    template = {
        "metadata": {"labels": {GANG_LABEL: name},
                     "annotations": {**R18, ANNOTATION_GANG_SIZE: str(pods), FAKE_RUN_DURATION_ANNOTATION: run}},
        "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "containers": [_container(mem_gib, gpus)]},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": template}}


def _members(core, ns: str, gang: str) -> list:
    return sorted(core.list_namespaced_pod(ns, label_selector=f"{GANG_LABEL}={gang}").items,
                  key=lambda p: int(p.metadata.annotations[ANNOTATION_GANG_INDEX]))


def _gang_held(store, uids) -> list:
    return [a for a in store.assignments() if a.pod_uid in set(uids)]


def test_a_16_gpu_job_runs_as_4_pods_placed_together(k8s_client, k8s_namespace, nodes, store, extender):
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    batch.create_namespaced_job(k8s_namespace, _gang_job("big", run="4s"))
    pods = wait_for(lambda: _members(core, k8s_namespace, "big"),
                    lambda ps: len(ps) == 4 and all(p.status.phase == "Running" for p in ps), timeout=60,
                    what="4 members Running")
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)  # each member on a node of its own
    held = _gang_held(store, [p.metadata.uid for p in pods])
    assert len(held) == 16
    for p in pods:
        mine = sorted(a.gpu for a in held if a.pod_uid == p.metadata.uid)
        assert mine == [0, 1, 2, 3]
        assert {a.node for a in held if a.pod_uid == p.metadata.uid} == {p.spec.node_name}
        assert p.metadata.annotations[ANNOTATION_GPU_INDEX] == "0,1,2,3"
    assert {j.gang for u, j in store.jobs().items() if u in {p.metadata.uid for p in pods}} == {"big"}
    # kube-scheduler's own gang scheduling ran in front of the extender (iadeep.dev.GANG_FEATURE_GATES):
    # the Job controller made the gang's PodGroup, the members name it, and it was scheduled whole
    raw = [json.loads(core.read_namespaced_pod(p.metadata.name, k8s_namespace, _preload_content=False).data) for p in pods]
    groups = {r["spec"]["schedulingGroup"]["podGroupName"] for r in raw}
    (group,) = client.CustomObjectsApi(k8s_client).list_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", k8s_namespace, "podgroups")["items"]
    assert groups == {group["metadata"]["name"]} and group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert ("PodGroupScheduled", "True") in [(c["type"], c["status"]) for c in group["status"]["conditions"]]
    # bound together: the four Bindings within the permit wait of one another
    times = [next(c.last_transition_time for c in p.status.conditions if c.type == "PodScheduled") for p in pods]
    assert (max(times) - min(times)).total_seconds() <= 4
    done = wait_for(lambda: batch.read_namespaced_job_status("big", k8s_namespace),
                    lambda j: any(c.type in ("Complete", "Failed") and c.status == "True" for c in j.status.conditions or []),
                    timeout=60, what="the gang's Job finished")
    assert done.status.succeeded == 4
    wait_for(lambda: _gang_held(store, [p.metadata.uid for p in pods]), lambda h: not h, timeout=20,
             what="the members' reservations released")


def test_a_gang_that_only_partly_fits_binds_nothing_until_it_fits_whole(k8s_client, k8s_namespace, nodes, store,
                                                                          extender):
    """A filler takes one GPU whole: three nodes have room for a member, the fourth has 3 free GPUs.
    No member binds and nothing is reserved; once the filler is gone, the whole gang binds."""
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    filler = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "filler", "annotations": dict(R18)},
              "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "containers": [_container(16, 1)]}}
    core.create_namespaced_pod(k8s_namespace, filler)
    f = wait_for(lambda: core.read_namespaced_pod("filler", k8s_namespace), lambda p: p.status.phase == "Running",
                 timeout=30, what="filler Running")
    batch.create_namespaced_job(k8s_namespace, _gang_job("fill"))

    def refused(ps):  # every member unschedulable, at least one of them for the extender's reason
        conds = [next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None) for p in ps]
        return (len(ps) == 4 and all(c is not None and c.status == "False" for c in conds)
                and any("gang of 4 pod(s)" in (c.message or "") for c in conds))

    pods = wait_for(lambda: _members(core, k8s_namespace, "fill"), refused, timeout=60,
                    what="every member refused as a gang")
    time.sleep(5)  # kube-scheduler's retries meanwhile change nothing
    pods = _members(core, k8s_namespace, "fill")
    assert [p.spec.node_name for p in pods] == [None] * 4
    assert {a.pod_uid for a in store.assignments()} == {f.metadata.uid}  # nothing of the gang stays reserved
    assert not [j for j in store.jobs().values() if j.gang == "fill"]
    messages = [c.message or "" for p in pods for c in p.status.conditions or [] if c.type == "PodScheduled"]
    assert any("gang of 4 pod(s)" in m and ("do not split into pods" in m or "eligible" in m) for m in messages), messages

    core.delete_namespaced_pod("filler", k8s_namespace, grace_period_seconds=0)
    pods = wait_for(lambda: _members(core, k8s_namespace, "fill"),
                    lambda ps: len(ps) == 4 and all(p.spec.node_name for p in ps), timeout=60,
                    what="the whole gang bound once it fits")
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    assert len(_gang_held(store, [p.metadata.uid for p in pods])) == 16


# -- the phases, called directly on the service (real API server and etcd; no kube-scheduler) ------

def _bare_member(core, ns: str, gang: str, index: int, size: int, gpus: int = 4):
    """A gang pod made by hand (its completion index set as the Job controller would), for a
    scheduler that does not exist: kube-scheduler leaves it alone and the test calls the verbs."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{gang}-{index}", "labels": {GANG_LABEL: gang},
                         "annotations": {**R18, ANNOTATION_GANG_SIZE: str(size), ANNOTATION_GANG_INDEX: str(index)}},
            "spec": {"schedulerName": "nobody", "restartPolicy": "Never", "containers": [_container(8, gpus)]}}
    return core.create_namespaced_pod(ns, body)


def _bare_members(core, ns: str, gang: str, n: int, *, size: int | None = None) -> list:
    return [_bare_member(core, ns, gang, i, size or n) for i in range(n)]


def _filter(svc, pod, names):
    return svc.filter(ExtenderArgs.model_validate(extender_args(pod, names)))


def test_filter_waits_for_every_member_then_reserves_all_in_one_decision(k8s_client, k8s_namespace, nodes, store,
                                                                          make_service, api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api)
    svc.cache.refresh()
    pods = _bare_members(core, k8s_namespace, "part", 3, size=4)
    out = _filter(svc, pods[0], nodes)
    assert out.node_names == [] and all("waiting for the gang's members: 3 of 4 exist" in m
                                      for m in out.failed_nodes.values()), out
    assert store.assignments() == []
    pods.append(_bare_member(core, k8s_namespace, "part", 3, 4))
    out = _filter(svc, pods[2], nodes)
    (node2,) = out.node_names
    held = store.assignments()
    assert len(held) == 16 and {a.pod_uid for a in held} == {p.metadata.uid for p in pods}
    by_pod = {a.pod_uid: a.node for a in held}
    assert len(set(by_pod.values())) == 4 and by_pod[pods[2].metadata.uid] == node2
    # the others pass their reserved node only, without a new decision
    for p in pods:
        assert _filter(svc, p, nodes).node_names == [by_pod[p.metadata.uid]]
    assert len(store.assignments()) == 16


def test_members_that_disagree_on_their_demand_wait_with_the_reason_and_reserve_nothing(
        k8s_client, k8s_namespace, nodes, store, make_service, api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api)
    svc.cache.refresh()
    pods = _bare_members(core, k8s_namespace, "odd", 3, size=4) + [_bare_member(core, k8s_namespace, "odd", 3, 4, gpus=2)]
    out = _filter(svc, pods[0], nodes)
    assert out.node_names == [] and out.error == ""
    assert all("the members of gang 'odd' disagree" in m for m in out.failed_nodes.values()), out
    assert store.assignments() == [] and store.jobs() == {}


def test_a_bind_whose_gang_did_not_all_pass_filter_releases_the_whole_gang(k8s_client, k8s_namespace, nodes, store,
                                                                            make_service, api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api, gang_permit_wait_s=0.3)
    svc.cache.refresh()
    pods = _bare_members(core, k8s_namespace, "perm", 4)
    (node,) = _filter(svc, pods[0], nodes).node_names
    assert len(store.assignments()) == 16
    m = pods[0].metadata
    out = svc.bind(ExtenderBindingArgs(PodName=m.name, PodNamespace=m.namespace, PodUID=m.uid, Node=node))
    assert "did not reach filter within 0.3 s" in out.error
    assert store.assignments() == [] and not [j for j in store.jobs().values() if j.gang == "perm"]
    assert core.read_namespaced_pod(m.name, m.namespace).spec.node_name is None


def test_a_member_deleted_before_the_gang_is_bound_releases_it(k8s_client, k8s_namespace, nodes, store, make_service,
                                                                api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api)
    svc.cache.refresh()
    pods = _bare_members(core, k8s_namespace, "gone", 4)
    _filter(svc, pods[1], nodes)
    assert len(store.assignments()) == 16
    core.delete_namespaced_pod("gone-3", k8s_namespace, grace_period_seconds=0)
    released = svc.release_ended([pods[3].metadata.uid])
    assert sorted(released) == sorted(p.metadata.uid for p in pods)
    assert store.assignments() == []


def test_the_sweep_releases_a_gang_left_unbound_past_its_timeout(k8s_client, k8s_namespace, nodes, store, make_service,
                                                                  api):
    core = client.CoreV1Api(k8s_client)
    svc = make_service(pod_api=api, gang_timeout_s=0.5)
    svc.cache.refresh()
    pods = _bare_members(core, k8s_namespace, "late", 4)
    _filter(svc, pods[0], nodes)
    assert svc.sweep() == []  # within the timeout
    time.sleep(0.7)
    assert sorted(svc.sweep()) == sorted(p.metadata.uid for p in pods)
    assert store.assignments() == []


def _record_requests(api) -> list[tuple[str, str, dict]]:
    """Every request the extender's client sends from now on, as (method, URL, query): recorded by
    the client's own REST layer, each request still sent to the API server."""
    seen: list[tuple[str, str, dict]] = []
    rest = api.api_client.rest_client
    send = rest.request

    def request(method, url, *args, **kwargs):
        seen.append((method, url, dict(kwargs.get("query_params") or [])))
        return send(method, url, *args, **kwargs)

    rest.request = request
    return seen


def _gang_listings(requests, namespace: str, gang: str) -> list:
    """The requests among ``requests`` that list the pods of ``gang`` (``GET .../namespaces/<ns>/pods``
    with its label selector)."""
    return [r for r in requests if r[0] == "GET" and r[1].split("?")[0].endswith(f"/namespaces/{namespace}/pods")
            and f"{GANG_LABEL}={gang}" in (r[2].get("labelSelector", "") + r[1].replace("%3D", "=").replace("%2F", "/"))]


def test_the_gang_decision_reads_the_members_from_the_pod_follower_without_listing_them(
        k8s_client, k8s_namespace, nodes, store, make_service, api):
    core = client.CoreV1Api(k8s_client)
    seen = _record_requests(api)
    svc = make_service(pod_api=api)
    svc.start()
    try:
        assert svc.pod_follower is not None and svc.pod_follower.wait_listed(10)
        pods = _bare_members(core, k8s_namespace, "kept", 2)
        wait_for(lambda: len(svc.gangs.members(k8s_namespace, "kept")), lambda n: n == 2, timeout=10,
                 what="the follower's copy of the 2 members")
        assert svc.pod_follower.synced
        before = len(seen)
        (node,) = _filter(svc, pods[1], nodes).node_names
        assert len(store.assignments()) == 8  # decided and reserved for the whole gang
        assert _gang_listings(seen[before:], k8s_namespace, "kept") == []  # not one listing through the API
    finally:
        svc.stop()
    # without the follower (stopped: not synced) the decision lists the gang through the API, once
    pods = _bare_members(core, k8s_namespace, "asked", 2)
    before = len(seen)
    assert len(_filter(svc, pods[0], nodes).node_names) == 1
    assert len(_gang_listings(seen[before:], k8s_namespace, "asked")) == 1
    assert len(store.assignments()) == 8 + 8


def test_the_followers_copy_of_a_gang_keeps_its_live_members_only():
    """``GangMembers`` from the watch's pod documents: an ended, a deleted, a being-deleted or a
    relabelled member leaves its gang; a bound or gated member stays (a member is a member)."""
    from iadeep.extender import GangMembers
    from iadeep.extender._bind import _pod_status

    def doc(uid, gang, *, phase="Pending", node="", deleting=False, gated=False):
        meta = {"uid": uid, "namespace": "ns", "name": f"p-{uid}", "labels": {GANG_LABEL: gang} if gang else {},
                "annotations": {ANNOTATION_GANG_SIZE: "2", ANNOTATION_GANG_INDEX: "0"}}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
        spec = {"containers": [_container(8, 1)], **({"nodeName": node} if node else {}),
                **({"schedulingGates": [{"name": "wait"}]} if gated else {})}
        return _pod_status({"metadata": meta, "spec": spec, "status": {"phase": phase}})

    gangs = GangMembers()
    gangs.reset([doc("a", "g"), doc("b", "g", phase="Running", node="n1"), doc("c", "g", gated=True),
                 doc("d", "g", phase="Succeeded"), doc("e", "g", deleting=True), doc("f", "")])
    assert sorted(s.uid for s, _ in gangs.members("ns", "g")) == ["a", "b", "c"]
    assert all(p.metadata.uid == s.uid for s, p in gangs.members("ns", "g"))  # each with its wire model
    assert doc("c", "g", gated=True).pod is None  # gated: in the gang, not in kube-scheduler's queue
    gangs.update("MODIFIED", doc("b", "g", phase="Failed", node="n1"))
    gangs.update("DELETED", doc("a", "g"))
    gangs.update("MODIFIED", doc("c", "h"))
    assert [s.uid for s, _ in gangs.members("ns", "g")] == []
    assert [s.uid for s, _ in gangs.members("ns", "h")] == ["c"] and len(gangs) == 1
