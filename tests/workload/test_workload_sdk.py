"""The job reporting SDK against a real etcd: registration, reports at most once per second,
a batch size assigned by the coordinator applied at the next step boundary, completion; and a
local run without etcd."""

from __future__ import annotations

import logging
import time

import pytest

from iadeep.state import BatchSizeAssignment, EtcdStateStore, WorkloadStatus
from iadeep.testing import wait_for
from iadeep.workload import Job, WorkloadSettings

FAST = WorkloadSettings(pod_uid="p1", report_interval_s=1.0, watch_idle_s=5.0)


def run_steps(job: Job, seconds: float, step_s: float = 0.01) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(step_s)
        job.step()


def test_job_registers_reports_and_completes(etcd_settings) -> None:
    store = EtcdStateStore(etcd_settings)
    job = Job("p1", 32, store=store, settings=FAST).start()
    assert store.workload("p1").state == "running"
    t0 = time.monotonic()
    run_steps(job, 3.2)
    elapsed = time.monotonic() - t0
    job.complete()
    ms = store.measurements("p1")
    # at most one report per interval, and at least one per interval that fully passed
    assert 2 <= len(ms) <= elapsed // 1.0 + 1
    assert all(m.batch_size == 32 for m in ms)
    assert all(0 < m.steps_per_s < 110 for m in ms)  # 10 ms steps: below 100/s plus rounding
    assert [m.samples for m in ms] == sorted(m.samples for m in ms)
    st = store.workload("p1")
    assert isinstance(st, WorkloadStatus) and st.state == "completed"
    assert st.samples == job.stats().samples == 32 * job.stats().steps
    store.close()


def test_assigned_batch_size_applies_at_the_next_step(etcd_settings) -> None:
    store = EtcdStateStore(etcd_settings)
    coordinator = EtcdStateStore(etcd_settings)
    job = Job("p1", 32, store=store, settings=FAST).start()
    coordinator.set_batch_size(BatchSizeAssignment("p1", 64, "s", 0, time.time()))
    # the size changes only at a step boundary: before any step it is unchanged
    time.sleep(0.5)
    assert job.batch_size == 32
    wait_for(lambda: job.step(), lambda b: b == 64, timeout=10, what="batch size 64 applied")
    run_steps(job, 2.5)
    job.complete()
    ms = store.measurements("p1")
    assert ms and ms[-1].batch_size == 64
    # a measurement never mixes sizes: all reports after the first 64 are at 64
    first64 = next(i for i, m in enumerate(ms) if m.batch_size == 64)
    assert all(m.batch_size == 64 for m in ms[first64:])
    assert job.stats().batch_size_changes == 1
    coordinator.close()
    store.close()


def test_size_set_before_start_is_read_and_older_sizes_are_ignored(etcd_settings) -> None:
    store = EtcdStateStore(etcd_settings)
    now = time.time()
    store.set_batch_size(BatchSizeAssignment("p1", 16, "s", 2, now))
    job = Job("p1", 32, store=store, settings=FAST).start()
    wait_for(lambda: job.step(), lambda b: b == 16, timeout=10, what="size set before start")
    store.set_batch_size(BatchSizeAssignment("p1", 128, "s", 1, now - 10))  # stale: older than applied
    store.set_batch_size(BatchSizeAssignment("other", 8, "s", 3, now + 1))  # not this job's
    time.sleep(1.0)
    assert job.step() == 16
    job.complete()
    store.close()


def test_an_assignment_dated_far_ahead_does_not_shut_out_the_ones_after_it(etcd_settings, caplog) -> None:
    """A writer whose clock is a year ahead: its size applies, and a later assignment written with
    a correct clock still applies after it (it is not taken for an older one)."""
    store = EtcdStateStore(etcd_settings)
    job = Job("p1", 32, store=store, settings=FAST).start()
    store.set_batch_size(BatchSizeAssignment("p1", 16, "x", 0, time.time() + 365 * 86400))
    wait_for(lambda: job.step(), lambda b: b == 16, timeout=10, what="the far-ahead size applied")
    time.sleep(0.1)
    store.set_batch_size(BatchSizeAssignment("p1", 128, "s", -1, time.time()))
    wait_for(lambda: job.step(), lambda b: b == 128, timeout=10, what="the next size applied")
    assert "ahead of this job's clock: applied, ordered as if assigned now" in caplog.text
    job.complete()
    store.close()


def test_requests_per_second_stay_at_most_one(etcd_settings) -> None:
    store = EtcdStateStore(etcd_settings)
    before = store.stats()["requests"]
    job = Job("p1", 32, store=store, settings=FAST).start()
    t0 = time.monotonic()
    run_steps(job, 4.0, step_s=0.001)  # about a thousand steps: no request per step
    job.complete()
    elapsed = time.monotonic() - t0
    used = store.stats()["requests"] - before
    # registration, one read and one watch revision read, completion: 4 fixed; reports <= 1/s
    assert job.stats().steps > 500
    assert used <= 4 + elapsed // 1.0 + 1
    store.close()


def test_local_run_logs_only(caplog, monkeypatch) -> None:
    monkeypatch.delenv("IADEEP_ETCD_ENDPOINTS", raising=False)
    monkeypatch.setenv("IADEEP_WORKLOAD_POD_UID", "local-1")
    caplog.set_level(logging.INFO, logger="iadeep.workload")
    with Job.from_env(batch_size=8) as job:
        assert job.store is None
        run_steps(job, 1.3)
    assert any("steps/s at batch size 8" in r.getMessage() for r in caplog.records)
    assert any("completed" in r.getMessage() for r in caplog.records)


def test_bad_batch_size_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Job("p", 0)


def test_a_negative_sample_count_is_refused_at_the_step() -> None:
    """The store's records count samples from 0 up: a negative count would write reports no
    reader accepts, so the step refuses it and counts nothing."""
    job = Job("p", 8)
    with pytest.raises(ValueError, match="samples must be >= 0, got -100"):
        job.step(samples=-100)
    assert job.stats().steps == 0 and job.stats().samples == 0


_TRAINING = """
import time
from iadeep.workload import Job
with Job.from_env(batch_size=32) as job:
    while True:
        time.sleep(0.01)
        job.step()
"""


def test_sigterm_records_the_job_failed_not_running(etcd_settings, tmp_path) -> None:
    """The kubelet stops a pod with SIGTERM. Python's default action ends the process without
    unwinding, which left the job's record ``running`` forever; the SDK turns it into
    ``SystemExit(143)``, so the ``with`` block records ``failed`` and the exit status stays 143."""
    import os
    import signal
    import subprocess
    import sys

    from iadeep.testing.services import etcd_env

    env = {**os.environ, **etcd_env(etcd_settings), "HOME": str(tmp_path), "IADEEP_WORKLOAD_POD_UID": "pod-term"}
    proc = subprocess.Popen([sys.executable, "-c", _TRAINING], env=env, stderr=subprocess.PIPE, text=True)
    store = EtcdStateStore(etcd_settings)
    try:
        wait_for(lambda: store.workload("pod-term"), lambda w: w is not None and w.state == "running", timeout=60,
                 what="the job registered")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143, proc.stderr.read() if proc.stderr else ""
        assert store.workload("pod-term").state == "failed"
    finally:
        proc.kill()
        store.close()


def test_a_sigterm_handler_of_the_script_s_own_is_kept(monkeypatch) -> None:
    import signal

    def mine(signum, frame):  # pragma: no cover - never called
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        Job("", 32, store=None).start()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)
