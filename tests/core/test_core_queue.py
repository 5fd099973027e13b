"""The simulator's scheduling queues: kube-scheduler's queue (order, backoff, event wake-ups) and
FIFO, as units and inside the engine."""

from __future__ import annotations

import pandas as pd
import pytest

from iadeep.policy import make_policy
from iadeep.sim import ClusterSpec, FifoQueue, KubeQueue, KubeQueueSettings, SimSettings, Simulator, make_queue


def _pass(q, now, fits):
    """One scheduling pass: try every candidate, ``fits(h)`` says whether it starts."""
    tried = []
    for h in q.candidates(now):
        tried.append(h)
        (q.placed if fits(h) else q.failed)(h, now)
    return tried


def test_kube_active_queue_is_ordered_by_priority_then_creation_time():
    q = KubeQueue()
    q.add(0, created_s=5.0, now_s=5.0)
    q.add(1, created_s=1.0, now_s=5.0)
    q.add(2, created_s=3.0, now_s=5.0, priority=10)
    q.add(3, created_s=2.0, now_s=5.0)
    assert _pass(q, 5.0, lambda h: True) == [2, 1, 3, 0]
    assert len(q) == 0


def test_kube_an_evicted_pod_queues_by_its_replacements_creation_time():
    """An evicted pod comes back as its Job's replacement pod, created at the eviction: the pods
    created before that (here 1, created at 2 s, after 0 at 1 s) are tried first and count in its
    gpus_ahead; before its eviction 0 was ahead of 1."""
    q = KubeQueue()
    q.add(0, created_s=1.0, now_s=1.0, gpus=2)
    q.add(1, created_s=2.0, now_s=2.0, gpus=1)
    assert _pass(q, 2.0, lambda h: h == 0) == [0, 1]  # 0 starts, 1 waits
    q.requeue(0, 10.0)  # evicted at 10 s
    q.cluster_event("pod_ended", 10.0)
    seen = []
    for h in q.candidates(10.0):
        seen.append((h, q.gpus_ahead(h)))
        q.failed(h, 10.0)
    assert seen == [(1, 0), (0, 1)]  # 1 first; 0 counts its GPU ahead


def test_kube_unschedulable_pod_waits_for_an_event_and_its_backoff():
    # the queue without SchedulerPopFromBackoffQ: a pod waits out its backoff
    q = KubeQueue(KubeQueueSettings(initial_backoff_s=1.0, max_backoff_s=10.0, pop_from_backoff=False))
    q.add(0, 0.0, 0.0)
    q.add(1, 1.0, 0.0)
    # the head does not fit; the pod behind it is tried in the same pass and starts
    assert _pass(q, 0.0, lambda h: h == 1) == [0, 1]
    assert len(q) == 1
    # no event: not retried, however much time passes (up to the unschedulable flush)
    assert _pass(q, 50.0, lambda h: True) == []
    assert q.next_wakeup(50.0) == pytest.approx(300.0)
    # an event after its 1 s backoff: active again at once
    q.cluster_event("pod_ended", 60.0)
    assert _pass(q, 60.0, lambda h: False) == [0]
    # second failure: 2 s backoff; an event 0.5 s later parks it in the backoff queue until 62 s
    q.cluster_event("pod_ended", 60.5)
    assert _pass(q, 60.5, lambda h: True) == []
    assert q.next_wakeup(60.5) == pytest.approx(62.0)
    assert _pass(q, 62.0, lambda h: True) == [0]
    assert len(q) == 0


def test_kube_backoff_doubles_up_to_the_maximum():
    q = KubeQueue(KubeQueueSettings(initial_backoff_s=1.0, max_backoff_s=10.0, pop_from_backoff=False))
    q.add(7, 0.0, 0.0)
    seen = []
    t = 0.0
    for _ in range(6):
        assert _pass(q, t, lambda h: False) == [7]
        seen.append(q.backoff_s(7))
        q.cluster_event("node_added", t)  # event at once: it sits out its backoff
        t = q.next_wakeup(t)
    assert seen == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_an_idle_kube_scheduler_pops_pods_still_backing_off():
    """SchedulerPopFromBackoffQ (on by default since Kubernetes 1.33): with the active queue
    empty, the pods of the backoff queue are tried at once, soonest expiry first; active pods
    still go first, and a pod popped early that fails again backs off longer."""
    q = KubeQueue(KubeQueueSettings(initial_backoff_s=1.0, max_backoff_s=10.0))
    q.add(0, 0.0, 0.0)
    q.add(1, 1.0, 0.0)
    assert _pass(q, 0.0, lambda h: False) == [0, 1]  # both back off 1 s, until 1.0 s
    q.cluster_event("pod_ended", 0.2)  # within their backoffs
    q.add(2, 0.2, 0.2)  # a new pod is active: it goes first, then the backoff queue
    assert _pass(q, 0.2, lambda h: h == 0) == [2, 0, 1]
    assert len(q) == 2 and q.backoff_s(1) == 2.0 and q.backoff_s(2) == 1.0
    assert q.next_wakeup(0.2) == pytest.approx(300.2)  # nothing left backing off: only the flush
    q.cluster_event("pod_ended", 0.3)
    assert _pass(q, 0.3, lambda h: False) == [2, 1]  # pod 2's backoff ends at 1.2 s, pod 1's at 2.2 s


def test_kube_unschedulable_pods_are_flushed_after_the_maximum_time():
    q = KubeQueue(KubeQueueSettings(max_unschedulable_s=300.0))
    q.add(0, 0.0, 0.0)
    _pass(q, 0.0, lambda h: False)
    assert _pass(q, 299.0, lambda h: True) == []
    assert _pass(q, 300.0, lambda h: True) == [0]


def test_fifo_tries_only_the_head_and_backfill_a_few_behind_it():
    fifo, backfill = FifoQueue(0), FifoQueue(2)
    for q in (fifo, backfill):
        for h in range(5):
            q.add(h, float(h), 0.0)
    assert _pass(fifo, 0.0, lambda h: h != 0) == [0]
    assert _pass(backfill, 0.0, lambda h: h == 2) == [0, 1, 2, 3]  # 2 started, so 3 is the 2nd behind
    assert backfill.jobs == [0, 1, 3, 4]
    assert fifo.blocking(0) == 4


def test_scheduler_configuration_sets_the_backoff(tmp_path):
    cfg = tmp_path / "sched.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                   "podInitialBackoffSeconds: 2\npodMaxBackoffSeconds: 30\n")
    s = KubeQueueSettings.from_scheduler_config(cfg)
    assert (s.initial_backoff_s, s.max_backoff_s) == (2.0, 30.0)
    assert KubeQueueSettings.from_scheduler_config({"kind": "KubeSchedulerConfiguration"}) == KubeQueueSettings()
    with pytest.raises(ValueError, match="podMaxBackoffSeconds"):
        KubeQueueSettings.from_scheduler_config({"podMaxBackoffSeconds": "ten"})
    with pytest.raises(ValueError, match="unknown queue"):
        make_queue("lifo")


def _jobs(rows):
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "duration", "num_gpus", "model", "batch_size"])


def test_a_job_behind_an_unschedulable_head_starts_under_kube_but_not_fifo(model):
    """One node of 4 GPUs: a 2-GPU job runs; a 4-GPU job arrives (cannot start until it ends); a
    1-GPU job behind it starts at once under the kube queue and waits under strict FIFO."""
    jobs = _jobs([("a", 0.0, 1000.0, 2, "ResNet-50", 64), ("gang", 10.0, 500.0, 4, "ResNet-50", 64),
                  ("small", 20.0, 100.0, 1, "ResNet-50", 64)])
    cluster = ClusterSpec(nodes=1, gpus_per_node=4, gpu_mem_gib=24.0)

    def run(queue):
        sim = Simulator(jobs, make_policy("exclusive", model), model, cluster, SimSettings(queue=queue))
        return sim.run().jobs.set_index("job_id")

    kube, fifo = run("kube"), run("fifo")
    assert kube.loc["small", "start_s"] == pytest.approx(20.0)
    assert fifo.loc["small", "start_s"] >= fifo.loc["gang", "start_s"] >= 1000.0
    # the gang is retried when the first job ends (an event), after its backoff (1 s, long past)
    assert kube.loc["gang", "start_s"] == pytest.approx(1000.0)


def test_under_kube_a_waiting_job_holds_nobody_back(model):
    """The policy's jobs_behind (what its FIFO-blocking charge counts) is 0 under the kube queue and
    the number of jobs queued behind under FIFO; gpus_ahead under kube counts the older pending pods
    (c, tried while b waits for a's GPUs, has b's one GPU ahead of it)."""
    from iadeep.policy.exclusive import Exclusive

    seen: dict[str, list[int]] = {}

    class Recording(Exclusive):
        name = "recording-test"

        def place(self, job, view):
            seen.setdefault(self.queue_name, []).append(job.jobs_behind)
            seen.setdefault(self.queue_name + "-ahead", []).append(job.gpus_ahead)
            return super().place(job, view)

    jobs = _jobs([("a", 0.0, 1000.0, 4, "ResNet-50", 64), ("b", 10.0, 100.0, 1, "ResNet-50", 64),
                  ("c", 20.0, 100.0, 1, "ResNet-50", 64)])
    for queue in ("kube", "fifo"):
        policy = Recording(model)
        policy.queue_name = queue
        Simulator(jobs, policy, model, ClusterSpec(1, 4, 24.0), SimSettings(queue=queue)).run()
    assert set(seen["kube"]) == {0}  # a waiting pod blocks nobody
    assert set(seen["kube-ahead"]) == {0, 1}  # b's GPU is ahead of c; nothing is ahead of a or b
    assert max(seen["fifo"]) == 1  # b waits with c behind it


def test_kube_gpus_ahead_counts_older_and_higher_priority_pending_pods():
    """gpus_ahead of a candidate = GPUs of the pending pods kube-scheduler would try before it:
    unschedulable or backing-off pods with a higher priority or an earlier creation time, and the
    candidates of this pass that failed; pods that started do not count."""
    q = KubeQueue()
    q.add(0, created_s=0.0, now_s=0.0, gpus=8)
    q.add(1, created_s=1.0, now_s=1.0, gpus=2)
    q.add(2, created_s=2.0, now_s=2.0, gpus=4, priority=5)  # tried first: higher priority
    q.add(3, created_s=3.0, now_s=3.0, gpus=1)
    seen = {}
    for h in q.candidates(3.0):
        seen[h] = q.gpus_ahead(h)
        if h == 1:
            q.placed(h, 3.0)
        else:
            q.failed(h, 3.0)
    assert seen == {2: 0, 0: 4, 1: 12, 3: 12}  # 1 started, so 3 has only 2 (4) and 0 (8) ahead
    q.add(4, created_s=4.0, now_s=4.0, gpus=1)
    (h,) = list(q.candidates(4.0))  # the others wait unschedulable: only the new pod is active
    assert h == 4 and q.gpus_ahead(4) == 4 + 8 + 1
