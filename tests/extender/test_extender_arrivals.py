"""The extender's arrival log (:mod:`iadeep.extender._arrivals`) against a real etcd: the jobs its
policy meets are written to the store, and a restarted extender's policy takes them back, so
the arrival price reads the same rate and a gang's price lapses when it would have."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from extender_support import extender_args, gpu_pod, publish

from iadeep.dev import LocalEtcd
from iadeep.extender._wire import ExtenderArgs
from iadeep.policy.iadeep import ARRIVAL_WINDOW_S
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing import wait_for

pytest.importorskip("kubernetes.client")

R50 = {"iadeep.io/model": "ResNet-50", "iadeep.io/batch-size": "128"}


def _filter(svc, uid: str, node: str = "a"):
    pod = gpu_pod(f"p-{uid}", mem=8, uid=uid, annotations=R50)
    return svc.filter(ExtenderArgs.model_validate(extender_args(pod, [node])))


def test_a_restarted_extender_takes_back_the_arrivals_its_policy_met(make_service, store):
    publish(store, ["a"], gpus=2)
    first = make_service()
    first.start()
    try:
        for uid in ("u1", "u2", "u3"):
            assert _filter(first, uid).node_names == ["a"]
        met = dict(first.policy._arrived)
        assert set(met) == {"u1", "u2", "u3"}
        stored = wait_for(store.arrivals, lambda rs: len(rs) == 3, what="three arrivals stored")
    finally:
        first.stop()
    assert {r.job: r.at for r in stored} == met
    assert all((r.model, r.batch_size, r.num_gpus, r.gpu_milli) == ("ResNet-50", 128, 1, None) for r in stored)
    assert all(r.keep_until == r.at + ARRIVAL_WINDOW_S for r in stored)

    second = make_service()
    second.start()
    try:
        assert second.arrivals is not None and second.arrivals.restored
        assert second.policy._arrived == met
        assert second.policy._arriving == first.policy._arriving
        _filter(second, "u1")  # met before the restart: not a new arrival
        _filter(second, "u4")
        assert set(second.policy._arrived) == {"u1", "u2", "u3", "u4"} and second.policy._arrived["u1"] == met["u1"]
        wait_for(store.arrivals, lambda rs: len(rs) == 4, what="the new arrival stored")
    finally:
        second.stop()


def test_an_extender_started_while_etcd_is_paused_takes_the_log_back_once_it_answers(make_service, tmp_path):
    server = LocalEtcd(tmp_path / "etcd")
    server.start()
    store = EtcdStateStore(StateSettings(endpoints=[server.endpoint], prefix=f"/t-{uuid.uuid4().hex[:8]}"))
    try:
        publish(store, ["a"], gpus=2)
        first = make_service(state_store=store)
        first.start()
        try:
            _filter(first, "u1")
            _filter(first, "u2")
            wait_for(store.arrivals, lambda rs: len(rs) == 2, what="two arrivals stored")
        finally:
            first.stop()
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            second = make_service(state_store=store)
            second.start()  # the store does not answer: served without the log
            assert second.arrivals is not None and not second.arrivals.restored and not second.policy._arrived
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        try:
            wait_for(lambda: second.arrivals.restored, bool, timeout=60, what="the log taken back once etcd answers")
            assert set(second.policy._arrived) == {"u1", "u2"}
        finally:
            second.stop()
    finally:
        store.close()
        server.stop()


def _policy_and_log(model, store):
    import threading

    from iadeep.extender._arrivals import ArrivalLog
    from iadeep.podspec import TypeResolver
    from iadeep.policy import make_policy

    policy = make_policy("iadeep", model, price_arrivals=True)
    log = ArrivalLog(store, TypeResolver(model, "ResNet-50", 64), clock=lambda: 0.0)
    policy.on_arrival = log.record
    return policy, log, threading.Lock()


def _request(model, job_id: str, gpus: int = 1):
    from iadeep.jobtypes import JobType
    from iadeep.policy import JobRequest

    t = model.type_id(JobType("ResNet-50", 128))
    return JobRequest(0, job_id, t, gpus, float(model.mem_gib[t]), 3600.0)


def test_a_job_met_again_while_the_log_could_not_be_read_keeps_its_first_meeting(model):
    """The store holds a gang met at 0 s; the restarted policy, which could not read the log at
    start, meets it again at 10 h. Once the store answers, the policy takes the earlier meeting
    back and the store keeps it: the gang's price lapses 2 T after 0 s, not after 10 h."""
    from iadeep.state import MemoryStateStore

    store = MemoryStateStore()
    before, log0, _ = _policy_and_log(model, store)
    before._note_arrival(_request(model, "gang", gpus=8), 0.0)
    before._note_arrival(_request(model, "one"), 60.0)
    log0.flush()
    after, log, lock = _policy_and_log(model, store)
    after._note_arrival(_request(model, "gang", gpus=8), 36000.0)  # met again during the outage
    assert log.restore(after, lock) == 2  # "one" taken back, "gang" moved earlier
    log.flush()
    assert after._arrived == {"gang": 0.0, "one": 60.0}
    assert [(t, j) for t, j, _ in after._arrivals] == [(0.0, "gang"), (60.0, "one")]
    assert [(r.job, r.at) for r in store.arrivals()] == [("gang", 0.0), ("one", 60.0)]


def test_arrivals_noted_during_a_write_are_written_next_even_past_the_queue_limit(model, monkeypatch):
    """Arrivals that come while a long write is in flight, with the queue at its limit (its
    oldest records dropped to make room), are the ones left queued after the write: none of them
    is lost, and what was dropped is counted."""
    from iadeep.extender import _arrivals
    from iadeep.state import MemoryStateStore

    monkeypatch.setattr(_arrivals, "MAX_PENDING", 5)
    store = MemoryStateStore()
    policy, log, _ = _policy_and_log(model, store)
    for i in range(5):
        policy._note_arrival(_request(model, f"old{i}"), float(i))
    write = store.put_arrivals

    def slow_put(records):
        policy._note_arrival(_request(model, "new0"), 10.0)  # arrive while the write is in flight
        policy._note_arrival(_request(model, "new1"), 11.0)
        write(records)

    monkeypatch.setattr(store, "put_arrivals", slow_put)
    assert log.flush() == 5
    assert log.dropped == 2 and log.pending == 2
    monkeypatch.setattr(store, "put_arrivals", write)
    log.flush()
    assert {r.job for r in store.arrivals()} == {"old0", "old1", "old2", "old3", "old4", "new0", "new1"}


def test_a_gang_of_absurd_remaining_work_is_logged_with_a_finite_keep_until(model):
    """A gang's record is kept ``ARRIVAL_HOLD_AT_MOST`` times its remaining work; from a work
    left of 1e308 s that is infinite, which JSON cannot hold: the record keeps at most that
    multiple of ``MAX_DURATION_S`` and reads back from the store."""
    import dataclasses
    import math

    from iadeep.podspec import MAX_DURATION_S
    from iadeep.policy.iadeep import ARRIVAL_HOLD_AT_MOST
    from iadeep.state import MemoryStateStore

    store = MemoryStateStore()
    policy, log, _ = _policy_and_log(model, store)
    policy._note_arrival(dataclasses.replace(_request(model, "gang", gpus=8), remaining_s=1e308), 5.0)
    assert log.flush() == 1
    (rec,) = store.arrivals()
    assert math.isfinite(rec.keep_until) and rec.keep_until == 5.0 + ARRIVAL_HOLD_AT_MOST * MAX_DURATION_S
