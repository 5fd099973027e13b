"""End to end: the real kube-scheduler runs the ``iadeep-scheduler`` profile of
``k8s/extender/kube-scheduler-config.control-plane.yaml`` and calls our extender (uvicorn on the
session's loopback port), which filters, prioritises and binds pods onto kwok nodes."""

from __future__ import annotations

import re
import time
import uuid

import httpx
import pytest
from extender_support import publish
from extender_support import SCHEDULER, ProcessServer, ThreadServer, gpu_pod, wait_for

from iadeep.extender import (
    ANNOTATION_BIND_PHASE,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM,
    KubernetesPodApi,
    KubeSettings,
    create_app,
)
from iadeep.extender._podwatch import ended
from iadeep.state import InterferenceSampleRecord, JobRecord

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")

R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}


@pytest.fixture
def nodes(control_plane, store):
    """Two kwok nodes (2 GPUs x 16 GiB) whose inventory is published in this test's store."""
    names = control_plane.add_nodes(2, gpus=2, gpu_mem_gib=16, prefix=f"e{uuid.uuid4().hex[:6]}-")
    publish(store, names)
    return names


def _pod(ns, name, mem, annotations=R18):
    return gpu_pod(name, mem=mem, namespace=ns, scheduler=SCHEDULER, annotations=annotations)


def _running(core, ns, name, timeout=30):
    return wait_for(lambda: core.read_namespaced_pod(name, ns), lambda p: p.status.phase == "Running",
                    timeout=timeout, what=f"{name} Running")


def _metric(url, line_start):
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_scheduler_filters_prioritises_and_binds_through_the_extender(k8s_client, k8s_namespace, nodes, store, extender):
    srv, _ = extender
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "trainer", 8))
    pod = _running(core, k8s_namespace, "trainer")

    assert pod.spec.node_name in nodes
    ann = pod.metadata.annotations
    (a,) = [a for a in store.assignments() if a.pod_uid == pod.metadata.uid]
    assert (a.node, a.mem_gib) == (pod.spec.node_name, 8.0)
    assert ann[ANNOTATION_GPU_INDEX] == str(a.gpu) and ann[ANNOTATION_GPU_MEM] == "8"
    assert ann[ANNOTATION_BIND_PHASE] == "allocating"
    scheduled = wait_for(lambda: [e for e in core.list_namespaced_event(
        k8s_namespace, field_selector="involvedObject.name=trainer").items if e.reason == "Scheduled"],
        bool, what="Scheduled event")
    assert scheduled[0].reporting_component == SCHEDULER
    # kube-scheduler scores only when more than one node is feasible: if its node cache had not yet
    # caught up with both new nodes, schedule another pod
    prioritize = 'iadeep_extender_requests_total{outcome="ok",verb="prioritize"}'
    for i in range(3):
        if _metric(srv.url, prioritize) >= 1:
            break
        core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, f"extra-{i}", 2))
        _running(core, k8s_namespace, f"extra-{i}")
    for verb in ("filter", "prioritize", "bind"):
        assert _metric(srv.url, f'iadeep_extender_requests_total{{outcome="ok",verb="{verb}"}}') >= 1, verb
    doc = httpx.get(f"{srv.url}/inspect", params={"node": a.node}).json()
    assert [j["pod_uid"] for j in doc["nodes"][a.node][a.gpu]["jobs"]] == [pod.metadata.uid]


def test_two_pods_race_for_the_last_gpu_memory(k8s_client, k8s_namespace, control_plane, store, extender):
    """One node, 2 GPUs x 16 GiB: after a 10 GiB pod, two more 10 GiB pods race; kube-scheduler's own
    accounting (32 GiB on the node) lets both through, our per-GPU view admits only one."""
    (name,) = control_plane.add_nodes(1, gpus=2, gpu_mem_gib=16, prefix=f"r{uuid.uuid4().hex[:6]}-")
    publish(store, [name])
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "first", 10))
    _running(core, k8s_namespace, "first")
    for racer in ("racer-a", "racer-b"):
        core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, racer, 10))

    def phases():
        return {p.metadata.name: p for p in core.list_namespaced_pod(k8s_namespace).items}

    def loser_condition(ps):
        return [(p, c) for p in ps.values() for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"]

    # A racer that passed filter while the other's bind was in flight is refused at bind
    # (SchedulerError, same reason) and retried; filter then marks it Unschedulable.
    pods = wait_for(phases, lambda ps: sum(p.status.phase == "Running" for p in ps.values()) == 2
                    and bool(loser_condition(ps)), timeout=45, what="one racer Running, the other Unschedulable")
    ((loser, cond),) = loser_condition(pods)
    assert loser.status.phase == "Pending"
    assert re.search(r"iadeep: needs 1 GPU\(s\), 0 eligible; not enough free GPU memory", cond.message), cond.message
    assert loser.spec.node_name is None
    held = store.assignments(name)
    assert sorted(a.gpu for a in held) == [0, 1]  # one pod per GPU, the loser holds nothing
    assert loser.metadata.uid not in {a.pod_uid for a in held}
    assert all(st.mem_used_gib == 10.0 for (n, _), st in store.gpu_states().items() if n == name)


def test_restart_serves_the_same_state_and_keeps_learned_samples(k8s_client, k8s_namespace, nodes, store, control_plane,
                                                                  etcd_settings, throughputs_path, extender_port,
                                                                  tmp_path):
    """Kill -9 the extender process with a pod in flight; a new process serves the same reservations
    and predicts with the same learned samples."""
    core = client.CoreV1Api(k8s_client)
    # what the coordinator learned in earlier tuning sessions, and a pair co-located on one GPU
    store.add_samples([InterferenceSampleRecord("ResNet-18", 16, "ResNet-18", 16, 0.35, at=float(i)) for i in range(6)])
    for uid in ("pair-a", "pair-b"):
        store.reserve(JobRecord(uid, "elsewhere", uid, "ResNet-18", 16, 1, 4.0, remaining_s=600.0), nodes[0], [1],
                      colocation_limit=2, now_s=time.time())
    env = {
        "IADEEP_ETCD_ENDPOINTS": ",".join(etcd_settings.endpoints),
        "IADEEP_ETCD_PREFIX": etcd_settings.prefix,
        "IADEEP_EXTENDER_THROUGHPUTS_FILE": str(throughputs_path),
        "IADEEP_EXTENDER_KUBE__KUBECONFIG": str(control_plane.kubeconfig),
        "IADEEP_EXTENDER_CACHE__SWEEP_INTERVAL_S": "0",  # the pair above has no pods
        "IADEEP_EXTENDER_LOG_LEVEL": "warning",
    }
    log = tmp_path / "extender.log"
    first = ProcessServer(env, extender_port, log).start()
    try:
        before = httpx.get(f"{first.url}/inspect").json()
        core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "one", 6))
        one = _running(core, k8s_namespace, "one")
        core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "two", 6))  # in flight when it dies
    finally:
        first.kill()
    with ProcessServer(env, extender_port, log) as second:
        two = _running(core, k8s_namespace, "two", timeout=45)
        after = httpx.get(f"{second.url}/inspect").json()

    def pair_prediction(doc):
        return [j["predicted_normalised_throughput"] for j in doc["nodes"][nodes[0]][1]["jobs"]]

    assert before["samples_learned"] == after["samples_learned"] == 6
    assert pair_prediction(after) == pair_prediction(before)
    assert all(p < 0.5 for p in pair_prediction(after))  # learned (prior: 0.655), not the prior
    placed = {j["pod_uid"]: (node, g["index"]) for node, gpus in after["nodes"].items() for g in gpus for j in g["jobs"]}
    for pod in (one, two):
        assert placed[pod.metadata.uid] == (pod.spec.node_name, int(pod.metadata.annotations[ANNOTATION_GPU_INDEX]))
    assert sorted(a.pod_uid for a in store.assignments()) == sorted(["pair-a", "pair-b", one.metadata.uid, two.metadata.uid])


class _LaggingPodApi(KubernetesPodApi):
    """The real client, whose pod watch hands the extender the end of a pod in ``namespace``
    ``LAG_S`` late: its pod follower behind kube-scheduler's informer, as on a loaded machine (fault
    injection into the real watch stream; kube-scheduler, the API server and kwok are real).

    Only the first end event of each pod of this test's namespace lags: the watch spans all
    namespaces, and CI stop 25 failed when the pods of the other worker's tests, each lagging 3 s,
    held the release of this test's pod back for more than the test's deadline."""

    LAG_S = 3.0

    def __init__(self, namespace, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.namespace = namespace
        self.lagged: set[str] = set()

    def watch_pods(self, resource_version, *, timeout_s):
        for kind, pod, rv in super().watch_pods(resource_version, timeout_s=timeout_s):
            if ended(kind, pod) and pod.namespace == self.namespace and pod.uid not in self.lagged:
                self.lagged.add(pod.uid)
                time.sleep(self.LAG_S)
            yield kind, pod, rv


def test_a_pod_refused_before_the_release_of_an_ended_pod_is_retried_at_once(k8s_client, k8s_namespace, control_plane,
                                                                            store, make_service, extender_port):
    """kube-scheduler retries a waiting pod on the very event that ended the pod holding its GPU;
    when that retry reaches the extender before its pod follower released the reservation, the pod
    is refused and nothing wakes it for kube-scheduler's 5-minute flush, unless the extender's
    release makes an event: the node's ``iadeep.io/gpu-reservations`` annotation (``_nodestate``)."""
    (name,) = control_plane.add_nodes(1, gpus=1, gpu_mem_gib=16, prefix=f"l{uuid.uuid4().hex[:6]}-")
    publish(store, [name], gpus=1)
    core = client.CoreV1Api(k8s_client)
    node_gpus = core.read_node(name).metadata.annotations["iadeep.io/gpus"]  # the node agent's (kwok's) GPU list
    api = _LaggingPodApi(k8s_namespace, KubeSettings(), api_client=control_plane.api_client())
    svc = make_service(pod_api=api)
    try:
        with ThreadServer(create_app(service=svc), port=extender_port) as srv:
            ends = {**R18, "iadeep.io/fake-exit-code": "1", "iadeep.io/fake-run-duration": "4s"}
            core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "first", 10, annotations=ends))
            first = _running(core, k8s_namespace, "first")
            core.create_namespaced_pod(k8s_namespace, _pod(k8s_namespace, "second", 10))  # no room: refused
            failed = 'iadeep_extender_filter_nodes_total{result="failed"}'
            wait_for(lambda: _metric(srv.url, failed), lambda n: n >= 1, what="second refused")
            wait_for(lambda: core.read_namespaced_pod("first", k8s_namespace), lambda p: p.status.phase == "Failed",
                     timeout=30, what="first ended")
            refused_before = _metric(srv.url, failed)
            second = _running(core, k8s_namespace, "second", timeout=60)  # 5 min without the annotation
            # the race did happen: kube-scheduler retried the pod while the release was held back
            assert api.lagged == {first.metadata.uid}
            assert refused_before >= 1
            assert _metric(srv.url, 'iadeep_extender_node_annotations_total{outcome="written"}') >= 2
            (a,) = store.assignments(name)
            assert a.pod_uid == second.metadata.uid != first.metadata.uid
            gpus = wait_for(lambda: core.read_node(name).metadata.annotations.get("iadeep.io/gpu-reservations"),
                            lambda v: v == '[{"gpu":0,"mem_gib":16.0,"used_gib":10.0,"pods":1}]',
                            what="the node's annotation shows the second pod's reservation")
            assert gpus
            # the extender writes its own annotation only: the GPU emulator reads the node's GPUs
            # from iadeep.io/gpus, which the extender must never overwrite
            assert core.read_node(name).metadata.annotations["iadeep.io/gpus"] == node_gpus
    finally:
        api.close()
