"""The key-value backend protocol itself, against both backends (``MemoryBackend`` and a real
etcd through ``EtcdBackend``): revisions as etcd counts them, compares that pick the branch, the
operation limit, leases whose keys go when they end, watches from a past revision, and a
compacted history that a strict watch refuses."""

from __future__ import annotations

import time

import pytest
from state_support import etcd_settings

from iadeep.state import HistoryCompacted, TransactionTooLarge
from iadeep.state._etcdwire import EtcdBackend
from iadeep.state._kv import Compare, Delete, Put, Range, first, holds, unchanged
from iadeep.state._kvmemory import MemoryBackend


@pytest.fixture(params=["memory", "etcd"])
def kv(request, prefix):
    """``(backend, prefix, sleep)``: ``sleep`` steps a virtual clock (memory) or waits (etcd)."""
    if request.param == "memory":
        now = [0.0]
        backend = MemoryBackend(clock=lambda: now[0], history=8)

        def step(seconds: float) -> None:
            now[0] += seconds

        yield backend, prefix, step
        return
    backend = EtcdBackend(etcd_settings(request.getfixturevalue("etcd_server").endpoint, prefix))
    yield backend, prefix, time.sleep
    backend.close()


def _get(backend, key):
    return first(backend.range(key)[0])


def test_one_revision_per_transaction_and_create_revision_kept(kv):
    backend, p, _ = kv
    r0 = backend.revision()
    result = backend.txn([], [Put(f"{p}/a", "1"), Put(f"{p}/b", "2")])
    assert result.succeeded and result.revision == r0 + 1 == backend.revision()
    a, b = _get(backend, f"{p}/a"), _get(backend, f"{p}/b")
    assert a.mod_revision == b.mod_revision == a.create_revision == r0 + 1 and a.value == b"1"
    backend.txn([], [Put(f"{p}/a", "3")])
    again = _get(backend, f"{p}/a")
    assert (again.create_revision, again.mod_revision, again.value) == (r0 + 1, r0 + 2, b"3")
    assert backend.txn([], [Delete(f"{p}/nothing")]).revision == r0 + 2  # nothing changed: no revision
    kvs, rev = backend.range(f"{p}/", prefix=True)
    assert [k.key for k in kvs] == [f"{p}/a", f"{p}/b"] and rev == r0 + 2
    assert backend.txn([], [Delete(f"{p}/", prefix=True)]).responses == [2]


def test_a_failed_compare_runs_the_failure_branch_and_writes_nothing(kv):
    backend, p, _ = kv
    backend.txn([], [Put(f"{p}/k", "old")])
    read = _get(backend, f"{p}/k")
    backend.txn([], [Put(f"{p}/k", "new")])  # someone else wins the race
    lost = backend.txn([unchanged(f"{p}/k", read)], [Put(f"{p}/k", "mine")], [Range(f"{p}/k")])
    assert not lost.succeeded and first(lost.responses[0]).value == b"new"
    assert _get(backend, f"{p}/k").value == b"new"
    now = first(lost.responses[0])
    assert backend.txn([unchanged(f"{p}/k", now)], [Put(f"{p}/k", "mine")]).succeeded
    assert not backend.txn([unchanged(f"{p}/absent", now)], [Put(f"{p}/x", "")]).succeeded  # absent != read
    assert backend.txn([unchanged(f"{p}/absent", None)], [Put(f"{p}/y", "")]).succeeded  # still absent
    assert backend.txn([holds(f"{p}/k", "mine")], [Delete(f"{p}/k")]).succeeded
    assert not backend.txn([holds(f"{p}/k", "mine")], [Put(f"{p}/k", "again")]).succeeded  # gone: no value
    assert not backend.txn([Compare(f"{p}/y", "create", 0)], [Put(f"{p}/z", "")]).succeeded
    assert _get(backend, f"{p}/z") is None and _get(backend, f"{p}/x") is None


def test_a_branch_over_the_operation_limit_is_refused(kv):
    backend, p, _ = kv
    ops = [Put(f"{p}/{i}", "") for i in range(backend.max_txn_ops + 1)]
    with pytest.raises(TransactionTooLarge):
        backend.txn([], ops)
    assert backend.range(f"{p}/", prefix=True)[0] == []
    assert backend.txn([], ops[:-1]).succeeded


def test_keys_on_a_lease_go_when_it_expires_or_is_revoked(kv):
    """etcd rounds a 1 s TTL up to its minimum (about 2 s): 3.5 s is past it."""
    backend, p, sleep = kv
    mortal, kept = backend.grant(1), backend.grant(1)
    backend.txn([], [Put(f"{p}/mortal", "m", mortal), Put(f"{p}/kept", "k", kept), Put(f"{p}/moved", "v", mortal)])
    assert _get(backend, f"{p}/mortal").lease == mortal
    backend.txn([], [Put(f"{p}/moved", "v")])  # a put without the lease takes the key off it
    start = backend.revision() + 1
    for _ in range(7):
        sleep(0.5)
        assert backend.keepalive(kept) is True
    deadline = time.monotonic() + 3.0
    while _get(backend, f"{p}/mortal") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _get(backend, f"{p}/mortal") is None and backend.keepalive(mortal) is False
    assert _get(backend, f"{p}/kept").value == b"k" and _get(backend, f"{p}/moved").value == b"v"
    events = [(e.type, e.kv.key) for b in backend.watch([f"{p}/"], start, idle_s=0.3) for e in b.events]
    assert events == [("delete", f"{p}/mortal")]
    backend.revoke(kept)
    assert _get(backend, f"{p}/kept") is None
    backend.revoke(kept)  # already gone: no error


def test_a_watch_from_a_past_revision_replays_then_follows(kv):
    backend, p, _ = kv
    backend.txn([], [Put(f"{p}/w/a", "1")])
    from_here = backend.revision() + 1
    backend.txn([], [Put(f"{p}/w/b", "2"), Put(f"{p}/other", "x")])
    backend.txn([], [Delete(f"{p}/w/a")])
    watch = backend.watch([f"{p}/w/"], from_here, idle_s=0.5)
    seen = [(e.kv.mod_revision, e.type, e.kv.key, e.kv.value) for e in next(watch).events]
    backend.txn([], [Put(f"{p}/w/c", "3")])
    batches = list(watch)  # how events are batched is the backend's (etcd: per watch response)
    assert all(b.revision == b.events[-1].kv.mod_revision for b in batches)
    seen += [(e.kv.mod_revision, e.type, e.kv.key, e.kv.value) for b in batches for e in b.events]
    assert seen == [(from_here, "put", f"{p}/w/b", b"2"), (from_here + 1, "delete", f"{p}/w/a", b""),
                    (from_here + 2, "put", f"{p}/w/c", b"3")]


def test_a_compacted_revision_raises_history_compacted(kv):
    backend, p, _ = kv
    old = backend.revision() + 1
    for i in range(10):  # past the memory backend's history of 8 events
        backend.txn([], [Put(f"{p}/c", str(i))])
    if isinstance(backend, EtcdBackend):
        backend._post("/kv/compaction", {"revision": backend.revision(), "physical": True})
    with pytest.raises(HistoryCompacted):
        list(backend.watch([f"{p}/"], old, idle_s=0.3))
    kept = [e.kv.value for b in backend.watch([f"{p}/"], old, idle_s=0.3, strict=False) for e in b.events]
    assert kept[-1:] in ([], [b"9"])  # not strict: goes on from what is kept
    assert [e.kv.value for b in backend.watch([f"{p}/"], backend.revision(), idle_s=0.3) for e in b.events] == [b"9"]
