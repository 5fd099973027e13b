"""``make bench``: wall-clock figures, which tests never assert.

A test asserts properties; how fast something is depends on the machine and on what else runs,
so those figures are measured here and printed (with the old thresholds as targets, for the
README). Measured: loading the full Philly trace; reserve and release latency against a real etcd
on loopback (one thread); how fast the etcd store fails when etcd is gone (refused connections,
no timeouts waited) and when a blackholed endpoint makes every request time out; the live
replay's held clock against the real wall.
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    try:
        fn()
    except Exception:  # noqa: BLE001 - failing fast is what is measured
        pass
    return time.perf_counter() - t0


def _line(what: str, seconds: float, target_s: float) -> None:
    print(f"  {what:<58} {seconds * 1e3:9.1f} ms  (target < {target_s * 1e3:.0f} ms: "
          f"{'met' if seconds < target_s else 'MISSED'})")


def trace_load() -> None:
    from iadeep.datasets import fetch
    from iadeep.traces import load_trace

    path = fetch("philly", progress=False) / "philly.csv"
    load_trace("philly", path)  # warm caches and imports
    _line("full Philly trace (82,247 jobs), warm", _timed(lambda: load_trace("philly", path)), 2.0)


def store_latency(endpoint: str) -> None:
    from iadeep.state import EtcdStateStore, GpuInfo, JobRecord, NodeInventory, StateSettings

    store = EtcdStateStore(StateSettings(endpoints=[endpoint], prefix=f"/bench-{uuid.uuid4().hex[:8]}"))
    for i in range(10):
        store.put_inventory(NodeInventory(f"n{i}", tuple(GpuInfo(g, 80.0) for g in range(8))))
    reserve, release = [], []
    for i in range(500):
        job = JobRecord(f"lat-{i}", "ns", f"lat-{i}", "ResNet-50", 32, 1, 1.0)
        reserve.append(_timed(lambda j=job, i=i: store.reserve(j, f"n{i % 10}", [i % 8], colocation_limit=1000,
                                                                 now_s=0.0)))
    for i in range(500):
        release.append(_timed(lambda i=i: store.release(f"lat-{i}", now_s=0.0)))
    for name, xs in (("reserve", reserve), ("release", release)):
        q = statistics.quantiles(xs, n=100)
        print(f"  {name} latency, one thread, 500 calls: p50 {q[49] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms")
    _line("reserve, median", statistics.median(reserve), 0.05)
    store.close()


def store_failures() -> None:
    from iadeep.state import EtcdStateStore, RetrySettings, StateSettings, TimeoutSettings

    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        dead = [f"http://127.0.0.1:{s.getsockname()[1]}" for s in (a, b)]
    store = EtcdStateStore(StateSettings(endpoints=dead))
    _line("two refused endpoints, 4 tries: StoreUnavailable", _timed(store.jobs), 1.0)
    _line("two refused endpoints: healthy() is False", _timed(store.healthy), 0.5)
    store.close()
    with socket.socket() as srv:  # accepts connections, never answers
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        settings = StateSettings(endpoints=[f"http://127.0.0.1:{srv.getsockname()[1]}"],
                                 timeouts=TimeoutSettings(connect_s=0.2, request_s=0.2),
                                 retry=RetrySettings(attempts=2, initial_backoff_s=0.01))
        store = EtcdStateStore(settings)
        _line("blackholed endpoint, 2 tries of 0.2 s", _timed(store.jobs), 1.5)
        store.close()


def held_clock() -> None:
    """The live replay's held clock on the real wall (its arithmetic is tested on a stepped wall):
    how far a fresh clock reads from ``time.time``, and the wall time a 150-ms hold records."""
    from iadeep.emulator import HeldClock

    with tempfile.TemporaryDirectory(prefix="iadeep-bench-clock-") as tmp:
        clock = HeldClock(Path(tmp) / "clock")
        _line("held clock, not held: |now() - time.time()|", abs(clock.now() - time.time()), 0.05)
        clock.hold()
        time.sleep(0.15)
        clock.release()
        _line("held clock, a 150 ms hold: held_s() - 0.15 s", clock.held_s() - 0.15, 0.15)
        clock.close()


def main() -> int:
    from iadeep.dev import LocalEtcd

    print("timings (figures, not tests; each beside its target)")
    trace_load()
    held_clock()
    with tempfile.TemporaryDirectory(prefix="iadeep-bench-etcd-") as tmp:
        etcd = LocalEtcd(Path(tmp) / "etcd")
        etcd.start()
        try:
            store_latency(etcd.endpoint)
        finally:
            etcd.stop()
    store_failures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
