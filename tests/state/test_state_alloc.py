"""reserve/release semantics, the same for both stores: limits, conflicts, nothing written on
failure, tuning requests, and small races (the 1,000-bind race is in test_state_concurrency)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from state_support import inventory, job, snapshot

from iadeep.state import AllocationConflict, Assignment, GpuState, RecordError, TuningRequest


@pytest.fixture
def two_nodes(store):
    store.put_inventory(inventory("n1", 4, 32.0))
    store.put_inventory(inventory("n2", 2, 16.0))
    return store


def test_colocated_pods_share_memory_up_to_capacity(two_nodes):
    s = two_nodes
    s.reserve(job("a", 12.0), "n1", [0], colocation_limit=3, now_s=1.0)
    s.reserve(job("b", 12.0), "n1", [0], colocation_limit=3, now_s=2.0)
    s.reserve(job("c", 8.0), "n1", [0], colocation_limit=3, now_s=3.0)  # exactly full: 32 GiB
    assert s.gpu_states()[("n1", 0)] == GpuState("n1", 0, 32.0, ("a", "b", "c"))
    assert s.tuning_requests() == [TuningRequest("n1", 0, ("a", "b", "c"), 3.0)]


def test_exact_fit_with_float_sizes(two_nodes):
    for i in range(10):
        two_nodes.reserve(job(f"p{i}", 1.6), "n2", [1], colocation_limit=10, now_s=0.0)  # 10 x 1.6 = 16
    assert two_nodes.gpu_states()[("n2", 1)].mem_used_gib == pytest.approx(16.0)


def test_memory_limit(two_nodes):
    s = two_nodes
    s.reserve(job("a", 20.0), "n1", [1], colocation_limit=4, now_s=1.0)
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match=r"n1/gpu1: not enough memory: 16 GiB asked, 12 of 32 GiB free"):
        s.reserve(job("b", 16.0), "n1", [1], colocation_limit=4, now_s=2.0)
    assert snapshot(s) == before


def test_colocation_limit(two_nodes):
    s = two_nodes
    s.reserve(job("a", 1.0), "n1", [2], colocation_limit=2, now_s=1.0)
    s.reserve(job("b", 1.0), "n1", [2], colocation_limit=2, now_s=1.0)
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match="co-location limit 2"):
        s.reserve(job("c", 1.0), "n1", [2], colocation_limit=2, now_s=1.0)
    assert snapshot(s) == before


def test_unknown_node_and_gpu(two_nodes):
    s = two_nodes
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match="node 'ghost' has no published GPU inventory"):
        s.reserve(job("a"), "ghost", [0], colocation_limit=2, now_s=1.0)
    with pytest.raises(AllocationConflict, match=r"n2/gpu5: no such GPU"):
        s.reserve(job("a"), "n2", [5], colocation_limit=2, now_s=1.0)
    assert snapshot(s) == before


def test_double_reservation_is_a_conflict(two_nodes):
    s = two_nodes
    first = s.reserve(job("a"), "n1", [0], colocation_limit=2, now_s=1.0)
    before = snapshot(s)
    for node, gpus in (("n1", [0]), ("n1", [1]), ("n2", [0])):
        with pytest.raises(AllocationConflict, match="already holds a reservation on n1/"):
            s.reserve(job("a"), node, gpus, colocation_limit=2, now_s=2.0)
    assert snapshot(s) == before
    assert s.assignments() == first


def test_gang_is_all_or_nothing(two_nodes):
    s = two_nodes
    s.reserve(job("big", 30.0), "n1", [3], colocation_limit=2, now_s=1.0)
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match="n1/gpu3"):
        s.reserve(job("gang", 8.0, 4), "n1", [0, 1, 2, 3], colocation_limit=2, now_s=2.0)
    assert snapshot(s) == before
    got = s.reserve(job("gang", 2.0, 4), "n1", [0, 1, 2, 3], colocation_limit=2, now_s=2.0)
    assert [a.gpu for a in got] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "gpus, num_gpus, match",
    [([0, 0], 2, "distinct"), ([], 1, "distinct"), ([0, 1], 1, "needs 1 GPU"), ([0], 2, "needs 2 GPU")],
)
def test_gpu_list_must_match_the_job(two_nodes, gpus, num_gpus, match):
    before = snapshot(two_nodes)
    with pytest.raises(AllocationConflict, match=match):
        two_nodes.reserve(job("a", 1.0, num_gpus), "n1", gpus, colocation_limit=2, now_s=1.0)
    assert snapshot(two_nodes) == before


def test_bad_inputs(two_nodes):
    with pytest.raises(RecordError, match="mem_gib"):
        two_nodes.reserve(job("a", 0.0), "n1", [0], colocation_limit=2, now_s=1.0)
    with pytest.raises(ValueError, match="colocation_limit"):
        two_nodes.reserve(job("a"), "n1", [0], colocation_limit=0, now_s=1.0)
    assert two_nodes.jobs() == {}


def test_release(two_nodes):
    s = two_nodes
    s.reserve(job("a", 10.0, 2), "n1", [0, 1], colocation_limit=2, now_s=1.0)
    s.reserve(job("b", 5.0), "n1", [1], colocation_limit=2, now_s=2.0)
    released = s.release("a", now_s=3.0)
    assert released == [Assignment("a", "n1", 0, 10.0, 1.0), Assignment("a", "n1", 1, 10.0, 1.0)]
    assert s.assignments() == [Assignment("b", "n1", 1, 5.0, 2.0)]
    states = s.gpu_states()
    assert states[("n1", 1)] == GpuState("n1", 1, 5.0, ("b",))
    assert ("n1", 0) not in states  # an empty GPU's record is deleted (absent = unused)
    # GPU 1's co-location set changed: re-tune b alone; GPU 0 is empty: nothing to tune
    assert s.tuning_requests() == [TuningRequest("n1", 1, ("b",), 3.0)]
    assert "a" not in s.jobs() and "b" in s.jobs()  # the pod's records end with its reservation
    assert s.release("a", now_s=4.0) == []  # no-op
    assert s.release("never", now_s=4.0) == []
    s.reserve(job("a", 32.0), "n1", [0], colocation_limit=2, now_s=5.0)  # memory is free again


def test_complete_tuning(two_nodes):
    s = two_nodes
    s.reserve(job("a"), "n1", [0], colocation_limit=2, now_s=1.0)
    (req,) = s.tuning_requests()
    s.reserve(job("b"), "n1", [0], colocation_limit=2, now_s=2.0)
    assert s.complete_tuning(req) is False  # superseded: the set is now (a, b)
    (req2,) = s.tuning_requests()
    assert req2.pods == ("a", "b")
    assert s.complete_tuning(req2) is True
    assert s.tuning_requests() == []
    assert s.complete_tuning(req2) is False


def test_racing_for_the_last_slot(two_nodes):
    """16 threads race for one GPU that takes 3 pods: exactly 3 win, the rest get AllocationConflict."""
    s = two_nodes
    barrier = threading.Barrier(16)

    def one(i: int) -> bool:
        barrier.wait()
        try:
            s.reserve(job(f"r{i}", 4.0), "n2", [0], colocation_limit=3, now_s=float(i))
            return True
        except AllocationConflict:
            return False

    with ThreadPoolExecutor(16) as pool:
        wins = sum(pool.map(one, range(16)))
    assert wins == 3
    st = s.gpu_states()[("n2", 0)]
    assert len(st.pods) == 3 and st.mem_used_gib == pytest.approx(12.0)
    assert sorted(a.pod_uid for a in s.assignments("n2")) == sorted(st.pods)


def test_same_pod_raced_onto_two_nodes(two_nodes):
    """The same pod bound concurrently to different nodes: one reservation, never two."""
    s = two_nodes
    for _round in range(5):
        barrier = threading.Barrier(8)

        def one(i: int, uid: str = f"dup{_round}") -> bool:
            barrier.wait()
            try:
                s.reserve(job(uid, 1.0), ("n1", "n2")[i % 2], [i % 2], colocation_limit=8, now_s=0.0)
                return True
            except AllocationConflict:
                return False

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(one, range(8))) == 1
        held = [a for a in s.assignments() if a.pod_uid == f"dup{_round}"]
        assert len(held) == 1


def test_assignments_by_node_do_not_leak_across_prefixes(store):
    store.put_inventory(inventory("n1", 1))
    store.put_inventory(inventory("n10", 1))
    store.reserve(job("a"), "n1", [0], colocation_limit=2, now_s=0.0)
    store.reserve(job("b"), "n10", [0], colocation_limit=2, now_s=0.0)
    assert [a.pod_uid for a in store.assignments("n1")] == ["a"]
    assert [a.pod_uid for a in store.assignments("n10")] == ["b"]


def test_resize_follows_a_tuned_batch_size_within_the_gpu(two_nodes):
    """A tuning session grows one job into memory nobody reserved and shrinks it back: the GPU's
    state, the pod's assignment and its reservation follow, and the release frees what it holds
    then; no tuning request is written (the co-location set did not change)."""
    s = two_nodes
    s.reserve(job("a", 10.0, 2), "n1", [0, 1], colocation_limit=2, now_s=1.0)
    s.reserve(job("b", 8.0), "n1", [1], colocation_limit=2, now_s=2.0)
    tuning = s.tuning_requests()
    st = s.resize("n1", 1, {"b": 20.0})
    assert st == GpuState("n1", 1, 30.0, ("a", "b")) == s.gpu_states()[("n1", 1)]
    assert Assignment("b", "n1", 1, 20.0, 2.0) in s.assignments()
    assert Assignment("a", "n1", 0, 10.0, 1.0) in s.assignments()  # the gang's GPUs are untouched
    assert s.tuning_requests() == tuning
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match=r"n1/gpu1: not enough memory for b 23 GiB: 33 of 32 GiB"):
        s.resize("n1", 1, {"b": 23.0})
    with pytest.raises(AllocationConflict, match=r"pod b: 6 GiB is below its request of 8 GiB"):
        s.resize("n1", 1, {"b": 6.0})  # never below what the kubelet counted for the pod
    with pytest.raises(AllocationConflict, match="pod b holds no reservation there"):
        s.resize("n1", 0, {"b": 9.0})
    with pytest.raises(AllocationConflict, match="n2/gpu0: no such GPU in use"):
        s.resize("n2", 0, {"b": 9.0})
    with pytest.raises(RecordError, match=r"sizes\['b'\]"):
        s.resize("n1", 1, {"b": float("nan")})
    with pytest.raises(RecordError, match=r"sizes\['b'\]"):
        s.resize("n1", 1, {"b": True})  # not a number of GiB
    with pytest.raises(RecordError, match="sizes: expected at least one pod"):
        s.resize("n1", 1, {})
    with pytest.raises(RecordError, match="gpu: expected an integer"):
        s.resize("n1", "1", {"b": 9.0})  # both stores refuse it alike
    assert snapshot(s) == before  # a refused resize writes nothing
    # both at once: a shrinks nothing below its request, b returns to its own
    s.resize("n1", 1, {"a": 12.0, "b": 8.0})
    assert s.gpu_states()[("n1", 1)].mem_used_gib == pytest.approx(20.0)
    s.release("b", now_s=3.0)
    assert s.gpu_states()[("n1", 1)] == GpuState("n1", 1, 12.0, ("a",))
    s.release("a", now_s=4.0)
    assert s.gpu_states() == {}
    s.reserve(job("c", 32.0), "n1", [1], colocation_limit=2, now_s=5.0)  # all of it is free again


def test_a_resize_and_a_reservation_racing_for_the_same_memory_never_overcommit(two_nodes):
    """The coordinator grows b while the extender places c on the same GPU: one of them loses,
    and the GPU never holds more than its memory."""
    s = two_nodes
    s.reserve(job("b", 8.0), "n1", [2], colocation_limit=3, now_s=1.0)
    outcomes = []

    def grow() -> None:
        try:
            s.resize("n1", 2, {"b": 20.0})
            outcomes.append("resized")
        except AllocationConflict:
            outcomes.append("resize refused")

    def place() -> None:
        try:
            s.reserve(job("c", 16.0), "n1", [2], colocation_limit=3, now_s=2.0)
            outcomes.append("reserved")
        except AllocationConflict:
            outcomes.append("reserve refused")

    threads = [threading.Thread(target=grow), threading.Thread(target=place)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = s.gpu_states()[("n1", 2)]
    assert st.mem_used_gib <= 32.0 + 1e-9
    assert sorted(outcomes) in (["reserve refused", "resized"], ["reserved", "resize refused"])
    assert st.mem_used_gib == pytest.approx(sum(a.mem_gib for a in s.assignments() if (a.node, a.gpu) == ("n1", 2)))
