"""Leases (node-agent liveness) and watches, for both stores."""

from __future__ import annotations

import json
import threading
import time

import pytest
from state_support import inventory

from iadeep.state import EtcdStateStore, MemoryStateStore


def _wait_until(cond, timeout_s: float, step_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return cond()


@pytest.fixture
def leased(request, store):
    """The store and a ``sleep(seconds)``: real for etcd, a virtual clock's step for memory."""
    if isinstance(store, MemoryStateStore):
        now = [0.0]
        store.backend.clock = lambda: now[0]

        def sleep(seconds: float) -> None:
            now[0] += seconds

        return store, sleep
    return store, time.sleep


def test_leases_expire_unless_kept_alive(leased):
    """One agent stops (its node disappears, with a delete event), one keeps its lease alive, one
    republishes without a lease (permanent); all with a 1 s TTL, which etcd rounds up to its
    minimum (about 2 s). For etcd, a second store object renews the lease (as a restarted agent
    would: the lease is found on the record)."""
    store, sleep = leased
    keeper = store if isinstance(store, MemoryStateStore) else EtcdStateStore(store.settings)
    events = store.watch("nodes/", timeout_s=0.5)
    for node in ("mortal", "kept", "perm"):
        store.put_inventory(inventory(node, 1), lease_ttl_s=1)
    store.put_inventory(inventory("perm", 2))
    assert set(store.inventories()) == {"mortal", "kept", "perm"}
    for _ in range(9):  # 3.6 s: past any lease without renewal
        sleep(0.4)
        assert keeper.keepalive("kept") is True
    assert _wait_until(lambda: set(store.inventories()) == {"kept", "perm"}, timeout_s=3.0)
    assert store.inventories()["perm"] == inventory("perm", 2)
    assert store.keepalive("mortal") is False
    assert store.keepalive("perm") is True
    assert ("delete", f"{store.keys.prefix}/nodes/mortal") in [(e["type"], e["key"]) for e in events]
    store.put_inventory(inventory("mortal", 1), lease_ttl_s=5)  # the agent comes back
    assert "mortal" in store.inventories()
    if keeper is not store:
        keeper.close()


def test_memory_leases_follow_the_injected_clock():
    now = [0.0]
    s = MemoryStateStore(clock=lambda: now[0])
    s.put_inventory(inventory("n", 1), lease_ttl_s=10)
    now[0] = 9.0
    assert s.keepalive("n") is True  # renewed until 19
    now[0] = 18.0
    assert "n" in s.inventories()
    now[0] = 19.5
    assert s.inventories() == {}
    with pytest.raises(ValueError):
        s.put_inventory(inventory("n", 1), lease_ttl_s=0)


def test_watch_yields_events_then_stops_on_timeout(store):
    events = store.watch("gpus/", timeout_s=0.5)  # events after this call count even before iterating
    store.put_inventory(inventory("n", 2))
    from state_support import job

    store.reserve(job("a", 4.0, 2), "n", [0, 1], colocation_limit=2, now_s=1.0)
    store.release("a", now_s=2.0)
    t0 = time.monotonic()
    got = list(events)
    waited = time.monotonic() - t0
    p = store.keys.prefix
    assert [(e["type"], e["key"]) for e in got] == [
        ("put", f"{p}/gpus/n/0"),
        ("put", f"{p}/gpus/n/1"),
        ("delete", f"{p}/gpus/n/0"),  # the release left both GPUs empty: their records end
        ("delete", f"{p}/gpus/n/1"),
    ]
    assert waited >= 0.4  # it waited out the idle timeout (and then ended: list() returned)


def test_watch_sees_deletes_and_filters_by_prefix(store):
    events = store.watch("tuning/", timeout_s=0.5)
    store.put_inventory(inventory("n", 1))
    from state_support import job

    store.reserve(job("a"), "n", [0], colocation_limit=2, now_s=1.0)
    store.release("a", now_s=2.0)
    got = [(e["type"], e["key"].rsplit("/", 2)[-2:]) for e in events]
    assert got == [("put", ["n", "0"]), ("delete", ["n", "0"])]


def test_watch_idle_timeout_resets_on_each_event(store):
    events = store.watch("jobs/", timeout_s=0.4)
    from state_support import job

    def writer():
        for i in range(4):
            time.sleep(0.2)  # each gap is shorter than the timeout
            store.put_job(job(f"j{i}"))

    t = threading.Thread(target=writer)
    t.start()
    got = list(events)
    t.join()
    assert [e["key"].rsplit("/", 1)[1] for e in got] == ["j0", "j1", "j2", "j3"]


def test_watch_of_several_prefixes_sees_only_them(store):
    """One watch of two jobs' measurement folders (the coordinator's round): their reports come,
    each job's in order (etcd may interleave the two watches' backlogs); a job outside them
    (``z``, and ``ab`` that shares a prefix with ``a``) is never sent."""
    from iadeep.state import Measurement

    events = store.watch(["measurements/a/", "measurements/b/"], timeout_s=0.5)
    for i, pod in enumerate(["a", "z", "b", "ab", "a", "z"]):
        store.add_measurement(Measurement(pod, 1.0 + i, 64, float(i)))
    got = [(e["key"].split("/")[-2], json.loads(e["value"])["steps_per_s"]) for e in events]
    assert sorted(pod for pod, _ in got) == ["a", "a", "b"]
    assert [v for pod, v in got if pod == "a"] == [1.0, 5.0] and [v for pod, v in got if pod == "b"] == [3.0]
    with pytest.raises(ValueError, match="at least one prefix"):
        store.watch([], timeout_s=0.5)
