"""A 16-GPU trace job on 4-GPU nodes, live: the live backend makes it an Indexed Job of 4 pods of 4
GPUs (with its headless Service and rendezvous), the real kube-scheduler and our extender place the
4 members together, one per node, the GPU emulator runs them, and the run reads the gang back as
one job (the local control plane with kwok nodes; the extender and emulator as processes)."""

from __future__ import annotations

import pandas as pd
import pytest

from iadeep.experiment._live import LiveSettings, run_live_policy
from iadeep.experiment._livecluster import LocalCluster
from iadeep.interference import InterferenceModel
from iadeep.sim import ClusterSpec
from iadeep.state import EtcdStateStore, StateSettings

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")


def test_a_16_gpu_trace_job_runs_live_as_4_pods_placed_together(controlplane_binaries, throughputs_path, tmp_path):
    cluster = ClusterSpec(4, 4, 16.0)
    workload = pd.DataFrame({"job_id": ["g16", "solo"], "submit_time": [0.0, 600.0], "duration": [1200.0, 600.0],
                             "num_gpus": [16, 1], "model": ["ResNet-18", "ResNet-18"], "batch_size": [16, 16]})
    model = InterferenceModel.from_file(throughputs_path)
    with LocalCluster(cluster, throughputs_path, workdir=tmp_path / "live", prometheus=False) as lc:
        run = "rgang0"
        prefix = lc.prepare(run, "iadeep", seed=0, speedup=200.0)
        store = EtcdStateStore(StateSettings(endpoints=[lc.etcd.endpoint], prefix=prefix))
        try:
            result, metrics = run_live_policy(lc.api, workload, model, cluster, policy="iadeep", run=run,
                                              settings=LiveSettings(speedup=200.0), store=store)
        finally:
            store.close()
        core = client.CoreV1Api(lc.api)
        ns = metrics["namespace"]
        pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.labels.get("iadeep.io/gang")]
        services = core.list_namespaced_service(ns).items
    assert metrics["failed_jobs"] == 0 and metrics["reservations_left"] == 0
    assert len(pods) == 4 and all(p.status.phase == "Succeeded" for p in pods)
    assert sorted(p.spec.node_name for p in pods) == sorted(f"{run}-{n}" for n in cluster.node_names())
    ranks = sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert ranks == ["0", "1", "2", "3"]
    (svc,) = [s for s in services if s.metadata.name == pods[0].spec.subdomain]
    assert svc.spec.cluster_ip == "None"
    j = result.jobs.set_index("job_id")
    placement = j.loc["g16", "placement"].split(";")
    assert len(placement) == 16 and len({p.split("/")[0] for p in placement}) == 4
    # the gang runs as one job: its 4 members start together (within the bind's permit wait)
    assert j.loc["g16", "start_s"] < j.loc["g16", "end_s"] and j.loc["solo", "end_s"] > 0
