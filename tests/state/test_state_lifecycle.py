"""Store limits, superseded reservations and the end of every record, against both stores (and
etcd's own accounting where it matters): etcd refuses transactions above ``--max-txn-ops``, a
pod is never blocked by its own earlier reservation, and nothing outlives the pods it describes."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import pytest
from state_support import etcd_settings, inventory, job, snapshot

from iadeep.state import (
    AllocationConflict,
    EtcdStateStore,
    GpuState,
    InterferenceSampleRecord,
    Measurement,
    MemoryStateStore,
    TransactionTooLarge,
    reservation_gpu_limit,
)


def _keys(store) -> list[str]:
    """Every key under the store's prefix (a raw range read of its backend)."""
    return [kv.key for kv in store.backend.range(store.keys.prefix + "/", prefix=True)[0]]


def test_limit_follows_the_operations_per_transaction() -> None:
    assert reservation_gpu_limit(128) == 41  # 3n+5 <= 128
    assert reservation_gpu_limit(1000) == 331
    assert MemoryStateStore(max_txn_ops=64).max_reservation_gpus == 19


def test_a_48_gpu_pod_is_refused_naming_the_limit_and_41_fit(store) -> None:
    """The field report: 48 free GPUs, and every bind failed with etcd's "too many operations"."""
    store.put_inventory(inventory("big", 48, 80.0))
    assert store.max_reservation_gpus == 41
    before = snapshot(store)
    with pytest.raises(AllocationConflict) as info:
        store.reserve(job("g48", 10.0, 48), "big", range(48), colocation_limit=2, now_s=1.0)
    assert not isinstance(info.value, TransactionTooLarge)  # decided before etcd is asked
    message = str(info.value)
    assert "48 GPUs" in message and "--max-txn-ops is 128" in message and "at most 41" in message
    assert "unavailable" not in message
    assert snapshot(store) == before
    # the largest pod the limit allows binds, and releases (3n+5 = 128 operations), in one go each
    got = store.reserve(job("g41", 10.0, 41), "big", range(41), colocation_limit=2, now_s=2.0)
    assert len(got) == 41 and len(store.assignments("big")) == 41
    assert len(store.release("g41", now_s=3.0)) == 41
    assert store.assignments() == [] and store.jobs() == {}


def test_etcd_below_the_configured_limit_is_not_reported_as_unavailable(etcd_server, prefix) -> None:
    # this store believes etcd takes 1,000 operations; the real server's --max-txn-ops is 128
    store = EtcdStateStore(etcd_settings(etcd_server.endpoint, prefix, max_txn_ops=1000))
    try:
        store.put_inventory(inventory("big", 48, 80.0))
        with pytest.raises(TransactionTooLarge) as info:
            store.reserve(job("g48", 10.0, 48), "big", range(48), colocation_limit=2, now_s=1.0)
        message = str(info.value)
        assert "146 operations" in message and "too many operations" in message
        assert "max_txn_ops=1000" in message and "IADEEP_ETCD_MAX_TXN_OPS" in message
        assert store.healthy() and store.jobs() == {}
    finally:
        store.close()


def test_sample_batches_larger_than_a_transaction_are_split(store) -> None:
    samples = [InterferenceSampleRecord("ResNet-50", 32, "VGG-16", 16, 0.5 + i / 1000, float(i)) for i in range(300)]
    store.add_samples(samples)
    assert store.samples() == samples


@pytest.fixture
def nodes(store):
    store.put_inventory(inventory("n1", 4, 32.0))
    store.put_inventory(inventory("n2", 4, 32.0))
    return store


def test_a_pod_holding_a_reservation_elsewhere_supersedes_it(nodes) -> None:
    """The field report: an interrupted bind left pod 'two' reserved on n1; the retry chose n2."""
    s = nodes
    s.reserve(job("two", 8.0, 2), "n1", [0, 1], colocation_limit=2, now_s=1.0)
    s.reserve(job("other", 8.0), "n1", [1], colocation_limit=2, now_s=1.5)
    with pytest.raises(AllocationConflict, match="already holds a reservation on n1") as info:
        s.reserve(job("two", 8.0, 2), "n2", [2, 3], colocation_limit=2, now_s=2.0)
    assert [a.node for a in info.value.held] == ["n1", "n1"]

    rev = s.revision()
    got = s.reserve(job("two", 8.0, 2), "n2", [2, 3], colocation_limit=2, now_s=3.0, supersede=True)
    if isinstance(s, EtcdStateStore):
        assert s.revision() == rev + 1  # released and reserved in one transaction
    assert [(a.node, a.gpu) for a in got] == [("n2", 2), ("n2", 3)]
    assert [(a.pod_uid, a.node, a.gpu) for a in s.assignments()] == [
        ("other", "n1", 1), ("two", "n2", 2), ("two", "n2", 3)]
    states = s.gpu_states()
    assert ("n1", 0) not in states and states[("n1", 1)] == GpuState("n1", 1, 8.0, ("other",))
    assert states[("n2", 2)].pods == ("two",)
    assert {(t.node, t.gpu) for t in s.tuning_requests()} == {("n1", 1), ("n2", 2), ("n2", 3)}
    assert set(s.jobs()) == {"two", "other"}  # the job record is the new placement's
    # the same node again: the pod's own reservation is reused as it is
    assert s.reserve(job("two", 8.0, 2), "n2", [0, 1], colocation_limit=2, now_s=4.0, supersede=True) == got


def test_supersede_too_large_for_one_transaction_releases_first(nodes) -> None:
    s = nodes
    s.put_inventory(inventory("w1", 30, 32.0))
    s.put_inventory(inventory("w2", 30, 32.0))
    s.reserve(job("wide", 4.0, 30), "w1", range(30), colocation_limit=2, now_s=1.0)  # 3x30+2 = 92 ops
    got = s.reserve(job("wide", 4.0, 30), "w2", range(30), colocation_limit=2, now_s=2.0, supersede=True)
    assert {a.node for a in got} == {"w2"} and {a.node for a in s.assignments()} == {"w2"}
    assert not [k for k in s.gpu_states() if k[0] == "w1"]


def test_release_ends_every_record_of_the_pod(nodes) -> None:
    s = nodes
    s.reserve(job("a", 8.0, 2), "n1", [0, 1], colocation_limit=2, now_s=1.0)
    s.reserve(job("b", 8.0), "n1", [1], colocation_limit=2, now_s=1.0)
    s.add_measurement(Measurement("a", 3.0, 32, 2.0))
    s.release("a", now_s=3.0)
    assert s.measurements("a") == [] and "a" not in s.jobs()
    left = [k.removeprefix(s.keys.prefix) for k in _keys(s)]
    assert sorted(left) == sorted(["/nodes/n1", "/nodes/n2", "/jobs/b", "/reservations/b", "/assignments/n1/1/b",
                                   "/gpus/n1/1", "/tuning/n1/1"])


@pytest.mark.slow
def test_a_thousand_pods_through_reserve_and_release_leave_only_live_records(nodes) -> None:
    """Nothing grows with the number of pods that ever ran: after 1,000 pods (each reserved,
    reporting a measurement, tuned on one GPU, released; the last 5 still running), the prefix
    holds the two inventories and the live pods' records only."""
    s = nodes

    def one(i: int) -> None:
        uid = f"p{i:04d}"
        for attempt in range(50):
            try:
                (a,) = s.reserve(job(uid, 4.0), f"n{1 + i % 2}", [i % 4], colocation_limit=8, now_s=float(i))
                break
            except AllocationConflict:
                if attempt == 49:
                    raise
        s.add_measurement(Measurement(uid, 2.0, 32, float(i)))
        if i % 3 == 0:
            for t in s.tuning_requests():
                if t.node == a.node and t.gpu == a.gpu:
                    s.complete_tuning(t)
        if i < 995:
            s.release(uid, now_s=float(i) + 0.5)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(1000)))
    live = [f"p{i:04d}" for i in range(995, 1000)]
    assert sorted(s.jobs()) == live
    keys = [k.removeprefix(s.keys.prefix + "/") for k in _keys(s)]
    per_pod = [k for k in keys if k.split("/")[0] in ("jobs", "reservations", "assignments", "measurements")]
    assert {k.split("/")[-1] if not k.startswith("measurements") else k.split("/")[1] for k in per_pod} == set(live)
    assert len(per_pod) == 4 * len(live)  # job, reservation, one assignment, one measurement each
    gpus = sorted(k for k in keys if k.startswith("gpus/"))
    assert gpus == sorted({f"gpus/{a.node}/{a.gpu}" for a in s.assignments()})  # only GPUs with live pods
    assert {k for k in keys if k.startswith("tuning/")} <= {f"tuning/{g.removeprefix('gpus/')}" for g in gpus}
    assert [k for k in keys if k.startswith("nodes/")] == ["nodes/n1", "nodes/n2"]
    assert len(keys) <= 2 + 4 * len(live) + 2 * len(gpus)
    assert not [k for k in keys if k.split("/")[0] in ("locks", "samples")]


def _raw_count(store: EtcdStateStore) -> int:
    result, _ = store.backend._post("/kv/range", {"key": base64.b64encode(store.keys.prefix.encode()).decode(),
                                          "range_end": base64.b64encode(store.keys.prefix.encode()[:-1] + bytes(
                                              [store.keys.prefix.encode()[-1] + 1])).decode(), "count_only": True})
    return int(result.get("count", 0))


def test_raw_key_count_matches_after_release(etcd_store) -> None:
    s = etcd_store
    s.put_inventory(inventory("n1", 2, 16.0))
    for i in range(20):
        s.reserve(job(f"q{i}", 1.0), "n1", [i % 2], colocation_limit=20, now_s=0.0)
        s.add_measurement(Measurement(f"q{i}", 1.0, 32, 0.0))
    for i in range(20):
        s.release(f"q{i}", now_s=1.0)
    assert _raw_count(s) == 1  # the inventory alone, counted by etcd itself


def test_the_bound_is_tight_against_a_real_etcd_limit(tmp_path, prefix) -> None:
    """etcd started with --max-txn-ops=32 and the store told so: 9 GPUs reserve (29 operations)
    and release (32), 10 are refused by the store naming the limit; told 35 instead, the store
    would reserve 10 (32 operations, accepted) and then fail to release them (35): the release
    is what bounds n, and etcd's refusal reads as too large, not as unavailable."""
    from iadeep.dev import LocalEtcd

    etcd = LocalEtcd(tmp_path / "etcd", extra_args=["--max-txn-ops=32"])
    etcd.start()
    try:
        store = EtcdStateStore(etcd_settings(etcd.endpoint, prefix, max_txn_ops=32))
        store.put_inventory(inventory("n", 12, 80.0))
        assert store.max_reservation_gpus == 9
        assert len(store.reserve(job("nine", 1.0, 9), "n", range(9), colocation_limit=2, now_s=1.0)) == 9
        assert len(store.release("nine", now_s=2.0)) == 9
        with pytest.raises(AllocationConflict, match="at most 9 GPUs per pod"):
            store.reserve(job("ten", 1.0, 10), "n", range(10), colocation_limit=2, now_s=3.0)
        store.close()
        wrong = EtcdStateStore(etcd_settings(etcd.endpoint, prefix, max_txn_ops=35))
        assert len(wrong.reserve(job("ten", 1.0, 10), "n", range(10), colocation_limit=2, now_s=4.0)) == 10
        with pytest.raises(TransactionTooLarge, match="35 operations"):
            wrong.release("ten", now_s=5.0)
        wrong.close()
    finally:
        etcd.stop()
