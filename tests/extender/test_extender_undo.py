"""The extender carries out the coordinators' undo records: real etcd, the real kube-apiserver (its
Eviction API) and kwok moving the pods through their phases. It bans the pair in its policy (a
later filter never co-locates it, also after a restart: the bans are read back from etcd), evicts
the named pod and settles the record; a record processed again never evicts another pod; a
malformed record or one naming a gone pod is skipped with a clear log."""

from __future__ import annotations

import base64
import logging
import time
import uuid

import pytest
from extender_support import extender_args, gpu_pod, publish, wait_for

from iadeep.extender._wire import ExtenderArgs
from iadeep.jobtypes import JobType
from iadeep.state import BannedType, JobRecord, PlacementPolicy, UndoRecord

client = pytest.importorskip("kubernetes.client")

NOBODY = "nobody-schedules-this"
# The evicting tests' partner A has 600 s left: with the pair banned, B would be locked out of the
# node's one GPU for 600 s, less than the pair costs B's 3,600 s, so the policy does not keep it.
A = ("ResNet-50", 64)
B = ("Transformer", 64)
BANNED = "refused by the policy (this pair was measured to share badly)"


@pytest.fixture
def node(control_plane, store):
    """One node with one 32-GiB GPU: a pair on it is the only co-location there is."""
    names = control_plane.add_nodes(1, gpus=1, gpu_mem_gib=32, prefix=f"u{uuid.uuid4().hex[:6]}-")
    publish(store, names, gpus=1, gpu_mem_gib=32.0)
    return names[0]


@pytest.fixture
def start(make_service, api):
    """Start a service (cache follower, pod follower, undo thread; no sweep) and stop it afterwards."""
    started = []

    def make(**overrides):
        svc = make_service(pod_api=api, cache={"sweep_interval_s": 0, "pod_watch": True, "pod_watch_timeout_s": 5},
                           **overrides)
        svc.start()
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


def _running(core, store, api, ns, name, job_type, node, mem=8, duration_s=3600.0):
    """A pod of ``job_type`` reserved on the node's GPU 0 and bound there, as the extender's bind leaves it
    (reserved directly: the placement decision is not what is tested here)."""
    ann = {"iadeep.io/model": job_type[0], "iadeep.io/batch-size": str(job_type[1])}
    pod = core.create_namespaced_pod(ns, gpu_pod(name, mem=mem, namespace=ns, scheduler=NOBODY, annotations=ann))
    store.reserve(JobRecord(pod.metadata.uid, ns, name, job_type[0], job_type[1], 1, float(mem), duration_s, time.time()),
                  node, [0], colocation_limit=2, now_s=time.time())
    api.bind(ns, name, pod.metadata.uid, node)
    return pod


def _undo(pod, node, *types, progress=0.7):
    return UndoRecord(pod.metadata.uid, pod.metadata.namespace, pod.metadata.name, node, 0,
                      tuple(BannedType(m, b) for m, b in types), progress, 1.0, session=f"{node}.0.1",
                      reason=f"co-location undone: best measured progress {progress:.2f} < 1", at=time.time())


def _filter(svc, ns, name, job_type, node, mem=8):
    ann = {"iadeep.io/model": job_type[0], "iadeep.io/batch-size": str(job_type[1])}
    pod = gpu_pod(name, mem=mem, namespace=ns, uid=str(uuid.uuid4()), annotations=ann)
    return svc.filter(ExtenderArgs.model_validate(extender_args(pod, [node])))


def _gone_or_leaving(core, ns, name) -> bool:
    try:
        pod = core.read_namespaced_pod(name, ns)
    except client.exceptions.ApiException as exc:
        return exc.status == 404
    return pod.metadata.deletion_timestamp is not None or pod.status.phase in ("Failed", "Succeeded")


def test_an_undo_bans_the_pair_evicts_the_newest_pod_and_survives_a_restart(k8s_client, k8s_namespace, store, api,
                                                                            node, start, model):
    core = client.CoreV1Api(k8s_client)
    ns = k8s_namespace
    a = _running(core, store, api, ns, "train-a-x1", A, node, duration_s=600.0)
    b = _running(core, store, api, ns, "train-b-x1", B, node)
    svc = start()
    ta, tb = (model.type_id(JobType(*t)) for t in (A, B))
    assert not svc.policy.avoided[ta, tb]
    placement = store.placement()
    assert placement is not None and placement.undo_below == 1.0  # what the coordinators read

    store.put_undo(_undo(b, node, A, B))  # what the coordinator writes
    wait_for(lambda: store.undos()[b.metadata.uid].outcome, lambda o: o == "evicted", timeout=30, what="undo settled")
    assert svc.policy.avoided[ta, tb] and svc.policy.avoided[tb, ta]
    wait_for(lambda: _gone_or_leaving(core, ns, "train-b-x1"), bool, timeout=30, what="the newest pod evicted")
    live_a = core.read_namespaced_pod("train-a-x1", ns)
    assert live_a.metadata.deletion_timestamp is None and live_a.metadata.uid == a.metadata.uid  # the oldest stays
    # its reservation goes when the pod ends (the pod follower); its Job's replacement resumes its work
    wait_for(lambda: {x.pod_uid for x in store.assignments()}, lambda held: held == {a.metadata.uid}, timeout=30,
             what="the evicted pod's reservation released")
    assert (ns, "train-b") in svc._resumed
    assert svc.metrics.undos.labels("evicted")._value.get() == 1

    # a later filter never co-locates the pair: a new pod of B's type fails on A's GPU, by the ban
    out = _filter(svc, ns, "train-b-x2", B, node)
    assert not out.node_names and BANNED in (out.failed_nodes or {}).get(node, "")

    # a restarted extender reads the bans back from etcd and does not evict again
    svc.stop()
    again = start()
    assert again.policy.avoided[ta, tb] and again.policy.avoided[tb, ta]
    assert again.undos.pending() == []
    out = _filter(again, ns, "train-b-x3", B, node)
    assert BANNED in (out.failed_nodes or {}).get(node, "")
    assert core.read_namespaced_pod("train-a-x1", ns).metadata.deletion_timestamp is None


def test_an_undone_pod_the_ban_would_lock_out_of_every_gpu_stays(k8s_client, k8s_namespace, store, api, node, start,
                                                                  model):
    """The node's one GPU holds A for ten days: with the pair banned, B would wait that long for a
    GPU, far more than its 600-s pair with A costs (the rule the simulator's policy applies at the
    end of the session, :meth:`iadeep.policy.IADeep.keeps`). The extender bans the pair, does not
    evict B, and settles the record ``kept``."""
    core = client.CoreV1Api(k8s_client)
    ns = k8s_namespace
    _running(core, store, api, ns, "train-a-k1", A, node, duration_s=864_000.0)
    b = _running(core, store, api, ns, "train-b-k1", B, node, duration_s=600.0)
    svc = start()
    store.put_undo(_undo(b, node, A, B))
    wait_for(lambda: store.undos()[b.metadata.uid].outcome, lambda o: o == "kept", timeout=30, what="undo settled")
    ta, tb = (model.type_id(JobType(*t)) for t in (A, B))
    assert svc.policy.avoided[ta, tb] and svc.policy.avoided[tb, ta]  # the ban stands
    time.sleep(1.0)
    live = core.read_namespaced_pod("train-b-k1", ns)
    assert live.metadata.uid == b.metadata.uid and live.metadata.deletion_timestamp is None
    assert svc.metrics.undos.labels("kept")._value.get() == 1 and (ns, "train-b") not in svc._resumed


def test_filter_passes_the_node_of_a_pod_the_bans_lock_out(k8s_client, k8s_namespace, store, api, node, start, model):
    """The pair (A, B) is banned and the node's one GPU holds A for ten days: a B pod would wait
    that long, far more than its 600-s pair with A costs, so the extender's filter passes the node
    (the policy's reserve step 0, as the simulator places it); with A leaving in 60 s it fails it
    by the ban."""
    core = client.CoreV1Api(k8s_client)
    ns = k8s_namespace
    a = _running(core, store, api, ns, "train-a-f1", A, node, duration_s=864_000.0)
    svc = start()
    ta, tb = (model.type_id(JobType(*t)) for t in (A, B))
    with svc._policy_lock:
        svc.policy.avoid([ta, tb])
    b = core.create_namespaced_pod(ns, gpu_pod("train-b-f1", mem=8, namespace=ns, scheduler=NOBODY,
                                               annotations={"iadeep.io/model": B[0], "iadeep.io/batch-size": str(B[1]),
                                                            "iadeep.io/duration-s": "600"}))
    out = svc.filter(ExtenderArgs.model_validate(extender_args(b, [node])))
    assert out.node_names == [node], out
    store.release(a.metadata.uid, now_s=time.time())
    _running(core, store, api, ns, "train-a-f2", A, node, duration_s=60.0)
    wait_for(lambda: svc.filter(ExtenderArgs.model_validate(extender_args(b, [node]))),
             lambda o: not o.node_names and BANNED in (o.failed_nodes or {}).get(node, ""), timeout=30,
             what="the ban refuses the node once A leaves soon")


def test_a_pending_record_processed_again_never_evicts_another_pod(k8s_client, k8s_namespace, store, api, node, start):
    """The extender died after the eviction, before settling: the pod's Job made a replacement of
    the same name pattern (here: even the same name, a new UID). Processing the record again evicts
    nobody: the eviction names the evicted pod's UID."""
    core = client.CoreV1Api(k8s_client)
    ns = k8s_namespace
    _running(core, store, api, ns, "train-a-y1", A, node, duration_s=600.0)
    b = _running(core, store, api, ns, "train-b-y1", B, node)
    record = _undo(b, node, A, B)
    store.put_undo(record)
    core.delete_namespaced_pod("train-b-y1", ns, grace_period_seconds=0)  # evicted before the "crash"
    wait_for(lambda: _gone_or_leaving(core, ns, "train-b-y1"), bool, timeout=30, what="pod gone")
    wait_for(lambda: [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "train-b-y1"], lambda x: not x,
             timeout=30, what="pod deleted")
    same_name = core.create_namespaced_pod(ns, gpu_pod("train-b-y1", mem=8, namespace=ns, scheduler=NOBODY))
    svc = start()
    wait_for(lambda: store.undos()[b.metadata.uid].outcome, lambda o: o == "gone", timeout=30, what="undo settled")
    time.sleep(1.0)
    live = core.read_namespaced_pod("train-b-y1", ns)
    assert live.metadata.uid == same_name.metadata.uid and live.metadata.deletion_timestamp is None
    assert svc.undos.settled == {b.metadata.uid: "gone"}


def test_malformed_or_unknown_records_are_skipped_with_a_clear_error(k8s_client, k8s_namespace, store, api, node, start,
                                                                      model, caplog):
    core = client.CoreV1Api(k8s_client)
    ns = k8s_namespace
    a = _running(core, store, api, ns, "train-a-z1", A, node, duration_s=600.0)
    b = _running(core, store, api, ns, "train-b-z1", B, node)

    def put_raw(key: str, value: bytes) -> None:
        store.backend._post("/kv/put", {"key": base64.b64encode(f"{store.keys.prefix}/{key}".encode()).decode(),
                                "value": base64.b64encode(value).decode()})

    put_raw("undos/x1", b"{not json")
    put_raw("undos/x2", b'{"pod_uid":"x2","namespace":"n","name":"x","node":"n","gpu":0,"types":[],'
                        b'"progress":0.5,"undo_below":1.0}')  # no types: not an undone pair
    put_raw(f"undos/{a.metadata.uid}", b'{"pod_uid":"someone-else","namespace":"n","name":"x","node":"n","gpu":0,'
                                       b'"types":[{"model":"LM","batch_size":5},{"model":"LM","batch_size":5}],'
                                       b'"progress":0.5,"undo_below":1.0}')  # names another pod than its key
    store.put_undo(_undo(b, node, ("NoSuchModel", 8), A))  # well-formed, a type the model does not know
    caplog.set_level(logging.WARNING)
    svc = start()
    time.sleep(1.5)
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "undos/x1" in messages and "undos/x2" in messages and "someone-else" in messages
    assert "NoSuchModel" in messages and "skipped" in messages
    assert not svc.policy.avoided.any()  # no ban from any of them
    assert svc.undos.pending() == [] and svc.undos.settled == {}
    for name in ("train-a-z1", "train-b-z1"):  # nobody evicted
        assert core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is None
    assert svc.ready()[0]  # the extender serves on

    # a good record after them is carried out as usual
    store.put_undo(_undo(b, node, A, B))
    wait_for(lambda: store.undos()[b.metadata.uid].outcome, lambda o: o == "evicted", timeout=30, what="undo settled")


def test_a_record_naming_a_gone_pod_is_settled_as_gone_and_still_bans(k8s_namespace, store, node, start, model):
    ghost = gpu_pod("train-ghost-1", mem=8, namespace=k8s_namespace, uid=str(uuid.uuid4()))
    ghost.metadata.namespace = k8s_namespace
    store.put_undo(_undo(ghost, node, A, B))
    svc = start()
    wait_for(lambda: store.undos()[ghost.metadata.uid].outcome, lambda o: o == "gone", timeout=30, what="settled gone")
    ta, tb = (model.type_id(JobType(*t)) for t in (A, B))
    assert svc.policy.avoided[ta, tb]


def test_undo_below_zero_publishes_no_undo_and_a_policy_without_undo_publishes_zero(store, make_service):
    svc = make_service(undo_below=0.0)
    svc._publish_placement()
    assert store.placement() == PlacementPolicy("iadeep", 2, store.placement().at, undo_below=0.0)
    assert svc.policy.undo_below is None
    other = make_service(policy="antman")
    other._placement_published = False
    other._publish_placement()
    assert store.placement().policy == "antman" and store.placement().undo_below == 0.0


def test_gandiva_publishes_its_profile_session_and_threshold(store, make_service):
    """The node side learns from the placement record to profile gandiva's packings (one round, no
    tuner) and to undo below gandiva's 1.0; iadeep's record names the tuning session."""
    svc = make_service(policy="gandiva")
    svc._publish_placement()
    p = store.placement()
    assert (p.policy, p.session, p.undo_below, p.colocation_limit) == ("gandiva", "profile", 1.0, 2)
    iadeep = make_service()
    iadeep._placement_published = False
    iadeep._publish_placement()
    assert store.placement().session == "tune"
