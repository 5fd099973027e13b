"""Parity figures between two per-job tables, and the live backend's pure pieces (Job manifest,
results read back from Jobs and pods)."""

from __future__ import annotations

import pandas as pd
import pytest

from iadeep.experiment._compare import harness_overheads, parity, parity_table
from iadeep.experiment._live import gang_service_manifest, job_manifest, job_name, live_result
from iadeep.sim import ClusterSpec


def _table(rows):
    cols = ["job_id", "submit_s", "start_s", "end_s", "placement", "partners"]
    df = pd.DataFrame(rows, columns=cols)
    df["jct_s"] = df["end_s"] - df["submit_s"]
    return df


SIM = _table([("a", 0, 0, 100, "node-00/0", "b"), ("b", 10, 10, 110, "node-00/0", "a"),
              ("c", 20, 20, 60, "node-00/1", None)])


def test_identical_runs_have_perfect_parity():
    f = parity(SIM, SIM.copy())
    assert f["avg_jct_diff_rel"] == 0 and f["makespan_diff_rel"] == 0
    assert f["partners_match"] == 1 and f["pairs_identical"] == 1 and f["placement_match"] == 1


def test_parity_counts_changed_partners_and_slower_jobs():
    live = _table([("a", 0, 0, 150, "node-00/0", "c"), ("b", 10, 10, 110, "node-00/1", None),
                   ("c", 20, 20, 60, "node-00/0", "a")])
    f = parity(SIM, live)
    assert f["avg_jct_diff_rel"] == pytest.approx((150 + 100 + 40) / (100 + 100 + 40) - 1)
    assert f["partners_match"] == pytest.approx(0.0)  # a: {b} vs {c}; b: {a} vs {}; c: {} vs {a}
    assert (f["pairs_sim"], f["pairs_live"], f["pairs_common"], f["pairs_identical"]) == (1, 1, 0, 0.0)
    assert f["placement_match"] == pytest.approx(1 / 3)
    t = parity_table(SIM, live)
    assert list(t["jct_live_s"]) == [150, 100, 40]
    with pytest.raises(ValueError, match="different jobs"):
        parity(SIM, live.iloc[:2])


def test_job_manifest_asks_for_whole_gib_on_each_gpu():
    row = pd.Series({"job_id": "Philly_7/x", "duration": 3600.0, "num_gpus": 2, "model": "ResNet-50", "batch_size": 64})
    m = job_manifest(row, 7, namespace="ns", run="r1", mem_gib=5.2, speedup=500, submit_time_s=12.5)
    pod = m["spec"]["template"]
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {"iadeep.io/gpu-mem": "12", "iadeep.io/gpu-count": "2"}
    assert pod["spec"]["schedulerName"] == "iadeep-scheduler" and pod["spec"]["nodeSelector"] == {"iadeep.io/run": "r1"}
    ann = pod["metadata"]["annotations"]
    assert ann["iadeep.io/duration-s"] == "3600.000" and ann["iadeep.io/emulation-speedup"] == "500"
    assert ann["iadeep.io/emulated"] == "true" and ann["iadeep.io/job-id"] == "Philly_7/x"
    assert m["metadata"]["name"] == job_name(7, "Philly_7/x") == "j-00007-philly-7-x"
    assert m["spec"]["backoffLimit"] == 0
    assert "schedulingGates" not in pod["spec"] and m["metadata"]["annotations"]["iadeep.io/submit-time"] == "12.500000"
    # the live replay's Job: created ahead of its arrival, its pod gated until then (arrival on the pod)
    g = job_manifest(row, 7, namespace="ns", run="r1", mem_gib=5.2, speedup=500, gated=True)
    assert g["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "iadeep.io/arrival"}]
    assert "iadeep.io/submit-time" not in g["metadata"]["annotations"]


def test_a_job_wider_than_a_node_is_an_indexed_job_of_equal_pods_with_the_rendezvous():
    row = pd.Series({"job_id": "g16", "duration": 600.0, "num_gpus": 16, "model": "ResNet-50", "batch_size": 64})
    m = job_manifest(row, 3, namespace="ns", run="r1", mem_gib=5.2, speedup=500, pod_gpus=4)
    name = m["metadata"]["name"]
    spec = m["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (4, 4, "Indexed")
    pod = spec["template"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"] == {"iadeep.io/gpu-mem": "24", "iadeep.io/gpu-count": "4"}  # 6 GiB x 4 per pod
    assert pod["metadata"]["labels"]["iadeep.io/gang"] == name
    assert pod["metadata"]["annotations"]["iadeep.io/gang-size"] == "4"
    assert pod["spec"]["subdomain"] == name
    env = {e["name"]: e for e in c["env"]}
    assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}" and env["WORLD_SIZE"]["value"] == "4"
    assert env["MASTER_PORT"]["value"] == "29500"
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    svc = gang_service_manifest(m)
    assert svc["metadata"]["name"] == name and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}
    # a job that fits a node stays one pod, without a gang or a Service
    one = job_manifest(row, 3, namespace="ns", run="r1", mem_gib=5.2, speedup=500, pod_gpus=16)
    assert (one["spec"]["completions"], "completionMode" in one["spec"]) == (1, False)
    assert "iadeep.io/gang" not in one["spec"]["template"]["metadata"]["labels"]
    assert "env" not in one["spec"]["template"]["spec"]["containers"][0] and gang_service_manifest(one) is None
    with pytest.raises(ValueError, match="pod_gpus=3 does not divide num_gpus=16"):
        job_manifest(row, 3, namespace="ns", run="r1", mem_gib=5.2, speedup=500, pod_gpus=3)


def test_live_result_reads_a_gang_as_one_job_from_its_first_start_to_its_last_end(model):
    jobs = pd.DataFrame({"job_id": ["g"], "submit_time": [100.0], "duration": [1000.0], "num_gpus": [4],
                         "model": ["ResNet-50"], "batch_size": [64]})

    def member(node, start, end):
        return {"metadata": {"annotations": {"iadeep.io/job-id": "g", "iadeep.io/gpu-index": "0,1",
                                             "iadeep.io/emulated-start": str(start), "iadeep.io/emulated-end": str(end)},
                             "ownerReferences": [{"kind": "Job", "name": "job-g"}]},
                "spec": {"nodeName": f"r1-{node}"}}

    pods = [member("node-01", 1000.1, 1011.0), member("node-00", 1000.2, 1010.0)]
    jobs_doc = [{"metadata": {"annotations": {"iadeep.io/job-id": "g", "iadeep.io/submit-time": "1000.0"}}}]
    result, _ = live_result(jobs, jobs_doc, pods, {"job-g": ("Complete", 1011.5)}, cluster=ClusterSpec(2, 2, 24.0),
                            policy="p", run="r1", t0=1000.0, submit0=100.0, speedup=100.0, model=model)
    j = result.jobs.set_index("job_id").loc["g"]
    assert j["start_s"] == pytest.approx(100.0 + 0.1 * 100) and j["end_s"] == pytest.approx(100.0 + 11.0 * 100)
    assert j["placement"] == "node-01/0;node-01/1;node-00/0;node-00/1"
    assert j["colocations"] == 0  # its own members are not partners


def test_live_result_converts_wall_times_and_finds_partners(model):
    jobs = pd.DataFrame({"job_id": ["a", "b"], "submit_time": [100.0, 200.0], "duration": [1000.0, 500.0],
                         "num_gpus": [1, 1], "model": ["ResNet-50", "ResNet-50"], "batch_size": [64, 64]})
    t0, speedup = 1000.0, 100.0

    def pod(jid, node, gpu, bind, start, end, **extra):
        return {"metadata": {"annotations": {"iadeep.io/job-id": jid, "iadeep.io/gpu-index": gpu,
                                             "iadeep.io/assume-time": str(int(bind * 1e9)),
                                             "iadeep.io/emulated-start": str(start), "iadeep.io/emulated-end": str(end),
                                             **extra},
                             "ownerReferences": [{"kind": "Job", "name": f"job-{jid}"}]},
                "spec": {"nodeName": f"r1-{node}"}}

    # a's arrival on its Job (created at its arrival), b's on its pod (gate removed at its arrival)
    jobs_doc = [{"metadata": {"annotations": {"iadeep.io/job-id": "a", "iadeep.io/submit-time": "1000.0"}}},
                {"metadata": {"annotations": {"iadeep.io/job-id": "b"}}}]
    pods = [pod("a", "node-00", "0", 1000.01, 1000.02, 1012.0),
            pod("b", "node-00", "0", 1001.01, 1001.02, 1007.0, **{"iadeep.io/submit-time": "1001.0"})]
    done = {"job-a": ("Complete", 1012.5), "job-b": ("Complete", 1007.5)}
    result, breakdown = live_result(jobs, jobs_doc, pods, done, cluster=ClusterSpec(1, 2, 24.0), policy="p", run="r1",
                                    t0=t0, submit0=100.0, speedup=speedup, model=model)
    j = result.jobs.set_index("job_id")
    assert j.loc["a", "submit_s"] == pytest.approx(100.0) and j.loc["b", "submit_s"] == pytest.approx(200.0)
    assert j.loc["a", "end_s"] == pytest.approx(100.0 + 12.0 * speedup)
    assert j.loc["a", "placement"] == "node-00/0" and j.loc["a", "partners"] == "b"
    assert j.loc["a", "colocations"] == 1 and j.loc["b", "colocations"] == 1
    assert breakdown["completion_lag_s_median"] == pytest.approx(0.5)
    assert breakdown["bind_latency_s_median"] == pytest.approx(0.01) and breakdown["start_lag_s_p90"] == pytest.approx(0.01)
    assert result.busy_gpu_seconds == pytest.approx((12.0 - 0.02) * speedup)


def test_harness_overheads_are_given_in_wall_and_emulated_seconds():
    metrics = {"speedup": 200.0, "submit_lag_s_median": 0.01, "submit_lag_s_p90": 0.5,
               "breakdown_s": {"bind_latency_s_median": 0.3, "start_lag_s_median": 0.1, "completion_lag_s_median": 1.5}}
    h = harness_overheads(metrics)
    assert h["submit_lag"] == pytest.approx({"wall_s_median": 0.01, "emulated_s_median": 2.0, "wall_s_p90": 0.5,
                                             "emulated_s_p90": 100.0})
    assert h["bind_latency"] == pytest.approx({"wall_s_median": 0.3, "emulated_s_median": 60.0})
    assert set(h) == {"submit_lag", "bind_latency", "start_lag", "completion_lag"}
