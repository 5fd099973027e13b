"""Pure translation from a store snapshot to the policy's inputs, and from a pod to its demand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from extender_support import gpu_pod, view_meaning, wire

from iadeep.extender import PodSpecError, Snapshot, TypeResolver, ViewBase, build_view, job_record, pod_demand
from iadeep.extender._view import add_reservation, remove_pod
from iadeep.extender._wire import Pod
from iadeep.policy import Placement, make_policy
from iadeep.state import Assignment, GpuInfo, GpuState, JobRecord, NodeInventory

DEFAULTS = {"gpu_mem_resource": "iadeep.io/gpu-mem", "gpu_count_resource": "iadeep.io/gpu-count",
            "default_model": "ResNet-50", "default_batch_size": 64, "default_duration_s": 3600.0}


@pytest.fixture(scope="module")
def types(model) -> TypeResolver:
    return TypeResolver(model, "ResNet-50", 64)


def _inv(name: str, n: int, mem: float = 16.0) -> NodeInventory:
    return NodeInventory(name, tuple(GpuInfo(i, mem, f"GPU-{name}-{i}") for i in range(n)))


def _job(uid: str, model: str = "ResNet-18", bs: int = 64, mem: float = 4.0, gpus: int = 1, left: float = 100.0) -> JobRecord:
    return JobRecord(uid, "ns", uid, model, bs, gpus, mem, remaining_s=left)


@pytest.fixture
def snapshot() -> Snapshot:
    inventories = {"b": _inv("b", 2), "a": _inv("a", 3, 32.0)}
    states = {
        ("a", 1): GpuState("a", 1, 8.0, ("p1", "p2")),
        ("b", 0): GpuState("b", 0, 4.0, ("p1",)),  # a gang job across nodes
        ("b", 1): GpuState("b", 1, 2.0, ("ghost",)),  # no job record
        ("gone", 0): GpuState("gone", 0, 3.0, ("p3",)),  # node without inventory: ignored
    }
    jobs = {"p1": _job("p1", gpus=2, left=50.0), "p2": _job("p2", "Transformer", 32, left=70.0)}
    return Snapshot(inventories, states, jobs, taken_at_s=1000.0)


def test_job_keys_name_the_pods_jobs_across_rebuilds_and_replacement_pods(types):
    """What a policy remembers about a job between calls (how often it was preempted) is keyed by
    ``ClusterView.job_key``: the extender renumbers handles when it rebuilds its view, and a Job's
    replacement pod (after an eviction) is a new pod of the same Job."""
    def rec(uid, name):
        return JobRecord(uid, "ns", name, "ResNet-18", 64, 1, 4.0, remaining_s=100.0)

    inv = {"a": _inv("a", 2)}
    first = Snapshot(inv, {("a", 0): GpuState("a", 0, 4.0, ("u1",)), ("a", 1): GpuState("a", 1, 4.0, ("u2",))},
                     {"u1": rec("u1", "train-a-x7k2p"), "u2": rec("u2", "train-b-q9m4z")})
    # later: train-a's pod was evicted and replaced (new UID, new suffix), now listed after train-b's
    later = Snapshot(inv, {("a", 0): GpuState("a", 0, 4.0, ("u2",)), ("a", 1): GpuState("a", 1, 4.0, ("u9",))},
                     {"u2": rec("u2", "train-b-q9m4z"), "u9": rec("u9", "train-a-r2d2c")})
    asking = rec("u5", "train-c-aaaaa")
    v1, r1 = build_view(first, asking, types, now_s=0.0, slots=2)
    v2, r2 = build_view(later, asking, types, now_s=0.0, slots=2)
    keys1 = {v1.job_key(h) for h in (0, 1)}
    assert keys1 == {("ns", "train-a"), ("ns", "train-b")}
    assert v1.job_key(int(v1.slots[0, 0])) == v2.job_key(int(v2.slots[1, 0])) == ("ns", "train-a")
    assert int(v1.slots[0, 0]) != int(v2.slots[1, 0])  # same Job, another handle
    assert v1.job_key(r1.handle) == v2.job_key(r2.handle) == ("ns", "train-c")


def test_build_view_translates_the_snapshot(snapshot, types, model):
    asking = _job("new", "LM", 20, mem=5.0, left=30.0)
    view, req = build_view(snapshot, asking, types, now_s=1010.0, slots=2)

    assert view.node_names == ("a", "b")  # sorted
    assert view.gpu_node.tolist() == [0, 0, 0, 1, 1]
    assert view.gpu_local_index.tolist() == [0, 1, 2, 0, 1]
    assert view.gpu_mem_total_gib.tolist() == [32, 32, 32, 16, 16]
    assert view.gpu_mem_used_gib.tolist() == [0, 8, 0, 4, 2]
    p1, p2, ghost = 0, 1, 2  # handles in order of first appearance
    assert view.slots.tolist() == [[-1, -1], [p1, p2], [-1, -1], [p1, -1], [ghost, -1]]
    rn18 = types.resolve("ResNet-18", 64)
    assert view.job_type.tolist() == [rn18, types.resolve("Transformer", 32), types.default_type, types.resolve("LM", 20)]
    assert view.job_num_gpus.tolist() == [2, 1, 1, 1]
    assert view.job_work_left_s.tolist() == [50.0, 70.0, 0.0, 30.0]
    assert view.job_rate.tolist() == [1, 1, 1, 0]  # the asking job does not run yet
    assert view.remaining_s(np.array([0, 3])).tolist() == [40.0, 30.0]  # 10 s since the snapshot
    for arr in (view.gpu_mem_used_gib, view.slots, view.job_type, view.job_rate):
        assert not arr.flags.writeable
    assert req.handle == 3 and req.job_id == "new" and req.type_id == types.resolve("LM", 20)
    assert (req.num_gpus, req.mem_gib, req.remaining_s) == (1, 5.0, 30.0)


def test_slots_widen_for_a_gpu_holding_more_than_the_limit(types):
    snap = Snapshot({"n": _inv("n", 1)}, {("n", 0): GpuState("n", 0, 3.0, ("x", "y", "z"))}, {})
    base = ViewBase.from_snapshot(snap, types, slots=2)
    assert base.slots.shape == (1, 3)


def test_reservation_is_applied_once(snapshot, types):
    base = ViewBase.from_snapshot(snapshot, types, slots=2)
    job = _job("new", mem=6.0)
    tid = types.resolve(job.model, job.batch_size)
    a = [Assignment("new", "a", 2, 6.0, 1.0)]
    snap1, once = add_reservation(snapshot, base, job, tid, a, types, now_s=1.0)
    snap2, twice = add_reservation(snap1, once, job, tid, a, types, now_s=1.0)
    for v in (once, twice):
        assert v.gpu_mem_used_gib.tolist() == [0, 8, 6, 4, 2]
        assert v.slots[2].tolist() == [3, -1]
        assert v.pods[3] == "new"
    assert base.gpu_mem_used_gib.tolist() == [0, 8, 0, 4, 2]  # the original is untouched
    assert snap2.gpu_states[("a", 2)] == GpuState("a", 2, 6.0, ("new",))
    assert snap2.jobs["new"] == job and "new" not in snapshot.jobs
    # a third pod on a full GPU widens the slots instead of dropping it
    _, full = add_reservation(snap1, once, _job("x"), tid, [Assignment("x", "a", 1, 1.0, 1.0)], types, now_s=1.0)
    assert full.slots.shape[1] == 3 and full.gpu_mem_used_gib[1] == 9


def test_restrict_keeps_one_node(snapshot, types):
    base = ViewBase.from_snapshot(snapshot, types, slots=2)
    b = base.restrict("b")
    assert b.node_names == ("b",) and b.n_gpus == 2
    assert b.gpu_mem_used_gib.tolist() == [4, 2] and b.gpu_uuid == ("GPU-b-0", "GPU-b-1")
    assert b.gpu_node.tolist() == [0, 0]
    assert base.restrict("nowhere").node_names == () and base.restrict("nowhere").n_gpus == 0


def test_policy_places_on_the_restricted_view(snapshot, types, model):
    policy = make_policy("iadeep", model)
    base = ViewBase.from_snapshot(snapshot, types, slots=policy.limit).restrict("a")
    view, req = base.with_job(_job("new", mem=10.0), types.resolve("ResNet-18", 64), now_s=1000.0)
    decision = policy.place(req, view)
    assert isinstance(decision, Placement)
    assert [int(view.gpu_local_index[g]) for g in decision.gpus] in ([0], [2])  # a free GPU of node a


def test_type_resolver(types, model):
    assert model.types[types.resolve("ResNet-50", 100)].batch_size == 128  # nearest measured
    assert model.types[types.resolve("ResNet-50", 48)].batch_size == 32  # tie -> smaller
    assert model.types[types.resolve("A3C", 7)].batch_size == 1  # fixed-batch family
    with pytest.raises(PodSpecError, match="'GPT-9' is not in the interference model; known: A3C"):
        types.resolve("GPT-9", 1)
    assert types.resolve_or_default("GPT-9", 1) == types.default_type


def _demand(pod):
    return pod_demand(Pod.model_validate(wire(pod)), **DEFAULTS)


def test_pod_demand_from_a_real_pod():
    pod = gpu_pod("p", mem=24, gpus=2, uid="u-1", namespace="ns",
                  annotations={"iadeep.io/model": "Transformer", "iadeep.io/batch-size": "32", "iadeep.io/duration-s": "90.5"})
    d = _demand(pod)
    assert (d.uid, d.namespace, d.name) == ("u-1", "ns", "p")
    assert (d.mem_gib, d.num_gpus, d.model, d.batch_size, d.duration_s) == (12.0, 2, "Transformer", 32, 90.5)
    rec = job_record(d, 5.0)
    assert (rec.pod_uid, rec.mem_gib, rec.num_gpus, rec.remaining_s, rec.submitted_at) == ("u-1", 12.0, 2, 90.5, 5.0)


def test_pod_demand_defaults_and_not_ours():
    d = _demand(gpu_pod("p", mem=8, uid="u"))
    assert (d.model, d.batch_size, d.duration_s, d.num_gpus) == ("ResNet-50", 64, 3600.0, 1)
    assert _demand(gpu_pod("cpu-only", mem=None, uid="u")) is None


def test_pod_demand_of_a_gang_member_and_the_errors_of_a_malformed_one():
    def member(**ann):
        data = wire(gpu_pod("m", mem=32, gpus=4, uid="u", annotations=ann))
        data["metadata"]["labels"] = {"iadeep.io/gang": "big"}
        return Pod.model_validate(data)

    d = pod_demand(member(**{"iadeep.io/gang-size": "4", "batch.kubernetes.io/job-completion-index": "2"}), **DEFAULTS)
    assert (d.gang, d.gang_size, d.gang_index, d.num_gpus, d.mem_gib) == ("big", 4, 2, 4, 8.0)
    assert job_record(d, 1.0).gang == "big"
    assert (_demand(gpu_pod("p", mem=8, uid="u")).gang, _demand(gpu_pod("p", mem=8, uid="u")).gang_size) == ("", 1)
    with pytest.raises(PodSpecError, match="iadeep.io/gang-size must be an integer in 1..1024, got None"):
        pod_demand(member(**{"batch.kubernetes.io/job-completion-index": "0"}), **DEFAULTS)
    with pytest.raises(PodSpecError, match=r"job-completion-index must be an integer in 0..3 .*got '4'"):
        pod_demand(member(**{"iadeep.io/gang-size": "4", "batch.kubernetes.io/job-completion-index": "4"}), **DEFAULTS)
    with pytest.raises(PodSpecError, match="the pods of an Indexed Job carry it"):
        pod_demand(member(**{"iadeep.io/gang-size": "4"}), **DEFAULTS)


def test_pod_demand_sums_containers_and_takes_the_larger_init_container():
    data = wire(gpu_pod("p", mem=4, uid="u"))
    data["spec"]["containers"].append({"name": "side", "resources": {"requests": {"iadeep.io/gpu-mem": "2"}}})
    assert pod_demand(Pod.model_validate(data), **DEFAULTS).mem_gib == 6
    data["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"iadeep.io/gpu-mem": "10"}}}]
    assert pod_demand(Pod.model_validate(data), **DEFAULTS).mem_gib == 10


@pytest.mark.parametrize(("mem", "gpus", "annotations", "message"), [
    ("lots", None, {}, "is not a quantity"),
    ("-4", None, {}, "must be positive"),
    ("8", "0.5", {}, "iadeep.io/gpu-count must be an integer in 1..64"),
    ("8", "1e9", {}, "iadeep.io/gpu-count must be an integer in 1..64"),
    ("8", None, {"iadeep.io/batch-size": "big"}, "annotation iadeep.io/batch-size='big' is not an integer"),
    ("8", None, {"iadeep.io/batch-size": "0"}, "must be an integer in 1..9007199254740991"),
    ("8", None, {"iadeep.io/batch-size": str(2**53)}, "must be an integer in 1..9007199254740991"),
    ("8", None, {"iadeep.io/duration-s": "nan"}, "must be a number of seconds in 0..315360000"),
    ("8", None, {"iadeep.io/duration-s": "-1"}, "must be a number of seconds in 0..315360000"),
    ("8", None, {"iadeep.io/duration-s": "1e308"}, "must be a number of seconds in 0..315360000"),
    ("1e999999", None, {}, "is out of range"),
    ("9e99999999", None, {}, "is out of range"),  # summing it overflowed Decimal's context
    ("8", "1e999999999999", {}, "is out of range"),
])
def test_pod_demand_rejects_what_cannot_be_served(mem, gpus, annotations, message):
    with pytest.raises(PodSpecError, match=message.replace("(", r"\(").replace(".", r"\.")):
        _demand(gpu_pod("p", mem=mem, gpus=gpus, uid="u", annotations=annotations))


# -- incremental updates (what the extender's cache applies per watch batch) -------------------

_NODES = {"a": _inv("a", 3, 32.0), "b": _inv("b", 2)}
_PODS = [f"p{i}" for i in range(6)]
_KINDS = [("ResNet-18", 64), ("Transformer", 32), ("LM", 20), ("NoSuchModel", 8)]

gpu_change = st.tuples(st.just("gpu"), st.sampled_from([("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("zz", 0)]),
                       st.one_of(st.none(), st.tuples(st.lists(st.sampled_from(_PODS), unique=True, max_size=3),
                                                      st.floats(0.0, 30.0))))
job_change = st.tuples(st.just("job"), st.sampled_from(_PODS),
                       st.one_of(st.none(), st.tuples(st.sampled_from(_KINDS), st.integers(1, 2), st.floats(0.0, 1e4))))


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(gpu_change, job_change), min_size=1, max_size=6), max_size=12))
def test_incremental_updates_equal_a_fresh_build(types, batches):
    snap = Snapshot(_NODES, {}, {}, taken_at_s=0.0)
    base = ViewBase.from_snapshot(snap, types, slots=2)
    for batch in batches:
        gpus, jobs = {}, {}
        for kind, key, value in batch:
            if kind == "gpu":
                gpus[key] = None if value is None else GpuState(key[0], key[1], value[1], tuple(value[0]))
            else:
                jobs[key] = None if value is None else JobRecord(key, "ns", key, value[0][0], value[0][1], value[1], 1.0,
                                                                 remaining_s=value[2])
        snap = snap.with_changes(gpu_states=gpus, jobs=jobs)
        base = base.with_jobs(jobs, types, now_s=1.0)
        base = base.with_gpu_states({k: snap.gpu_states.get(k) for k in gpus}, snap.jobs, types, now_s=1.0)
        assert view_meaning(base) == view_meaning(ViewBase.from_snapshot(snap, types, slots=2))


def test_reservation_then_release_by_pod(snapshot, types):
    base = ViewBase.from_snapshot(snapshot, types, slots=2)
    job = _job("new", "LM", 20, mem=5.0)
    a = [Assignment("new", "a", 2, 5.0, 1.0)]
    snap2, base2 = add_reservation(snapshot, base, job, types.resolve("LM", 20), a, types, now_s=1.0)
    assert view_meaning(base2) == view_meaning(ViewBase.from_snapshot(snap2, types, slots=2))
    snap3, base3 = remove_pod(snap2, base2, "new", types, now_s=2.0)
    assert view_meaning(base3) == view_meaning(ViewBase.from_snapshot(snap3, types, slots=2))
    assert not base3.mostly_dead()


def test_a_nominated_pod_occupies_its_held_gpus_for_every_other_pod(snapshot, types):
    """GPUs held for a preemptor (``iadeep.extender._preempt``): every other pod's view has the
    preemptor on them (its memory, a co-location slot, its job row), as kube-scheduler counts
    nominated pods; its own view and a view after the hold expires do not; a nomination waits
    while a victim still holds one of its GPUs."""
    from iadeep.extender._preempt import Nominations, with_nominations

    clock = [0.0]
    noms = Nominations(hold_s=30.0, clock=lambda: clock[0])
    head = _job("head", "ResNet-50", 128, mem=9.0, left=300.0)
    noms.add("head", head, types.resolve("ResNet-50", 128), [("a", 0), ("a", 1)], victims=["p2"])
    base = ViewBase.from_snapshot(snapshot, types, slots=2)
    other = with_nominations(base, snapshot, noms.others("q"), types, now_s=1010.0)
    h = other.handles["head"]
    on = [[x for x in row if x >= 0] for row in other.slots.tolist()]
    assert on[0] == [h] and on[1] == [base.handles["p1"], base.handles["p2"], h]  # a/1 is over its limit now
    assert other.gpu_mem_used_gib[:2].tolist() == [9.0, 17.0]
    assert other.job_work_left_s[h] == 300.0 and other.job_type[h] == types.resolve("ResNet-50", 128)
    assert with_nominations(base, snapshot, noms.others("head"), types, now_s=1010.0) is base
    assert noms.get("head").waiting(snapshot)  # p2 is still on a/1
    gone = snapshot.with_changes(gpu_states={("a", 1): GpuState("a", 1, 4.0, ("p1",))})
    assert not noms.get("head").waiting(gone)
    clock[0] = 30.0  # expired: nobody is held back any more
    assert noms.others("q") == [] and noms.get("head") is None
