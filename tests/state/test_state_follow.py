"""Following the state (list once, then changes) and reservations decided from a caller's copy,
against both stores (real etcd for the etcd one)."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from state_support import etcd_settings, inventory, job

from iadeep.state import (
    AllocationConflict,
    GpuState,
    HistoryCompacted,
    InterferenceSampleRecord,
    Measurement,
    MemoryStateStore,
    NodeRecords,
)


def _collect(store, start: int, until: int, idle_s: float = 3.0) -> list:
    """Every change from ``start`` until a batch reaches revision ``until``."""
    out = []
    for batch in store.changes(start, idle_s=idle_s):
        out.extend(batch.changes)
        if batch.revision >= until:
            break
    return out


def test_listing_then_changes_rebuild_the_state(store):
    store.put_inventory(inventory("a", gpus=2))
    store.reserve(job("p1", mem_gib=4.0), "a", [0], colocation_limit=2, now_s=1.0)
    listing = store.list_state()
    assert set(listing.inventories) == {"a"}
    assert listing.gpu_states[("a", 0)].pods == ("p1",)
    assert set(listing.jobs) == {"p1"}

    store.reserve(job("p2", mem_gib=6.0), "a", [0], colocation_limit=2, now_s=2.0)
    store.add_measurement(Measurement("p2", 1.5, 32, 2.0))  # measurements are not followed
    store.add_samples([InterferenceSampleRecord("ResNet-50", 32, "ResNet-18", 64, 0.7, 2.0)])
    store.release("p1", now_s=3.0)
    store.put_inventory(inventory("b", gpus=1))
    changes = _collect(store, listing.revision + 1, store.revision())

    kinds = [c.kind for c in changes]
    assert set(kinds) == {"job", "gpu", "sample", "inventory"}  # no assignments, tuning, reservations
    revisions = [c.revision for c in changes]
    assert revisions == sorted(revisions) and revisions[0] > listing.revision
    # replaying the changes over the listing gives what the store holds now
    gpus = dict(listing.gpu_states)
    invs = dict(listing.inventories)
    for c in changes:
        if c.kind == "gpu":
            gpus[c.name] = c.record
        elif c.kind == "inventory":
            invs[c.name] = c.record
    assert gpus == store.gpu_states()
    assert invs == store.inventories()
    assert gpus[("a", 0)] == GpuState("a", 0, 6.0, ("p2",))
    assert [c.record.job_model for c in changes if c.kind == "sample"] == ["ResNet-50"]


def test_changes_end_after_idle_and_see_deletes(store):
    store.put_inventory(inventory("a", gpus=1))
    start = store.revision() + 1
    got: list = []

    def follow() -> None:
        for batch in store.changes(start, idle_s=1.0):
            got.extend(batch.changes)

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.2)
    store.reserve(job("p1"), "a", [0], colocation_limit=1, now_s=1.0)
    store.delete_job("p1")
    t.join(timeout=30)
    assert not t.is_alive()  # the follow ended after idle_s without changes
    assert [(c.kind, c.record is None) for c in got if c.kind == "job"] == [("job", False), ("job", True)]


def test_compacted_history_is_reported():
    store = MemoryStateStore(history=3)
    for n in range(5):
        store.put_inventory(inventory(f"n{n}", gpus=1))
    with pytest.raises(HistoryCompacted):
        store.changes(1, idle_s=0.1)
    assert len(_collect(store, 4, 5, idle_s=0.1)) == 2


def test_etcd_compacted_history_is_reported(etcd_store):
    etcd_store.put_inventory(inventory("a", gpus=1))
    old = etcd_store.revision()
    etcd_store.put_inventory(inventory("b", gpus=1))
    etcd_store.backend._post("/kv/compaction", {"revision": etcd_store.revision(), "physical": True})
    with pytest.raises(HistoryCompacted):
        list(etcd_store.changes(old, idle_s=0.5))


@pytest.mark.parametrize("folder, value", [
    ("gpus/a/0", b"{not json"),
    ("gpus/a/0", b'{"node":"a","gpu":0,"mem_used_gib":"lots","pods":[]}'),  # mistyped
    ("gpus/a/0", b'{"node":"a","gpu":0,"mem_used_gib":1e400,"pods":[]}'),  # not finite
    ("gpus/a/0", b'{"node":"a","gpu":0,"mem_used_gib":1.0,"pods":"abc"}'),  # a string is no list
    ("gpus/a/0", b'{"node":"b","gpu":0,"mem_used_gib":1.0,"pods":[]}'),  # another node's record
    ("nodes/a", b'{"node":"a","gpus":[{"index":0,"mem_gib":"abc"}]}'),
    ("nodes/a", b'{"node":"a","gpus":[{"index":0,"mem_gib":8},{"index":0,"mem_gib":8}]}'),  # index twice
    ("jobs/j", b'{"pod_uid":"j","namespace":"n","name":"j","model":"m","batch_size":"big","num_gpus":1,"mem_gib":1}'),
    # beyond JSON's exact integers: read, they would overflow the extender's int64 view
    ("nodes/a", b'{"node":"a","gpus":[{"index":100000000000000000000,"mem_gib":8}]}'),
    ("jobs/j", b'{"pod_uid":"j","namespace":"n","name":"j","model":"m","batch_size":1,"num_gpus":100000000000000000000,'
               b'"mem_gib":1}'),
])
def test_etcd_malformed_record_reads_as_absent(etcd_store, caplog, folder, value):
    """The watch reports a malformed record as deleted, the listing leaves it out: they agree."""
    etcd_store.put_inventory(inventory("a", gpus=1))
    etcd_store.reserve(job("j"), "a", [0], colocation_limit=2, now_s=1.0)
    start = etcd_store.revision() + 1
    key = f"{etcd_store.keys.prefix}/{folder}"
    etcd_store.backend._post("/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                 "value": base64.b64encode(value).decode()})
    etcd_store.put_inventory(inventory("b", gpus=1))
    changes = _collect(etcd_store, start, etcd_store.revision())
    assert [(c.name, c.record is None) for c in changes][0][1] is True
    assert changes[-1].name == "b" and changes[-1].record is not None
    assert "malformed" in caplog.text and key in caplog.text
    listing = etcd_store.list_state()
    gone = changes[0].name
    assert gone not in {**listing.inventories, **listing.gpu_states, **listing.jobs}


# -- reservations from the caller's copy ------------------------------------------------------

def _known(store, node: str) -> NodeRecords:
    inv = store.inventories()[node]
    states = store.gpu_states()
    return NodeRecords(inv, {g.index: states.get((node, g.index)) for g in inv.gpus})


def test_right_hint_reserves_in_one_round_trip(etcd_store):
    etcd_store.put_inventory(inventory("a", gpus=2, mem_gib=16.0))
    etcd_store.reserve(job("p0", mem_gib=4.0), "a", [0], colocation_limit=2, now_s=1.0)
    known = _known(etcd_store, "a")
    before = etcd_store.stats()["requests"]
    got = etcd_store.reserve(job("p1", mem_gib=8.0), "a", [0], colocation_limit=2, now_s=2.0, known=known)
    assert etcd_store.stats()["requests"] - before == 1
    assert [(a.node, a.gpu, a.mem_gib) for a in got] == [("a", 0, 8.0)]
    assert etcd_store.gpu_states()[("a", 0)] == GpuState("a", 0, 12.0, ("p0", "p1"))


def test_stale_hint_never_overcommits(store):
    store.put_inventory(inventory("a", gpus=1, mem_gib=16.0))
    stale = _known(store, "a")  # says the GPU is empty
    store.reserve(job("other", mem_gib=10.0), "a", [0], colocation_limit=2, now_s=1.0)
    with pytest.raises(AllocationConflict, match="not enough memory"):
        store.reserve(job("p1", mem_gib=8.0), "a", [0], colocation_limit=2, now_s=2.0, known=stale)
    got = store.reserve(job("p2", mem_gib=6.0), "a", [0], colocation_limit=2, now_s=3.0, known=stale)
    assert got[0].mem_gib == 6.0
    assert store.gpu_states()[("a", 0)] == GpuState("a", 0, 16.0, ("other", "p2"))


def test_pessimistic_or_wrong_hints_fall_back_to_the_real_records(store):
    store.put_inventory(inventory("a", gpus=2, mem_gib=16.0))
    full = NodeRecords(inventory("a", gpus=2, mem_gib=16.0), {0: GpuState("a", 0, 16.0, ("x",))})
    got = store.reserve(job("p1", mem_gib=8.0), "a", [0], colocation_limit=2, now_s=1.0, known=full)
    assert got[0].gpu == 0  # the hint said full; the store's record says empty
    bigger = NodeRecords(inventory("a", gpus=2, mem_gib=80.0), {})  # wrong capacity, GPU 1 "absent"
    with pytest.raises(AllocationConflict, match="not enough memory"):
        store.reserve(job("p2", mem_gib=40.0), "a", [1], colocation_limit=2, now_s=2.0, known=bigger)
    no_node = NodeRecords(None, {})
    got = store.reserve(job("p3", mem_gib=4.0), "a", [1], colocation_limit=2, now_s=3.0, known=no_node)
    assert got[0].gpu == 1
    assert store.gpu_states()[("a", 1)].pods == ("p3",)


def test_hinted_reservations_race_without_double_allocation(etcd_store):
    """32 threads reserve 6 GiB each on one 16 GiB GPU, all from the same (empty) hint: two fit."""
    etcd_store.put_inventory(inventory("a", gpus=1, mem_gib=16.0))
    hint = _known(etcd_store, "a")
    won, lost = [], []

    def go(i: int) -> None:
        try:
            etcd_store.reserve(job(f"p{i}", mem_gib=6.0), "a", [0], colocation_limit=8, now_s=1.0, known=hint)
            won.append(i)
        except AllocationConflict:
            lost.append(i)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = etcd_store.gpu_states()[("a", 0)]
    assert len(won) == 2 and len(lost) == 30
    assert st.mem_used_gib == 12.0 and sorted(st.pods) == sorted(f"p{i}" for i in won)
    assert len(etcd_store.assignments()) == 2


def test_following_a_future_revision_means_the_store_was_replaced(etcd_store):
    """etcd would wait silently for a revision it has not reached: a replaced or restored store."""
    etcd_store.put_inventory(inventory("a", gpus=1))
    with pytest.raises(HistoryCompacted, match="replaced or restored"):
        next(iter(etcd_store.changes(etcd_store.revision() + 1000, idle_s=2.0)))


def test_etcd_replaced_on_the_same_port_is_noticed(tmp_path):
    """The helper-found case: etcd restarted with an empty data dir on the same port within the
    retry window; the follower must not wait for its old revision."""
    from iadeep.testing import free_port
    from iadeep.dev import LocalEtcd
    from iadeep.state import EtcdStateStore

    port, peer = free_port(), free_port()
    first = LocalEtcd(tmp_path / "one", client_port=port, peer_port=peer).start()
    store = EtcdStateStore(etcd_settings(first.endpoint, "/r"))
    try:
        for i in range(20):
            store.put_inventory(inventory(f"n{i}", gpus=1))
        start = store.revision() + 1
        first.stop()
        second = LocalEtcd(tmp_path / "two", client_port=port, peer_port=peer).start()
        try:
            with pytest.raises(HistoryCompacted, match="replaced or restored"):
                for _ in store.changes(start, idle_s=3.0):
                    pass
        finally:
            second.stop()
    finally:
        store.close()
        first.stop()
