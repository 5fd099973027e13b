"""The kubernetes backend on a user's cluster (``--kubeconfig``): the local control plane set up as
a user's cluster would be (our extender behind the ``iadeep-scheduler`` profile, the GPU emulator
for its kwok nodes, etcd), and the experiment given only its kubeconfig and ``IADEEP_ETCD_*``, as
a user would: it starts nothing, pins no nodes, and reads every job's times back."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from iadeep.experiment import ExperimentConfig
from iadeep.experiment._livecluster import LocalCluster
from iadeep.experiment._steps import build_workload, cluster_of, fetch_inputs, run_live, write_report

pytestmark = pytest.mark.slow

# The slice holds a job of about 60 h: at 500x the replay took 8 min of the suite; nothing here
# depends on the speedup (the parity figures live in tests/live/test_live_backend.py).
SPEEDUP = 5000.0


def test_a_users_kubeconfig_runs_the_policy_its_extender_runs(controlplane_binaries, dataset_cache, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    base = ExperimentConfig(jobs=8, policies=("antman",), nodes=1, target_load=1.0, backend="kubernetes", speedup=SPEEDUP,
                            out=str(tmp_path / "out"))
    paths = fetch_inputs(base, progress=False)
    workload, _ = build_workload(base, paths["trace"], paths["throughputs"])
    with LocalCluster(cluster_of(base), Path(paths["throughputs"]), workdir=tmp_path / "cluster") as lc:
        # "the user's cluster": services deployed for antman, nodes labelled for that deployment
        prefix = lc.prepare("usercluster", "antman", seed=0, speedup=SPEEDUP)
        monkeypatch.setenv("IADEEP_ETCD_ENDPOINTS", lc.etcd.endpoint)
        monkeypatch.setenv("IADEEP_ETCD_PREFIX", prefix)
        cfg = replace(base, kubeconfig=str(lc.kubeconfig))
        metrics = run_live(cfg, workload, paths["throughputs"])["antman"]
        write_report(cfg)
        procs_alive = [p.proc.poll() is None for p in lc._procs]
    assert all(procs_alive)  # the run used the deployed services, it stopped none of them
    assert metrics["reservations_left"] == 0 and metrics["failed_jobs"] == 0
    assert metrics["kubeconfig"] == str(lc.kubeconfig)
    jobs = pd.read_csv(tmp_path / "out" / "jobs-antman.csv", dtype={"job_id": str})
    assert len(jobs) == len(workload) and jobs["end_s"].notna().all() and (jobs["end_s"] > jobs["start_s"]).all()
    assert all(isinstance(p, str) and "/" in p for p in jobs["placement"])  # every job ran on a node's GPU
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["config"]["kubeconfig"] == str(lc.kubeconfig)


def test_a_kubeconfig_needs_the_kubernetes_backend_and_one_policy(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(ValueError, match="kubernetes backend"):
        ExperimentConfig(kubeconfig=str(kc), policies=("antman",))
    with pytest.raises(ValueError, match="one policy"):
        ExperimentConfig(kubeconfig=str(kc), backend="kubernetes", policies=("antman", "iadeep"))
    with pytest.raises(ValueError, match="not a file"):
        ExperimentConfig(kubeconfig=str(tmp_path / "missing"), backend="kubernetes", policies=("antman",))
