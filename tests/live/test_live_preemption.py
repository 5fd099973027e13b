"""Head-of-line preemption on the live system: a hand-made trace on the local control plane (one
kwok node of 4 emulated GPUs, the real kube-scheduler, our extender with preemption on, the GPU
emulator, kube-controller-manager running the Jobs).

The trace (emulated seconds): two 2-GPU LM gangs of 1 h hold the node's 4 GPUs from 0 s; at
1,200 s a 5-min ResNet-50 at batch 128 arrives (measured out of memory beside LM: it cannot share
a GPU with the gangs). It would wait 2,400 s for a free GPU, more than its own 300 s plus the 30-s
checkpoint: the policy preempts a gang (``preempt_unblocked``, as in the simulator under the
``kube`` queue; ``tests/core/test_core_robust.py`` has the same rule on a day-long trace). The
live system must then: evict the gang's pod (Eviction API), hold its GPUs for the head, replace
the pod without failing its Job (the Job's ``podFailurePolicy`` ignores ``DisruptionTarget``), and
resume the gang's work where it stopped (the emulator's checkpoint, keyed by the Job) once the head
has ended, paying the 30-s checkpoint cost.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from iadeep.experiment._live import LiveSettings, job_name, run_live_policy
from iadeep.experiment._livecluster import LocalCluster
from iadeep.interference import InterferenceModel
from iadeep.sim import ClusterSpec
from iadeep.state import EtcdStateStore, StateSettings

pytestmark = pytest.mark.slow

SPEEDUP = 200.0  # the gangs' hour is 18 s of wall time; one wall second of control-plane latency is 200 emulated s
HOUR = 3600.0
HEAD_AT, HEAD_S, CHECKPOINT_S = 1200.0, 300.0, 30.0


@pytest.fixture(scope="module")
def replay(controlplane_binaries, throughputs_path, tmp_path_factory):
    jobs = pd.DataFrame([
        {"job_id": "gang-a", "submit_time": 0.0, "duration": HOUR, "num_gpus": 2, "model": "LM", "batch_size": 5},
        {"job_id": "gang-b", "submit_time": 0.0, "duration": HOUR, "num_gpus": 2, "model": "LM", "batch_size": 5},
        {"job_id": "head", "submit_time": HEAD_AT, "duration": HEAD_S, "num_gpus": 1, "model": "ResNet-50", "batch_size": 128},
    ])
    model = InterferenceModel.from_file(throughputs_path, "v100")
    cluster = ClusterSpec(1, 4, 24.0)
    work = tmp_path_factory.mktemp("preempt")
    with LocalCluster(cluster, Path(throughputs_path), workdir=work) as lc:
        prefix = lc.prepare("rpre", "iadeep", seed=0, speedup=SPEEDUP, preemption=True)
        store = EtcdStateStore(StateSettings(endpoints=[lc.etcd.endpoint], prefix=prefix))
        try:
            result, metrics = run_live_policy(lc.api, jobs, model, cluster, policy="iadeep", run="rpre",
                                              settings=LiveSettings(speedup=SPEEDUP), store=store)
            checkpoints_left = [jid for i, jid in enumerate(jobs["job_id"])
                                if store.checkpoint(f"{metrics['namespace']}.{job_name(i, jid)}") is not None]
            from kubernetes import client

            runs = {}  # trace job -> emulated seconds its completing pod ran (start to end)
            for pod in client.CoreV1Api(lc.api).list_namespaced_pod(metrics["namespace"]).items:
                ann = pod.metadata.annotations or {}
                if "iadeep.io/emulated-end" in ann:
                    runs[ann["iadeep.io/job-id"]] = (float(ann["iadeep.io/emulated-end"]) - float(ann["iadeep.io/emulated-start"])) * SPEEDUP
        finally:
            store.close()
    return result.jobs.set_index("job_id"), metrics, checkpoints_left, runs


def test_the_head_preempts_a_gang_and_every_job_completes(replay):
    out, metrics, _, _ = replay
    assert metrics["failed_jobs"] == 0 and metrics["reservations_left"] == 0  # the evicted pod failed no Job
    assert metrics["replacement_pods"] == 1  # the gang's Job made a new pod
    assert out["end_s"].notna().all() and out["submit_s"].notna().all()
    assert int(out["evictions"].sum()) == 1 and out.loc["head", "evictions"] == 0
    # it started within the control plane's latency of its arrival, not at the gangs' end (3,600 s)
    assert out.loc["head", "start_s"] - out.loc["head", "submit_s"] < 0.25 * (HOUR - HEAD_AT)


def test_the_preempted_gang_resumes_its_work_after_the_head(replay):
    out, _, checkpoints_left, runs = replay
    victim = out.index[out["evictions"] == 1][0]
    other = "gang-b" if victim == "gang-a" else "gang-a"
    assert runs[other] == pytest.approx(HOUR, abs=0.02 * HOUR)
    # its replacement pod ran the work left at the eviction (the head's start, within the control
    # plane's latency: about HEAD_AT of its hour was done) plus the checkpoint cost; starting over
    # it would run the whole hour
    left = HOUR - (out.loc["head", "start_s"] - out.loc[victim, "start_s"]) + CHECKPOINT_S
    assert runs[victim] == pytest.approx(left, abs=0.05 * HOUR)
    assert out.loc[victim, "end_s"] - runs[victim] >= out.loc["head", "end_s"] - 1  # after the head (no shared GPU)
    assert out.loc[victim, "start_s"] < HEAD_AT  # its first start, its evicted pod's
    assert checkpoints_left == []  # deleted when the job completed
