"""1,000 concurrent reservations across 100 nodes x 8 GPUs, more demand than capacity: afterwards
the stored state has no double allocation (checked from a fresh read of the store)."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from state_support import etcd_settings, inventory, job

from iadeep.state import AllocationConflict, Assignment, EtcdStateStore, JobRecord, MemoryStateStore

NODES, GPUS, GPU_MEM_GIB, LIMIT = 100, 8, 16.0, 3


@dataclass(frozen=True)
class Request:
    job: JobRecord
    node: str
    gpus: tuple[int, ...]


def workload(n: int = 1000, seed: int = 7) -> list[Request]:
    """Random binds; 30 % aim at 5 hot nodes (contention on the same GPU records); every 20th
    reuses the previous pod's UID on another GPU (the same pod bound twice at once)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        num = rng.choice([1, 1, 2, 2, 4])
        mem = rng.choice([4.0, 6.0, 8.0, 12.0, 16.0])
        hot = rng.random() < 0.3
        node = f"node-{rng.randrange(5) if hot else rng.randrange(NODES):03d}"
        uid = f"pod-{i - 1:04d}" if i % 20 == 19 else f"pod-{i:04d}"
        out.append(Request(job(uid, mem, num), node, tuple(sorted(rng.sample(range(GPUS), num)))))
    return out


def _key(a: Assignment) -> tuple:
    return (a.node, a.gpu, a.pod_uid, a.mem_gib)


def check_no_double_allocation(store, won: dict[str, list[Assignment]]) -> None:
    """Every invariant of the shared state, read back from the store."""
    capacity = {(n, g.index): g.mem_gib for n, inv in store.inventories().items() for g in inv.gpus}
    assignments, states, jobs = store.assignments(), store.gpu_states(), store.jobs()
    tuning = {(t.node, t.gpu): t.pods for t in store.tuning_requests()}
    per_gpu: dict[tuple[str, int], list[Assignment]] = defaultdict(list)
    per_pod: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        per_gpu[(a.node, a.gpu)].append(a)
        per_pod[a.pod_uid].append(a)
    for gpu, held in per_gpu.items():
        used = sum(a.mem_gib for a in held)
        assert used <= capacity[gpu] + 1e-9, f"{gpu}: {used} GiB > {capacity[gpu]}"
        assert len(held) <= LIMIT, gpu
        assert len({a.pod_uid for a in held}) == len(held), f"{gpu}: a pod twice"
        st = states[gpu]
        assert sorted(st.pods) == sorted(a.pod_uid for a in held), gpu
        assert st.mem_used_gib == pytest.approx(used), gpu
        assert tuning[gpu] == st.pods, gpu
    for gpu, st in states.items():
        if gpu not in per_gpu:
            assert st.pods == () and st.mem_used_gib == 0.0, gpu
    assert set(tuning) == set(per_gpu)
    assert set(per_pod) == set(won), "stored reservations differ from the calls that succeeded"
    for uid, held in per_pod.items():
        assert sorted(map(_key, held)) == sorted(map(_key, won[uid])), uid
        assert len({a.node for a in held}) == 1, uid
        assert len(held) == jobs[uid].num_gpus and all(a.mem_gib == jobs[uid].mem_gib for a in held), uid


def _run(store, requests: list[Request], threads: int) -> tuple[dict[str, list[Assignment]], int, float]:
    def one(r: Request):
        try:
            return r, store.reserve(r.job, r.node, list(r.gpus), colocation_limit=LIMIT, now_s=1.0)
        except AllocationConflict as exc:
            return r, exc

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, requests))
    wall = time.perf_counter() - t0
    won: dict[str, list[Assignment]] = {}
    conflicts = 0
    for r, outcome in results:
        if isinstance(outcome, AllocationConflict):
            conflicts += 1
            continue
        assert r.job.pod_uid not in won, f"{r.job.pod_uid} reserved twice"
        won[r.job.pod_uid] = outcome
    return won, conflicts, wall


@pytest.mark.parametrize("kind", ["memory", pytest.param("etcd", marks=pytest.mark.slow)])
def test_1000_concurrent_reservations_never_double_allocate(kind, request, prefix, record_property):
    if kind == "memory":
        store = MemoryStateStore(prefix=prefix)
    else:
        store = EtcdStateStore(etcd_settings(request.getfixturevalue("etcd_server").endpoint, prefix))
    requests = workload()
    demand = sum(r.job.mem_gib * r.job.num_gpus for r in requests)
    assert demand > 1.3 * NODES * GPUS * GPU_MEM_GIB  # more than fits
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: store.put_inventory(inventory(f"node-{i:03d}", GPUS, GPU_MEM_GIB)), range(NODES)))

    won, conflicts, wall = _run(store, requests, threads=32)

    assert len(won) + conflicts == len(requests)
    assert 300 < len(won) < len(requests)  # plenty of both outcomes
    fresh = store if kind == "memory" else EtcdStateStore(store.settings)
    check_no_double_allocation(fresh, won)
    stats = store.stats()
    summary = f"{kind}: {len(requests)} reservations, 32 threads: {wall:.2f} s wall, {len(won)} placed, {conflicts} refused, {stats}"
    print(summary)
    record_property("summary", summary)
    # and all of it can be released concurrently, leaving nothing behind
    with ThreadPoolExecutor(32) as pool:
        released = list(pool.map(lambda uid: store.release(uid, now_s=2.0), list(won)))
    assert sum(len(r) for r in released) == sum(len(v) for v in won.values())
    assert fresh.assignments() == [] and fresh.tuning_requests() == []
    assert all(st.pods == () for st in fresh.gpu_states().values())
    store.close()
    fresh.close()
