"""The cluster DAGs against the local control plane (real kube-apiserver, kube-scheduler with the
``iadeep-scheduler`` profile, kube-controller-manager running the Jobs, kwok GPU nodes, our
extender and the GPU emulator as processes; :class:`iadeep.experiment._livecluster.LocalCluster`) and a
real user-space NFS server (nfs-ganesha from Debian's packages, started here on loopback).

The DAGs run in-process (``dag.test()``, deferrals included) and reach the cluster through the
Connection ``iadeep_cluster`` and the dataset folder through the Variable ``iadeep_dataset_dir``,
both given as ``AIRFLOW_CONN_*`` / ``AIRFLOW_VAR_*`` environment variables as a deployment would.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iadeep.testing import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]  # minutes on a loaded 2-core machine

NAMESPACE = "iadeep-jobs"
SPEEDUP = 1000.0
RUN = "rdags"


def _states(dag_id: str, run_id: str) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).all()
        return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in tis}


def _ok(dag_id: str, run) -> None:
    assert str(run.state).lower().endswith("success"), _states(dag_id, run.run_id)


@pytest.fixture(scope="module")
def cluster(controlplane_binaries, airflow_db, tmp_path_factory) -> Iterator[tuple]:
    """The local cluster with 2 kwok nodes x 4 GPUs, its extender and emulator; the Connection and Variable."""
    from iadeep.datasets import fetch
    from iadeep.experiment import ExperimentConfig, cluster_of
    from iadeep.experiment._livecluster import LocalCluster

    root = tmp_path_factory.mktemp("dags-cluster")
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IADEEP_CACHE_DIR", str(cache))
        throughputs = fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json"
        with LocalCluster(cluster_of(ExperimentConfig(nodes=2)), throughputs, workdir=root / "live") as lc:
            lc.prepare(RUN, "iadeep", seed=0, speedup=SPEEDUP)
            mp.setenv("AIRFLOW_CONN_IADEEP_CLUSTER", json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(lc.kubeconfig), "namespace": NAMESPACE}}))
            mp.setenv("AIRFLOW_VAR_IADEEP_DATASET_DIR", str(cache))
            mp.setenv("AIRFLOW_VAR_IADEEP_RUNS_DIR", str(root / "runs"))
            yield lc, cache


@pytest.fixture(scope="module")
def ganesha(cluster, tmp_path_factory) -> Iterator[tuple]:
    """nfs-ganesha exporting the dataset folder (``<cache>/datasets``) on 127.0.0.1:<free port>, NFSv4."""
    from iadeep.orchestration import NfsExport, ganesha_config

    binary = shutil.which("ganesha.nfsd")
    if binary is None:
        pytest.fail("ganesha.nfsd not found: `make node` installs nfs-ganesha (tools/node/deps.sh)")
    _, cache = cluster
    root = tmp_path_factory.mktemp("ganesha")
    export = NfsExport(path=str(cache / "datasets"), port=free_port())
    Path(export.path).mkdir(parents=True, exist_ok=True)
    (root / "ganesha.conf").write_text(ganesha_config(export, state_dir=root))
    log = root / "ganesha.log"
    proc = subprocess.Popen([binary, "-F", "-f", str(root / "ganesha.conf"), "-L", str(log), "-p", str(root / "ganesha.pid")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["nfs-ls", export.url()], capture_output=True, timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"nfs-ganesha did not serve {export.url()}:\n{log.read_text()[-3000:] if log.exists() else ''}")
            time.sleep(0.3)
        yield export, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_cluster_setup_creates_namespaces_labels_gpu_nodes_and_stores_the_profile(dagbag, cluster) -> None:
    from kubernetes import client

    lc, _ = cluster
    dag = dagbag.dags["iadeep_cluster_setup"]
    _ok(dag.dag_id, dag.test())
    core = client.CoreV1Api(lc.api)
    assert {NAMESPACE, "iadeep-system"} <= {n.metadata.name for n in core.list_namespace().items}
    nodes = core.list_node(label_selector=f"iadeep.io/run={RUN}").items
    assert len(nodes) == 2 and all(n.metadata.labels.get("iadeep.io/gpu-node") == "true" for n in nodes)
    cm = core.read_namespaced_config_map("iadeep-scheduler-config", "iadeep-system")
    assert "schedulerName: iadeep-scheduler" in cm.data["kube-scheduler-config.yaml"]
    _ok(dag.dag_id, dag.test())  # idempotent: a second run changes nothing and succeeds


def test_nfs_export_reads_back_and_the_claim_binds(dagbag, cluster, ganesha, tmp_path: Path) -> None:
    from kubernetes import client

    from iadeep.orchestration import check_export

    lc, cache = cluster
    export, _ = ganesha
    dag = dagbag.dags["iadeep_nfs"]
    conf = {"port": export.port, "ganesha_conf": str(tmp_path / "ganesha.conf")}
    _ok(dag.dag_id, dag.test(run_conf=conf))
    assert f'Path = "{export.path}";' in (tmp_path / "ganesha.conf").read_text()
    # a file written into the dataset folder reads back over NFS, byte for byte
    (Path(export.path) / "hello.txt").write_bytes(b"over nfs\n")
    out = subprocess.run(["nfs-cat", export.url("hello.txt")], capture_output=True, timeout=30, check=True)
    assert out.stdout == b"over nfs\n"
    assert "hello.txt" in check_export(export)["listing"]
    core = client.CoreV1Api(lc.api)
    pvc = core.read_namespaced_persistent_volume_claim("iadeep-datasets", NAMESPACE)
    assert pvc.status.phase == "Bound" and pvc.spec.volume_name == "iadeep-datasets"
    pv = core.read_persistent_volume("iadeep-datasets")
    assert (pv.spec.nfs.server, pv.spec.nfs.path) == ("127.0.0.1", export.pseudo)

    wrong = dag.test(run_conf={**conf, "port": free_port()})  # nobody serves there: verify_export fails
    states = _states(dag.dag_id, wrong.run_id)
    assert states["verify_export"] == "failed" and states.get("volume") != "success", states


def test_submit_trace_jobs_are_placed_by_the_real_scheduler_and_complete(dagbag, cluster, tmp_path: Path) -> None:
    from kubernetes import client

    from iadeep.orchestration import NfsExport, apply_volume

    lc, _ = cluster
    apply_volume(lc.api, NfsExport(path="/unused"), name="iadeep-datasets", namespace=NAMESPACE)  # as iadeep_nfs leaves it
    dag = dagbag.dags["iadeep_submit_trace"]
    run = dag.test(run_conf={"jobs": 8, "nodes": 2, "target_load": 1.0, "speedup": SPEEDUP, "run": "sub1",
                             "out": str(tmp_path / "out")})
    _ok(dag.dag_id, run)
    batch, core = client.BatchV1Api(lc.api), client.CoreV1Api(lc.api)
    jobs = batch.list_namespaced_job(NAMESPACE, label_selector="iadeep.io/run=sub1").items
    assert len(jobs) == 8
    for job in jobs:
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job.metadata.name) and len(job.metadata.name) <= 63
        assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []), job.metadata.name
        assert float(job.metadata.annotations["iadeep.io/submit-time"]) > 0
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="iadeep.io/run=sub1").items
    assert len(pods) == 8
    for pod in pods:
        assert pod.spec.scheduler_name == "iadeep-scheduler"
        assert pod.spec.node_name and pod.spec.node_name.startswith(f"{RUN}-")  # placed on a kwok GPU node
        req = pod.spec.containers[0].resources.requests
        assert int(req["iadeep.io/gpu-mem"]) >= 1 and int(req["iadeep.io/gpu-count"]) >= 1
        assert [v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim] == ["iadeep-datasets"]
        assert pod.metadata.labels["iadeep.io/run"] == "sub1"
        assert "iadeep.io/emulated-end" in pod.metadata.annotations  # the emulator ran it to the end
    table = json.loads((tmp_path / "out" / "jobs.json").read_text())
    assert len(table) == 8 and {r["state"] for r in table.values()} == {"Complete"}
    # submitted in arrival order, at least as far apart as the trace's gaps / speedup allow
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    submits = [table[p["name"]]["submit"] for p in plan]
    assert all(b >= a - 1e-3 for a, b in zip(submits, submits[1:]))
    assert all(s >= p["due"] - 1e-3 for s, p in zip(submits, plan))


def test_wait_reads_job_conditions_failed_fails_and_no_pod_yet_is_not_finished(cluster) -> None:
    from airflow.sdk.exceptions import AirflowException
    from kubernetes import client

    from iadeep.orchestration import JobsFinishedTrigger, WaitJobsOperator

    lc, _ = cluster
    batch = client.BatchV1Api(lc.api)
    ref = {"kubeconfig": str(lc.kubeconfig), "context": None, "namespace": NAMESPACE}

    def job(name: str, run: str, **spec) -> dict:
        return {"metadata": {"name": name, "labels": {"iadeep.io/run": run}},
                "spec": {"backoffLimit": 0, **spec, "template": {"metadata": {"labels": {"iadeep.io/run": run}}, "spec": {
                    "restartPolicy": "Never", "nodeSelector": {"iadeep.io/none": "x"},
                    "containers": [{"name": "c", "image": "registry.invalid/x:0"}]}}}}

    async def first_event(trigger):
        async for event in trigger.run():
            return event.payload

    # a Job the cluster can never run: its deadline gives it the Failed condition
    batch.create_namespaced_job(NAMESPACE, job("never-fits", "wfail", activeDeadlineSeconds=1))
    event = asyncio.run(first_event(JobsFinishedTrigger(ref, "wfail", 1, time.time() + 60, poll_s=0.2)))
    assert event == {"status": "finished", "states": {"never-fits": "Failed"}}
    with pytest.raises(AirflowException, match="never-fits"):
        WaitJobsOperator(task_id="w", cluster=ref, run_label="wfail", expected=1).finished({}, event)
    # a suspended Job has no pod: not finished (no error), until the deadline
    batch.create_namespaced_job(NAMESPACE, job("no-pod-yet", "wsusp", suspend=True))
    event = asyncio.run(first_event(JobsFinishedTrigger(ref, "wsusp", 1, time.time() + 2, poll_s=0.2)))
    assert event == {"status": "timeout", "states": {"no-pod-yet": "Running"}}
    with pytest.raises(AirflowException, match="not finished by the deadline"):
        WaitJobsOperator(task_id="w2", cluster=ref, run_label="wsusp", expected=1).finished({}, event)


def test_experiment_backend_kubernetes_end_to_end(dagbag, controlplane_binaries, airflow_db, real_data, tmp_path: Path) -> None:
    dag = dagbag.dags["iadeep_experiment"]
    out = tmp_path / "exp"
    run = dag.test(run_conf={"backend": "kubernetes", "jobs": 6, "nodes": 2, "policies": ["iadeep"], "speedup": SPEEDUP,
                             "out": str(out)})
    states = _states(dag.dag_id, run.run_id)
    _ok(dag.dag_id, run)
    assert states["run_kubernetes"] == "success" and states["report"] == "success", states
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["backend"] == "kubernetes" and list(summary["policies"]) == ["iadeep"]
    metrics = json.loads((out / "metrics-iadeep.json").read_text())
    assert metrics["backend"] == "kubernetes" and metrics["failed_jobs"] == 0 and metrics["reservations_left"] == 0
    for f in ("report.md", "jct_cdf.png", "jobs-iadeep.csv"):
        assert (out / f).stat().st_size > 0, f
