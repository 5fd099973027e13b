"""The coordinator with the real tuner, a real etcd and emulated jobs (processes using the SDK,
whose steps/s come from Gavel's measured interference plus noise): a session converges and the
final batch sizes run in every co-located job, and another job's reports never reach its
rounds; a job ends mid-session; the coordinator is
SIGKILLed mid-session and restarted."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
from prometheus_client import generate_latest

from iadeep._prometheus import samples as metric_samples
from iadeep.jobtypes import JobType
from iadeep.coordinator import CoordinatorService, CoordinatorSettings, RoundSettings
from iadeep.state import EtcdStateStore, GpuInfo, JobRecord, Measurement, NodeInventory
from iadeep.testing import wait_for
from iadeep.testing.services import CoordinatorProcess
from iadeep.tuner import TunerClient

NODE = "n1"
A = ("pod-a", "ResNet-50", 64, 10.0)
B = ("pod-b", "Transformer", 64, 6.0)


def place(store: EtcdStateStore, *jobs) -> None:
    """What the extender's bind does: reserve each pod on GPU 0 (writes the tuning request)."""
    store.put_inventory(NodeInventory(NODE, (GpuInfo(0, 32.0, "GPU-0000"),)))
    for pod, model, batch, mem in jobs:
        store.reserve(JobRecord(pod, "default", pod, model, batch, 1, mem, 3600.0, time.time()), NODE, [0],
                      colocation_limit=2, now_s=time.time())


def in_effect(store: EtcdStateStore, sizes: dict[str, int]) -> bool:
    """Every job's latest report is at its assigned size (the size runs, not only is written)."""
    for pod, size in sizes.items():
        ms = store.measurements(pod)
        if not ms or ms[-1].batch_size != size:
            return False
    return True


def reporting(store: EtcdStateStore, *pods: str) -> None:
    """Wait until every emulated job reports (their start-up is slow on a loaded machine, and a
    session would otherwise spend its first round's deadline on it)."""
    wait_for(lambda: [p for p in pods if not store.measurements(p)], lambda left: not left, timeout=90,
             what="emulated jobs reporting")


def running(store: EtcdStateStore, jobs, *specs) -> None:
    """Place the pods on GPU 0 (:func:`place`), start their emulated jobs and wait for their reports."""
    place(store, *specs)
    for pod, model, batch, _ in specs:
        jobs.start(pod, model, batch)
    reporting(store, *(spec[0] for spec in specs))


def settings(tuner, throughputs_path, etcd_settings, deadline_s: float = 20.0) -> CoordinatorSettings:
    return CoordinatorSettings(node=NODE, tuner_url=tuner.url, throughputs_file=throughputs_path, idle_s=1.0,
                               round=RoundSettings(deadline_s=deadline_s), etcd=etcd_settings)


def test_session_converges_and_every_job_runs_the_final_sizes(etcd_store, etcd_settings, tuner, jobs,
                                                              interference_model, throughputs_path) -> None:
    store = etcd_store
    running(store, jobs, A, B)
    stop_outsider = threading.Event()

    def outsider() -> None:  # a job of another GPU, reporting 20 times a second at a size trials use
        while not stop_outsider.wait(0.05):
            store.add_measurement(Measurement("pod-z", 9.9, 64, time.time()))

    noise = threading.Thread(target=outsider, daemon=True)
    noise.start()
    t_start = time.time()
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(lambda: svc.results, bool, timeout=120, what="a finished session")
        stop_outsider.set()
        noise.join()
        req, result = svc.results[0]
        assert set(req.pods) == {"pod-a", "pod-b"}
        assert result.outcome == "converged" and 1 <= result.rounds <= 4
        assert set(result.applied) == {"pod-a", "pod-b"}  # every co-located job, not only the newest
        assert store.tuning_requests() == []
        for pod, size in result.applied.items():
            a = store.batch_size(pod)
            assert a is not None and a.batch_size == size and a.trial == -1
        wait_for(lambda: in_effect(store, result.applied), bool, timeout=20, what="final sizes in effect")
        samples = store.samples()
        assert len(samples) == 2 * result.rounds
        assert {(s.job_model, s.partner_model) for s in samples} == {("ResNet-50", "Transformer"), ("Transformer", "ResNet-50")}
        # the measured normalised throughputs come from the emulated (Gavel) speeds plus 3 % noise
        m = interference_model
        for s in samples:
            x = m.norm[m.type_id(JobType(s.job_model, s.job_batch_size)), m.type_id(JobType(s.partner_model, s.partner_batch_size))]
            assert abs(s.normalised_throughput - x) < 0.25 * x + 0.05
        metrics = generate_latest(svc.metrics.registry).decode()
        assert f"iadeep_coordinator_rounds_total {float(result.rounds)}" in metrics
        assert 'iadeep_coordinator_sessions_total{outcome="converged"} 1.0' in metrics
        # the rounds were woken only by the session's jobs: no more events than A and B reported
        # since the coordinator started (the outsider's reports, far more, never reached them)
        ours = sum(1 for p in ("pod-a", "pod-b") for m in store.measurements(p) if m.at >= t_start)
        theirs = sum(1 for m in store.measurements("pod-z") if m.at >= t_start)
        assert theirs > 2 * ours
        events = svc.metrics.measurement_events._value.get()
        assert 0 < events <= ours
    finally:
        stop_outsider.set()
        svc.stop(timeout_s=30)


def test_job_ending_mid_session_ends_it_cleanly(etcd_store, etcd_settings, tuner, jobs, interference_model,
                                                throughputs_path) -> None:
    store = etcd_store
    running(store, jobs, A, B)
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings, deadline_s=10), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(lambda: store.batch_size("pod-b"), lambda a: a is not None and a.trial >= 0, timeout=60,
                 what="first trial written")
        assert jobs.finish("pod-b") == 0
        assert store.workload("pod-b").state == "completed"
        wait_for(lambda: svc.results, bool, timeout=60, what="session ended")
        _, first = svc.results[0]
        assert first.outcome == "job_left"
        assert set(first.applied) == {"pod-a"}  # the finished job gets nothing
        # the extender releases the finished pod: the GPU's new set is A alone -> back to its size
        store.release("pod-b", now_s=time.time())
        wait_for(lambda: len(svc.results), lambda n: n >= 2, timeout=30, what="second session")
        _, second = svc.results[1]
        assert second.outcome == "single_job" and second.applied == {"pod-a": 64}
        wait_for(lambda: in_effect(store, {"pod-a": 64}), bool, timeout=20, what="A back at 64")
        assert store.tuning_requests() == []
    finally:
        svc.stop(timeout_s=30)


def test_a_superseded_session_puts_the_jobs_it_moved_back(etcd_store, etcd_settings, tuner, jobs, interference_model,
                                                         throughputs_path) -> None:
    """A third job joins GPU 0 (co-location limit 3) while the session of A and B runs a trial that
    moved one of them off its size: the session ends as superseded at its next round, writes the
    moved jobs' sizes from before the session back (the simulator discards an interrupted session,
    so its jobs keep the sizes they had), and the next session tunes all three."""
    store = etcd_store
    running(store, jobs, A, B)
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        before = {"pod-a": A[2], "pod-b": B[2]}

        def trial_sizes():
            now = {p: store.batch_size(p) for p in before}
            return {p: a.batch_size for p, a in now.items() if a is not None and a.trial >= 0}

        moved = wait_for(trial_sizes, lambda t: any(t.get(p, size) != size for p, size in before.items()),
                         timeout=90, what="a trial that moves a job")
        C = ("pod-c", "ResNet-18", 64, 4.0)
        jobs.start(C[0], C[1], C[2])
        store.reserve(JobRecord(C[0], "default", C[0], C[1], C[2], 1, C[3], 3600.0, time.time()), NODE, [0],
                      colocation_limit=3, now_s=time.time())
        wait_for(lambda: svc.results, bool, timeout=90, what="the first session ended")
        _, first = svc.results[0]
        assert first.outcome == "superseded" and first.applied == {}
        assert first.restored == {p: before[p] for p, size in moved.items() if size != before[p]}
        wait_for(lambda: len(svc.results), lambda n: n >= 2, timeout=180, what="the session of all three")
        req, second = svc.results[1]
        assert set(req.pods) == {"pod-a", "pod-b", "pod-c"} and second.outcome in ("converged", "deadline")
    finally:
        svc.stop(timeout_s=30)


def test_coordinator_killed_mid_session_resumes(etcd_store, etcd_settings, tuner, jobs, throughputs_path) -> None:
    store = etcd_store
    running(store, jobs, A, B)
    env = {"IADEEP_COORDINATOR_IDLE_S": "1", "IADEEP_COORDINATOR_ROUND__DEADLINE_S": "20"}
    coord = CoordinatorProcess(NODE, tuner.url, throughputs_path, etcd_settings, env=env).start()
    try:
        wait_for(lambda: store.batch_size("pod-a"), lambda a: a is not None and a.trial >= 1, timeout=60,
                 what="second trial written")
        coord.kill()  # SIGKILL mid-session
        assert len(store.tuning_requests()) == 1  # not acknowledged: the session is owed
        tuned_before = TunerClient(tuner.url).outcome(f"{NODE}.0.{round(store.tuning_requests()[0].requested_at * 1e6)}")
        assert tuned_before.trials >= 1
        coord.start()
        wait_for(store.tuning_requests, lambda r: r == [], timeout=120, what="session finished after restart")
        final = {p: store.batch_size(p) for p in ("pod-a", "pod-b")}
        assert all(a is not None and a.trial == -1 for a in final.values())
        wait_for(lambda: in_effect(store, {p: a.batch_size for p, a in final.items()}), bool, timeout=20,
                 what="final sizes in effect")
        # the restarted process ran the owed session to its end, measuring rounds itself; a round
        # past its deadline under a loaded machine ends it as ``deadline`` (best so far applied).
        # The session is acknowledged in etcd before the service counts it: wait for the count.
        def ended_sessions():
            counts = metric_samples(httpx.get(coord.url + "/metrics", trust_env=False).text)
            return counts, {dict(labels)["outcome"]: v for (name, labels), v in counts.items()
                            if name == "iadeep_coordinator_sessions_total"}

        counts, ended = wait_for(ended_sessions, lambda c: sum(c[1].values()) >= 1, timeout=20,
                                 what="the session counted in /metrics")
        log = coord.log()[-3000:]
        assert sum(ended.values()) == 1 and set(ended) <= {"converged", "deadline"}, (ended, log)
        assert counts[("iadeep_coordinator_rounds_total", ())] >= 1, log
    finally:
        coord.kill()


def test_a_measurement_that_never_comes_ends_the_round_at_its_deadline(etcd_store, etcd_settings, tuner, jobs,
                                                                        interference_model, throughputs_path) -> None:
    store = etcd_store
    place(store, A, B)
    jobs.start("pod-a", "ResNet-50", 64)  # pod-b never runs: no report from it ever comes
    reporting(store, "pod-a")
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings, deadline_s=3), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(lambda: svc.results, bool, timeout=60, what="session ended by its deadline")
        _, result = svc.results[0]
        assert result.outcome == "deadline" and result.rounds == 0
        assert result.applied == {"pod-a": 64, "pod-b": 64}  # nothing measured: the running configuration
        assert store.tuning_requests() == []
        assert 'iadeep_coordinator_measurement_timeouts_total 1.0' in generate_latest(svc.metrics.registry).decode()
    finally:
        svc.stop(timeout_s=30)


def test_etcd_unreachable_fails_readiness_without_exiting(tuner, throughputs_path) -> None:
    from iadeep.state import StateSettings
    from iadeep.testing import free_port

    dead = StateSettings(endpoints=[f"http://127.0.0.1:{free_port()}"], prefix="/x")
    coord = CoordinatorProcess(NODE, tuner.url, throughputs_path, dead, env={"IADEEP_COORDINATOR_IDLE_S": "1"})
    coord.start(ready="/healthz")
    try:
        assert httpx.get(coord.url + "/readyz", trust_env=False, timeout=10).status_code == 503
        time.sleep(3)  # several retries with back-off
        assert coord.proc is not None and coord.proc.poll() is None
        assert httpx.get(coord.url + "/readyz", trust_env=False, timeout=10).status_code == 503
        log = coord.log()
        assert "etcd unavailable, retrying" in log and "Traceback" not in log
        # SIGTERM (the DaemonSet's pod stopped) runs the service's stop and exits 0, even while
        # etcd is away (uvicorn re-raised the signal after its shutdown: exit 143, stop never ran)
        assert coord.kill(signal.SIGTERM) == 0, coord.log()[-2000:]
        assert "Traceback" not in coord.log()
    finally:
        coord.kill()


def test_a_job_the_measurements_do_not_cover_is_not_retried_forever(etcd_store, interference_model) -> None:
    from iadeep.coordinator import run_session

    store = etcd_store
    place(store, A, ("pod-x", "ResNet-50", 64, 6.0))
    store.put_job(JobRecord("pod-x", "default", "pod-x", "NoSuchModel", 64, 1, 6.0, 3600.0, time.time()))
    (req,) = store.tuning_requests()

    class NoTuner:  # never reached: the session ends before asking a tuner
        def __getattr__(self, name):
            raise AssertionError(f"tuner.{name} called")

    result = run_session(req, store=store, tuner=NoTuner(), model=interference_model, rounds=RoundSettings())
    assert result.outcome == "untunable" and store.tuning_requests() == []


def test_a_session_on_a_node_without_a_published_gpu_is_deferred_untouched(etcd_store, interference_model) -> None:
    """The node's device plugin is gone (its inventory's lease expired): no reservation can move, so
    the session neither opens a tuner study nor writes a size; it ends as ``no_inventory`` (not
    ``superseded``, which would be re-run at every re-list) and the request stays
    for when the GPU is published again."""
    from iadeep.coordinator import run_session

    store = etcd_store
    place(store, A, B)
    store.put_inventory(NodeInventory(NODE, (GpuInfo(0, 32.0, "GPU-0000"),)), lease_ttl_s=1)
    wait_for(lambda: store.inventories(), lambda inv: NODE not in inv, timeout=15, what="the inventory's lease expiring")
    (req,) = store.tuning_requests()

    class NoTuner:  # never reached: nothing can run without the GPU's inventory
        def __getattr__(self, name):
            raise AssertionError(f"tuner.{name} called")

    result = run_session(req, store=store, tuner=NoTuner(), model=interference_model, rounds=RoundSettings())
    assert result.outcome == "no_inventory" and result.applied == {} and result.rounds == 0
    assert store.tuning_requests() == [req]
    assert store.batch_size("pod-a") is None and store.batch_size("pod-b") is None


def test_one_coordinator_follows_every_node_with_all_nodes(etcd_store, etcd_settings, tuner, throughputs_path,
                                                           interference_model) -> None:
    """``all_nodes`` (one process for a live experiment's kwok nodes): the requests of two nodes
    are both served, and a per-node coordinator serves only its own."""
    store = etcd_store
    for node, pod in (("n1", "pod-1"), ("n2", "pod-2")):
        store.put_inventory(NodeInventory(node, (GpuInfo(0, 32.0, f"GPU-{node}"),)))
        store.reserve(JobRecord(pod, "default", pod, "ResNet-50", 64, 1, 10.0, 3600.0, time.time()), node, [0],
                      colocation_limit=2, now_s=time.time())
    assert {r.node for r in store.tuning_requests()} == {"n1", "n2"}
    only_n1 = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                                 tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(store.tuning_requests, lambda left: {r.node for r in left} == {"n2"}, timeout=30, what="n1 served")
    finally:
        only_n1.stop()
    every = CoordinatorSettings(all_nodes=True, tuner_url=tuner.url, throughputs_file=throughputs_path, idle_s=1.0,
                                etcd=etcd_settings)
    svc = CoordinatorService(every, store=store, tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(store.tuning_requests, lambda left: not left, timeout=30, what="every request served")
    finally:
        svc.stop()
    assert store.batch_size("pod-2") is not None and {r.outcome for _, r in svc.results} == {"single_job"}


def test_node_and_all_nodes_are_exclusive(throughputs_path) -> None:
    import pytest
    from pydantic import ValidationError

    for kw, match in (({}, "set node .* or all_nodes"), ({"node": "n1", "all_nodes": True}, "not both"),
                      ({"node": "bad/node"}, "not a Kubernetes node name"),
                      ({"node": "n1", "tuner_url": "not-a-url"}, "(?s)tuner_url.*not an http"),
                      ({"node": "n1", "tuner_url": "http://127.0.0.1:99999"}, "(?s)tuner_url.*[Pp]ort out of range"),
                      ({"node": "n1", "log_level": "loud"}, "(?s)log_level.*not a log level")):
        with pytest.raises(ValidationError, match=match):
            CoordinatorSettings(**{"tuner_url": "http://127.0.0.1:1", "throughputs_file": throughputs_path, **kw})


def test_a_job_grows_into_memory_nobody_reserved_and_its_reservation_moves_first(etcd_store, etcd_settings, tuner, jobs,
                                                                                  interference_model,
                                                                                  throughputs_path) -> None:
    """The pods ask little beyond their sizes' memory (A: ResNet-50/64, 7 GiB; B: Transformer/64,
    4 GiB) and stored samples favour larger batches, so the session's trials grow a job beyond its
    request (ResNet-50/128 needs 13 GiB, Transformer/128 7) into the 32-GiB GPU's unreserved memory,
    which the pods' own requests would never allow. Every time a batch size is written, the
    pod's reservation (one etcd watch over the store's prefix, in revision order) already
    holds that size's memory; at the end each pod reserves max(request, its final size's memory),
    the GPU's state their sum, and the release frees all of it."""
    from iadeep.state import InterferenceSampleRecord

    m = interference_model
    a, b = ("pod-a", "ResNet-50", 64, 7.0), ("pod-b", "Transformer", 64, 4.0)
    store = etcd_store
    store.add_samples([InterferenceSampleRecord("ResNet-50", 128, "Transformer", 64, 0.95, 0.0),
                       InterferenceSampleRecord("Transformer", 64, "ResNet-50", 128, 0.95, 0.0)])
    running(store, jobs, a, b)
    # one watch over the whole prefix: one etcd watch delivers its events in revision order (the
    # watches of several prefixes on one stream may interleave out of it)
    events = store.watch("", timeout_s=2.0)
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                             tuner=TunerClient(tuner.url), model=m).start()
    try:
        wait_for(lambda: svc.results, bool, timeout=120, what="a finished session")
    finally:
        svc.stop(timeout_s=30)
    jobs.stop_all()  # no more reports: the watch below ends 2 s after the last event
    reserved = {"pod-a": 7.0, "pod-b": 4.0}  # as the watch saw them, in revision order
    written = []
    for ev in events:
        if ev.get("type") != "put":
            continue
        if "/assignments/" in ev["key"]:
            rec = json.loads(ev["value"])
            reserved[rec["pod_uid"]] = rec["mem_gib"]
        elif "/batchsizes/" in ev["key"]:
            rec = json.loads(ev["value"])
            pod, size = rec["pod_uid"], rec["batch_size"]
            need = float(m.mem_gib[m.type_id(JobType(dict((a[:2], b[:2]))[pod], size))])
            assert reserved[pod] >= need - 1e-9, f"{pod} ran {size} ({need} GiB) holding {reserved[pod]} GiB"
            written.append((pod, size))
    requests = {"pod-a": a[3], "pod-b": b[3]}
    grown = [(p, size) for p, size in written
             if float(m.mem_gib[m.type_id(JobType(dict((a[:2], b[:2]))[p], size))]) > requests[p]]
    assert grown, f"no trial grew a job beyond its request: {written}"
    _, result = svc.results[0]
    final = {p: a_.mem_gib for a_ in store.assignments(NODE) for p in [a_.pod_uid]}
    for pod, model, _, request in (a, b):
        size = result.applied[pod]
        assert final[pod] == max(request, float(m.mem_gib[m.type_id(JobType(model, size))]))
    assert store.gpu_states()[(NODE, 0)].mem_used_gib == sum(final.values()) <= 32.0
    store.release("pod-a", now_s=time.time())
    store.release("pod-b", now_s=time.time())
    assert store.gpu_states() == {} and store.assignments() == []


def covered(store, model, records: dict[str, tuple[str, float]]) -> None:
    """Every pod's reservation on GPU 0 holds the memory of the batch size it was told to run at
    (max(request, the size's memory)), and the GPU is not over-committed."""
    held = {a.pod_uid: a.mem_gib for a in store.assignments(NODE) if a.gpu == 0}
    for pod, (family, request) in records.items():
        told = store.batch_size(pod)
        if pod in held and told is not None:
            need = max(request, float(model.mem_gib[model.type_id(JobType(family, told.batch_size))]))
            assert held[pod] >= need - 1e-9, f"{pod} told to run {told.batch_size} ({need} GiB), holds {held[pod]} GiB"
    assert sum(held.values()) <= 32.0 + 1e-9


def test_a_pod_taking_the_memory_a_trial_freed_never_leaves_a_job_without_its_reservation(
        etcd_store, etcd_settings, tuner, jobs, interference_model, throughputs_path) -> None:
    """A third pod (co-location limit 3) takes all the memory left on the GPU while a session of A
    and B runs: whatever the trials had moved, no job is ever told to run at a size its
    reservation does not hold (a superseded session restores the earlier sizes only where their
    memory can be held again), and the GPU is never over-committed; then the three are tuned."""
    m = interference_model
    a, b = ("pod-a", "ResNet-50", 64, 7.0), ("pod-b", "Transformer", 64, 4.0)
    store = etcd_store
    running(store, jobs, a, b)
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                             tuner=TunerClient(tuner.url), model=m).start()
    records = {"pod-a": ("ResNet-50", 7.0), "pod-b": ("Transformer", 4.0)}
    try:
        wait_for(lambda: store.batch_size("pod-a"), lambda x: x is not None and x.trial >= 1, timeout=90,
                 what="a second trial written")
        covered(store, m, records)
        free = 32.0 - store.gpu_states()[(NODE, 0)].mem_used_gib
        c = ("pod-c", "ResNet-18", 64, float(int(free)))
        jobs.start(c[0], c[1], c[2])
        store.reserve(JobRecord(c[0], "default", c[0], c[1], c[2], 1, c[3], 3600.0, time.time()), NODE, [0],
                      colocation_limit=3, now_s=time.time())
        records["pod-c"] = ("ResNet-18", c[3])
        wait_for(lambda: svc.results, bool, timeout=90, what="the first session ended")
        covered(store, m, records)
        wait_for(lambda: len(svc.results), lambda n: n >= 2, timeout=180, what="the session of all three")
        covered(store, m, records)
    finally:
        svc.stop(timeout_s=30)


def test_a_malformed_tuning_request_on_another_node_does_not_stop_the_coordinator(etcd_store, etcd_settings, tuner,
                                                                                   throughputs_path,
                                                                                   interference_model) -> None:
    """A request no reader accepts (``gpu: -1``, written by someone else under another node) is
    left out of the listing: this node's request is still served, and the follower keeps running."""
    import base64

    store = etcd_store
    key = f"{store.keys.prefix}/tuning/n2/7"
    store.backend._post("/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                    "value": base64.b64encode(b'{"node":"n2","gpu":-1,"pods":[],"requested_at":0}').decode()})
    store.put_inventory(NodeInventory(NODE, (GpuInfo(0, 32.0, "GPU-n1"),)))
    store.reserve(JobRecord("pod-1", "default", "pod-1", "ResNet-50", 64, 1, 10.0, 3600.0, time.time()), NODE, [0],
                  colocation_limit=2, now_s=time.time())
    assert {r.node for r in store.tuning_requests()} == {NODE}  # the malformed one left out, not raised
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model).start()
    try:
        wait_for(store.tuning_requests, lambda left: not left, timeout=30, what="n1's request served")
        assert svc._thread is not None and svc._thread.is_alive()
    finally:
        svc.stop()
    assert {r.outcome for _, r in svc.results} == {"single_job"}


def test_a_sample_beyond_the_records_bound_is_not_kept() -> None:
    """A job reporting steps/s far beyond the table's isolated rate (normalised 22.75: another GPU,
    a unit error) would store a sample no reader accepts; the pair keeps its other, valid sample."""
    from iadeep.coordinator._rounds import pair_samples
    from iadeep.state import MAX_NORMALISED_THROUGHPUT
    from iadeep.tuner import TunedJob

    a = TunedJob("a", "ResNet-50", 64, 64)
    b = TunedJob("b", "Transformer", 64, 64)
    kept = pair_samples({"a": 64, "b": 64}, [a, b], {"a": 22.75, "b": 0.8}, 1.0)
    assert [(s.job_model, s.normalised_throughput) for s in kept] == [("Transformer", 0.8)]
    assert all(0 <= s.normalised_throughput <= MAX_NORMALISED_THROUGHPUT for s in kept)
