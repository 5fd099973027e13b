"""Reservations are released when their pod ends, through the pod watch (the sweep switched off):
real kube-apiserver, real etcd, kwok moving the pods through their phases."""

from __future__ import annotations

import uuid

import pytest
from extender_support import gpu_pod, publish, wait_for, wire

from iadeep.extender import KubernetesPodApi, KubeSettings, PodStatus
from iadeep.extender._podwatch import ended
from iadeep.extender._wire import Pod

client = pytest.importorskip("kubernetes.client")

NOBODY = "nobody-schedules-this"
R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}


@pytest.fixture
def service(control_plane, store, make_service, api):
    """A started service (cache follower and pod follower) whose sweep never runs."""
    nodes = control_plane.add_nodes(1, gpus=4, gpu_mem_gib=16, prefix=f"w{uuid.uuid4().hex[:6]}-")
    publish(store, nodes, gpus=4)  # a free GPU for each pod: no co-location question
    svc = make_service(pod_api=api, cache={"sweep_interval_s": 0, "pod_watch": True, "pod_watch_timeout_s": 5})
    svc.start()
    assert svc.pod_follower is not None and svc.pod_follower.wait_listed(20)
    yield svc, nodes[0]
    svc.stop()


def _bind(svc, core, ns, name, node, annotations=R18):
    from iadeep.extender._wire import ExtenderBindingArgs

    pod = core.create_namespaced_pod(ns, gpu_pod(name, mem=6, namespace=ns, scheduler=NOBODY, annotations=annotations))
    body = {"PodName": name, "PodNamespace": ns, "PodUID": pod.metadata.uid, "Node": node}
    assert svc.bind(ExtenderBindingArgs.model_validate(body)).error == ""
    return pod


def _held(store):
    return {a.pod_uid for a in store.assignments()}


def test_deleted_and_failed_pods_release_their_reservations_without_the_sweep(k8s_client, k8s_namespace, store, service):
    svc, node = service
    core = client.CoreV1Api(k8s_client)
    keep = _bind(svc, core, k8s_namespace, "keep", node)
    gone = _bind(svc, core, k8s_namespace, "gone", node)
    failing = _bind(svc, core, k8s_namespace, "failing", node,
                    annotations={**R18, "iadeep.io/fake-exit-code": "3", "iadeep.io/fake-run-duration": "1s"})
    assert _held(store) == {keep.metadata.uid, gone.metadata.uid, failing.metadata.uid}

    core.delete_namespaced_pod("gone", k8s_namespace, grace_period_seconds=0)
    wait_for(lambda: _held(store), lambda h: gone.metadata.uid not in h, timeout=15, what="deleted pod released")
    wait_for(lambda: core.read_namespaced_pod("failing", k8s_namespace), lambda p: p.status.phase == "Failed",
             timeout=30, what="failing pod Failed")
    wait_for(lambda: _held(store), lambda h: h == {keep.metadata.uid}, timeout=15, what="failed pod released")
    # the freed memory is in the followed copy too: another pod fits on that GPU again
    st = {g: s for (n, g), s in store.gpu_states().items() if n == node}
    assert sum(s.mem_used_gib for s in st.values()) == pytest.approx(6.0)
    assert svc.metrics.releases.labels("pod ended")._value.get() == 2


def test_ended_reads_phases_and_deletions():
    def pod(phase):
        return PodStatus("u", "ns", "p", phase, "n")

    assert ended("DELETED", pod("Running"))
    assert ended("MODIFIED", pod("Succeeded")) and ended("MODIFIED", pod("Failed"))
    assert not ended("MODIFIED", pod("Running")) and not ended("ADDED", pod("Pending"))
    assert not ended("BOOKMARK", None)


def test_release_pods_releases_only_reserved_pods_and_counts_them(make_service, store):
    """The one release path, against the real etcd store: a reserved pod's memory is freed in the
    store and in the followed copy; a pod never reserved through iadeep costs nothing."""
    from iadeep.state import JobRecord

    publish(store, ["n0"])
    svc = make_service()
    svc.cache.refresh()
    job = JobRecord("uid-a", "ns", "a", "ResNet-18", 16, 1, 6.0, remaining_s=100.0)
    svc.cache.apply(job, svc.types.resolve("ResNet-18", 16),
                    store.reserve(job, "n0", [0], colocation_limit=2, now_s=0.0))
    assert svc.release_pods(["uid-a", "never-reserved"]) == ["uid-a"]
    assert store.assignments() == []
    _, base = svc.cache.current()
    assert float(base.gpu_mem_used_gib.sum()) == 0.0
    assert svc.metrics.releases.labels("pod ended")._value.get() == 1
    assert svc.releases_in_flight == 0
    svc.await_releases()  # nothing in flight: returns at once


def test_pending_pods_give_the_policy_the_gpus_queued_ahead(k8s_client, k8s_namespace, store, service):
    """The extender's view of kube-scheduler's queue (``PendingPods``, fed by the same pod watch):
    a pod's ``gpus_ahead`` is the GPUs of the unbound pods created before it that ask for GPU
    memory, its ``jobs_queued`` the other such pods; a pod that is bound or deleted leaves the queue.
    The simulator's kube queue counts the same (``tests/core/test_core_queue.py``)."""
    from iadeep.extender._wire import ExtenderArgs, ExtenderBindingArgs

    svc, node = service
    core = client.CoreV1Api(k8s_client)
    # a gated pod (spec.schedulingGates: the live replay's Jobs before their arrival) is not in
    # kube-scheduler's queue: it counts for nobody until its gate is removed
    gated = gpu_pod("q0", mem=4, gpus=2, namespace=k8s_namespace, scheduler=NOBODY, annotations=R18)
    gated.spec.scheduling_gates = [client.V1PodSchedulingGate(name="iadeep.io/arrival")]
    core.create_namespaced_pod(k8s_namespace, gated)
    made = {}
    for name, gpus in (("qa", 2), ("qb", 1), ("qc", 1)):  # created in this order (names break 1-s timestamp ties)
        made[name] = core.create_namespaced_pod(k8s_namespace, gpu_pod(name, mem=2 * gpus, gpus=gpus, namespace=k8s_namespace,
                                                                       scheduler=NOBODY, annotations=R18))
    plain = gpu_pod("plain", mem=None, namespace=k8s_namespace, scheduler=NOBODY)  # asks for no GPU memory
    core.create_namespaced_pod(k8s_namespace, plain)
    wait_for(lambda: len(svc.pending), lambda n: n == 3, timeout=15, what="three pending GPU pods followed")

    def ahead(name):
        d = svc._demand(Pod.model_validate(wire(core.read_namespaced_pod(name, k8s_namespace))))
        return svc.pending.gpus_ahead(d.uid, d.priority, d.created_s, d.namespace, d.name)

    assert (ahead("qa"), ahead("qb"), ahead("qc")) == (0, 2, 3)
    uid = made["qb"].metadata.uid
    assert svc.pending.others(uid) == 2 and svc.pending.others(uid, exclude=[made["qa"].metadata.uid]) == 1
    core.patch_namespaced_pod("q0", k8s_namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])
    wait_for(lambda: len(svc.pending), lambda n: n == 4, timeout=15, what="the ungated pod joined the queue")
    assert (ahead("qa"), ahead("qc")) == (2, 5)  # created first: ahead of all once in the queue
    core.delete_namespaced_pod("q0", k8s_namespace, grace_period_seconds=0)
    wait_for(lambda: len(svc.pending), lambda n: n == 3, timeout=15, what="the deleted pod left the queue")
    # the policy is asked with that figure, by filter and by bind
    seen = []
    assess = svc.policy.assess
    svc.policy.assess = lambda request, view, names: (seen.append((request.gpus_ahead, request.jobs_queued)),
                                                      assess(request, view, names))[1]
    svc.filter(ExtenderArgs.model_validate({"Pod": wire(core.read_namespaced_pod("qc", k8s_namespace)), "NodeNames": [node]}))
    assert seen == [(3, 2)]  # qa's 2 GPUs and qb's 1 ahead; qa and qb the other pending pods
    body = {"PodName": "qa", "PodNamespace": k8s_namespace, "PodUID": made["qa"].metadata.uid, "Node": node}
    assert svc.bind(ExtenderBindingArgs.model_validate(body)).error == ""
    wait_for(lambda: ahead("qc"), lambda n: n == 1, timeout=15, what="the bound pod left the queue")
    core.delete_namespaced_pod("qb", k8s_namespace, grace_period_seconds=0)
    wait_for(lambda: ahead("qc"), lambda n: n == 0, timeout=15, what="the deleted pod left the queue")


def test_filter_waits_for_the_bind_of_the_pod_it_passed_before(control_plane, k8s_client, k8s_namespace, store,
                                                              make_service, api):
    """kube-scheduler binds a pod in the background and filters the next pod at once; the
    extender's filter waits for the bind of the pod it passed before, so the next pod is judged
    with that pod's GPU taken (without the wait it would be judged on the state before it, and sent to a
    node whose free GPU was gone by its bind). Through the served app: the wait must not hold the
    event loop that answers the bind."""
    import threading

    import httpx
    from extender_support import ThreadServer, extender_args

    from iadeep.extender import create_app

    nodes = control_plane.add_nodes(1, gpus=4, gpu_mem_gib=16, prefix=f"b{uuid.uuid4().hex[:6]}-")
    publish(store, nodes, gpus=4)
    svc = make_service(pod_api=api, cache={"sweep_interval_s": 0, "pod_watch": False})
    core = client.CoreV1Api(k8s_client)
    made = {n: core.create_namespaced_pod(k8s_namespace, gpu_pod(n, mem=6, gpus=1, namespace=k8s_namespace,
                                                                 scheduler=NOBODY, annotations=R18))
            for n in ("wa", "wb")}
    with ThreadServer(create_app(service=svc)) as srv:
        assert httpx.post(f"{srv.url}/iadeep/filter", json=extender_args(made["wa"], nodes)).json()["NodeNames"] == nodes
        reserved_when_judged = []
        assess = svc._assess
        svc._assess = lambda *a: (reserved_when_judged.append(len(store.assignments())), assess(*a))[1]
        second = threading.Thread(target=lambda: httpx.post(f"{srv.url}/iadeep/filter", timeout=10,
                                                            json=extender_args(made["wb"], nodes)), daemon=True)
        second.start()
        second.join(0.3)
        assert second.is_alive() and reserved_when_judged == []  # waits for wa's bind
        body = {"PodName": "wa", "PodNamespace": k8s_namespace, "PodUID": made["wa"].metadata.uid, "Node": nodes[0]}
        assert httpx.post(f"{srv.url}/iadeep/bind", json=body, timeout=10).json() == {"Error": ""}
        second.join(10)
        assert not second.is_alive() and reserved_when_judged == [1]  # judged with wa's reservation


def test_the_node_annotation_follows_reservations_and_releases(make_service, store):
    """``iadeep.io/gpu-reservations`` (``_nodestate``): the copy's per-GPU memory and pods, marked for writing
    by the store's watch after a reservation and after a release (real etcd)."""
    from iadeep.extender._nodestate import reservations_annotation
    from iadeep.state import JobRecord

    publish(store, ["n0"], gpus=2, gpu_mem_gib=16.0)
    marked: list[set[str]] = []
    svc = make_service()
    svc.cache.on_nodes = marked.append
    svc.cache.start()
    try:
        wait_for(lambda: marked, bool, what="the listing marks every node")
        assert marked[0] == {"n0"}
        assert reservations_annotation(svc.cache.current()[0], "n0") == \
            '[{"gpu":0,"mem_gib":16.0,"used_gib":0.0,"pods":0},{"gpu":1,"mem_gib":16.0,"used_gib":0.0,"pods":0}]'
        assert reservations_annotation(svc.cache.current()[0], "elsewhere") is None
        job = JobRecord("uid-a", "ns", "a", "ResNet-18", 16, 1, 6.5, remaining_s=100.0)
        store.reserve(job, "n0", [1], colocation_limit=2, now_s=0.0)
        wait_for(lambda: reservations_annotation(svc.cache.current()[0], "n0"), lambda v: '"gpu":1,"mem_gib":16.0,"used_gib":6.5,"pods":1' in v,
                 what="the reservation in the copy")
        assert {"n0"} in marked[1:]
        del marked[:]
        assert svc.release_pods(["uid-a"]) == ["uid-a"]
        wait_for(lambda: marked, bool, what="the release marks the node")  # delivered by the watch after forget()
        assert set().union(*marked) == {"n0"}
        assert '"gpu":1,"mem_gib":16.0,"used_gib":0.0,"pods":0' in reservations_annotation(svc.cache.current()[0], "n0")
    finally:
        svc.cache.stop()


def test_the_publisher_writes_changed_values_and_skips_unknown_nodes(control_plane, api, caplog):
    """:class:`NodeStatePublisher` against the real API server: a write, no second write of the same
    value, 404 for a node the API does not know (an inventory without a Node), 403 for a client
    without the right (logged once)."""
    from iadeep.extender._nodestate import ANNOTATION_NODE_RESERVATIONS, NodeStatePublisher

    (node,) = control_plane.add_nodes(1, prefix=f"p{uuid.uuid4().hex[:6]}-")
    values = {node: '[{"gpu":0}]', "no-such-node": "[]"}
    outcomes: list[str] = []
    pub = NodeStatePublisher(api.annotate_node, values.get, on_outcome=outcomes.append)
    assert pub.publish(node) == "written"
    assert pub.publish(node) == "unchanged"
    assert pub.publish("no-such-node") == "no_node"
    assert pub.publish("neither") == "unchanged"  # no value: nothing to write
    core = client.CoreV1Api(control_plane.api_client())
    assert core.read_node(node).metadata.annotations[ANNOTATION_NODE_RESERVATIONS] == '[{"gpu":0}]'
    values[node] = '[{"gpu":1}]'
    pub.start()
    try:
        pub.mark([node, "no-such-node"])
        wait_for(lambda: core.read_node(node).metadata.annotations[ANNOTATION_NODE_RESERVATIONS], lambda v: v == '[{"gpu":1}]',
                 what="the thread wrote the new value")
        wait_for(lambda: sorted(outcomes), lambda o: o == ["no_node", "written"], what="both nodes handled")
    finally:
        pub.stop()
    # without the right to patch nodes: refused (403), said once in the log, never raised
    nobody = control_plane.api_client()
    nobody.set_default_header("Impersonate-User", "iadeep-test-nobody")
    unprivileged = KubernetesPodApi(KubeSettings(), api_client=nobody)
    try:
        values[node] = '[{"gpu":2}]'
        refused = NodeStatePublisher(unprivileged.annotate_node, values.get)
        with caplog.at_level("ERROR", logger="iadeep.extender"):
            assert refused.publish(node) == "forbidden"
            assert refused.publish(node) == "forbidden"
        assert len([r for r in caplog.records if "patch nodes" in r.getMessage()]) == 1
        assert core.read_node(node).metadata.annotations[ANNOTATION_NODE_RESERVATIONS] == '[{"gpu":1}]'
    finally:
        unprivileged.close()
