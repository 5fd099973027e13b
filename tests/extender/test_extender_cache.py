"""The extender's copy of the state (list once, then follow etcd's watch) against a real etcd:
whatever other writers and this process do, once it has caught up it equals a fresh listing."""

from __future__ import annotations

import random

import msgspec
import pytest
from extender_support import publish, view_meaning

from iadeep.extender import Snapshot, StateCache, TypeResolver, ViewBase
from iadeep.state import AllocationConflict, ChangeBatch, EtcdStateStore, JobRecord

MODELS = [("ResNet-18", 16), ("LM", 20), ("Transformer", 32), ("NoSuchModel", 8)]


def _assert_matches_store(cache: StateCache, store: EtcdStateStore, types: TypeResolver) -> None:
    assert cache.sync(timeout_s=10), "the copy did not catch up with the store"
    listing = store.list_state()
    snap, base = cache.current()
    assert dict(snap.inventories) == listing.inventories
    assert dict(snap.gpu_states) == listing.gpu_states
    assert dict(snap.jobs) == listing.jobs
    fresh = ViewBase.from_snapshot(Snapshot(listing.inventories, listing.gpu_states, listing.jobs), types, slots=2)
    assert view_meaning(base) == view_meaning(fresh)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_followed_copy_converges_with_other_writers(etcd_settings, store, model, seed):
    rng = random.Random(seed)
    types = TypeResolver(model, "ResNet-50", 64)
    publish(store, ["a", "b", "c"], gpus=2, gpu_mem_gib=16.0)
    mine = EtcdStateStore(etcd_settings)  # this process's writes, applied to the copy as bind does
    cache = StateCache(mine, types, slots=2, idle_s=0.3)
    cache.refresh()
    cache.start()
    held: dict[str, str] = {}  # pod -> who reserved it
    try:
        for step in range(120):
            op = rng.random()
            if op < 0.55:
                uid = f"p{seed}-{step}"
                model_, bs = rng.choice(MODELS)
                job = JobRecord(uid, "ns", uid, model_, bs, 1, rng.choice([2.0, 4.0, 8.0]), remaining_s=100.0 * step)
                node, gpu = rng.choice("abc"), rng.randrange(2)
                who = rng.choice(["mine", "other"])
                try:
                    got = (mine if who == "mine" else store).reserve(job, node, [gpu], colocation_limit=2, now_s=float(step))
                except AllocationConflict:
                    continue
                if who == "mine":
                    cache.apply(job, types.resolve_or_default(model_, bs), got)
                held[uid] = who
            elif op < 0.8 and held:
                uid = rng.choice(sorted(held))
                (mine if held.pop(uid) == "mine" else store).release(uid, now_s=float(step))
                if rng.random() < 0.5:
                    cache.forget(uid)  # as bind does after releasing its own failed reservation
            elif op < 0.9 and held:
                uid = rng.choice(sorted(held))
                rec = store.jobs().get(uid)
                if rec is not None:  # the coordinator refines the work left
                    store.put_job(msgspec.structs.replace(rec, remaining_s=rec.remaining_s / 2 + 1))
            elif op < 0.95:
                store.delete_job(rng.choice(sorted(held)) if held else "nobody")
            else:
                publish(store, [rng.choice(["a", "b", "c", "d"])], gpus=2, gpu_mem_gib=rng.choice([16.0, 24.0]))
            if step % 40 == 39:
                _assert_matches_store(cache, store, types)
        _assert_matches_store(cache, store, types)
        assert cache.listings == 1  # followed, never re-listed
    finally:
        cache.stop()
        mine.close()


def test_copy_recovers_after_compaction(etcd_settings, store, model):
    types = TypeResolver(model, "ResNet-50", 64)
    publish(store, ["a"], gpus=2)
    cache = StateCache(EtcdStateStore(etcd_settings), types, slots=2, idle_s=0.3)
    cache.refresh()
    revision = cache.revision
    store.reserve(JobRecord("x", "ns", "x", "LM", 20, 1, 4.0), "a", [0], colocation_limit=2, now_s=1.0)
    store.reserve(JobRecord("y", "ns", "y", "LM", 20, 1, 4.0), "a", [1], colocation_limit=2, now_s=1.0)
    store.backend._post("/kv/compaction", {"revision": store.revision(), "physical": True})
    cache.start()  # follows from a compacted revision: lists again
    try:
        _assert_matches_store(cache, store, types)
        assert cache.listings == 2 and cache.revision > revision
    finally:
        cache.stop()


def test_own_reservation_released_before_the_watch_delivers_it(etcd_settings, store, model):
    """A reservation and its release, both delivered in one batch after ``apply``: not resurrected."""
    types = TypeResolver(model, "ResNet-50", 64)
    publish(store, ["a"], gpus=1)
    cache = StateCache(store, types, slots=2)
    cache.refresh()
    job = JobRecord("r", "ns", "r", "LM", 20, 1, 4.0, remaining_s=5.0)
    start = cache.revision + 1
    got = store.reserve(job, "a", [0], colocation_limit=2, now_s=1.0)
    cache.apply(job, types.resolve("LM", 20), got)
    assert cache.current()[0].gpu_states[("a", 0)].pods == ("r",)
    store.release("r", now_s=2.0)
    end = store.revision()
    changes = []
    for batch in store.changes(start, idle_s=2.0):
        changes.extend(batch.changes)
        if batch.revision >= end:
            break
    cache.apply_batch(ChangeBatch(end, tuple(changes)))  # one batch holding both revisions
    assert ("a", 0) not in cache.current()[0].gpu_states  # released: the empty GPU's record is gone
    assert "r" not in cache.current()[0].jobs  # and so is the job record
    cache.apply_batch(ChangeBatch(end + 1, ()))
    assert cache.current()[1].gpu_mem_used_gib.tolist() == [0.0]


@pytest.mark.parametrize(("inventory", "ghost"), [
    (b'{"node":"b","gpus":[{"index":0,"mem_gib":"abc"}]}',  # mistyped
     b'{"pod_uid":"ghost","namespace":"n","name":"g","model":"LM","batch_size":"big","num_gpus":1,"mem_gib":1}'),
    (b'{"node":"b","gpus":[{"index":100000000000000000000,"mem_gib":16}]}',  # past the view's int64
     b'{"pod_uid":"ghost","namespace":"n","name":"g","model":"LM","batch_size":64,"num_gpus":100000000000000000000,'
     b'"mem_gib":1}'),
])
def test_malformed_records_do_not_stop_the_copy(etcd_settings, store, model, inventory, ghost):
    """A record that parses as JSON but has a mistyped or out-of-range field reads as absent: the
    view is built without it, in the follower and at start, and the other nodes stay in it."""
    import base64

    types = TypeResolver(model, "ResNet-50", 64)
    publish(store, ["a", "b"], gpus=1)

    def put_raw(key: str, value: bytes) -> None:
        store.backend._post("/kv/put", {"key": base64.b64encode(f"{store.keys.prefix}/{key}".encode()).decode(),
                                "value": base64.b64encode(value).decode()})

    cache = StateCache(EtcdStateStore(etcd_settings), types, slots=2, idle_s=0.3)
    cache.refresh()
    cache.start()
    try:
        put_raw("nodes/b", inventory)
        put_raw("jobs/ghost", ghost)
        put_raw("gpus/a/0", b'{"node":"a","gpu":0,"mem_used_gib":1.0,"pods":["ghost"]}')
        assert cache.sync(timeout_s=10)
        snap, base = cache.current()
        assert set(snap.inventories) == {"a"} and "ghost" not in snap.jobs
        assert base.node_names == ("a",) and snap.gpu_states[("a", 0)].pods == ("ghost",)
        fresh = StateCache(EtcdStateStore(etcd_settings), types, slots=2)
        fresh.refresh()  # a new extender starts on the same records
        assert view_meaning(fresh.current()[1]) == view_meaning(base)
    finally:
        cache.stop()
