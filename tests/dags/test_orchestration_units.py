"""Units of iadeep.orchestration that need no cluster: Job names, submission plans, NFS and rollout manifests."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from iadeep.orchestration import job_name, plan_submissions, render, volume_manifests
from iadeep.orchestration._nfs import NfsExport, ganesha_config

DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, 10**6),
       job_id=st.one_of(st.text(max_size=200), st.from_regex(r"[A-Za-z0-9_./ -]{0,120}", fullmatch=True), st.integers(),
                        st.floats(allow_nan=True)))
@example(index=7, job_id="application_1506638472019_" + "x" * 80)  # a Philly-style id, too long as it is
@example(index=3, job_id="--Job--")
def test_job_names_are_dns1123_labels_for_any_trace_id(index, job_id) -> None:
    name = job_name(index, job_id)
    assert DNS1123.fullmatch(name) and len(name) <= 63, name
    assert name.startswith(f"j-{index:05d}")  # the index keeps ids that clean alike apart


def test_plan_orders_by_arrival_scales_gaps_and_mounts_the_claim() -> None:
    wl = pd.DataFrame({"job_id": ["b/2", "A_1", "c"], "submit_time": [100.0, 0.0, 50.0], "duration": [60.0, 30.0, 10.0],
                       "num_gpus": [2, 1, 1], "model": ["ResNet-18", "LM", "ResNet-50"], "batch_size": [64, 20, 32]})
    plan = plan_submissions(wl, [3.2, 1.0, 7.0], namespace="ns", run="r1", speedup=10.0, t0=1000.0, dataset_claim="data")
    assert [p["job_id"] for p in plan] == ["A_1", "c", "b/2"]
    assert [p["due"] for p in plan] == [1000.0, 1005.0, 1010.0]
    last = plan[-1]["manifest"]
    pod = last["spec"]["template"]["spec"]
    assert pod["schedulerName"] == "iadeep-scheduler"
    assert pod["containers"][0]["resources"]["requests"] == {"iadeep.io/gpu-mem": "8", "iadeep.io/gpu-count": "2"}
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "data", "readOnly": True}
    assert last["metadata"]["labels"]["iadeep.io/run"] == "r1" and last["metadata"]["namespace"] == "ns"
    assert "nodeSelector" not in pod
    with pytest.raises(ValueError, match="speedup"):
        plan_submissions(wl, [1.0] * 3, namespace="ns", run="r", speedup=0, t0=0)
    with pytest.raises(ValueError, match="memory estimates"):
        plan_submissions(wl, [1.0], namespace="ns", run="r", speedup=1, t0=0)


def test_nfs_config_and_volume_manifests(tmp_path) -> None:
    export = NfsExport(path=str(tmp_path), port=20490)
    conf = ganesha_config(export, state_dir=tmp_path / "state")
    assert f'Path = "{tmp_path}";' in conf and "Bind_addr = 127.0.0.1;" in conf and "NFS_Port = 20490;" in conf
    assert export.url("a/b") == "nfs://127.0.0.1/datasets/a/b?version=4&nfsport=20490"
    assert NfsExport(path="/x").url() == "nfs://127.0.0.1/datasets/?version=4"
    pv, pvc = volume_manifests(export, name="d", namespace="ns")
    assert pv["spec"]["nfs"] == {"server": "127.0.0.1", "path": "/datasets", "readOnly": True}
    assert pvc["spec"]["volumeName"] == "d" and pvc["spec"]["storageClassName"] == pv["spec"]["storageClassName"] == ""


def test_rollout_renders_only_the_chosen_components_with_the_tag() -> None:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl not found (kustomize is built into it)")
    docs = render(["deviceplugin"], tag="9.9.9")
    names = {((d["metadata"].get("labels") or {}).get("app.kubernetes.io/name")) for d in docs}
    assert "iadeep-deviceplugin" in names and not names & {"iadeep-coordinator", "iadeep-tuner", "iadeep-extender"}
    images = [c["image"] for d in docs if d["kind"] == "DaemonSet" for c in d["spec"]["template"]["spec"]["containers"]]
    assert images == ["ghcr.io/iadeep/iadeep:9.9.9"]
    ext = render(["extender"], tag="1.2.3")
    assert {"Deployment"} <= {d["kind"] for d in ext}
    assert any(d["kind"] == "ConfigMap" and d["metadata"]["name"] == "iadeep-scheduler-config" for d in ext)
    with pytest.raises(ValueError, match="unknown components"):
        render(["scheduler-of-doom"])


def test_tasks_reach_the_cluster_through_the_providers_hook_with_every_connection_field(monkeypatch, tmp_path) -> None:
    """``api_for`` builds the client with the cncf-kubernetes provider's ``KubernetesHook``: the
    Connection's context and inline ``kube_config`` (which the kubeconfig-file path cannot read)
    are honoured, and the process-wide default configuration is left alone."""
    import json

    import yaml
    from kubernetes import client

    from iadeep.orchestration._airflow import api_for, cluster_ref

    def kubeconfig(current: str) -> dict:
        return {"apiVersion": "v1", "kind": "Config", "current-context": current,
                "clusters": [{"name": n, "cluster": {"server": f"https://127.0.0.{i}:64{i}3"}} for i, n in ((1, "a"), (2, "b"))],
                "users": [{"name": "u", "user": {"token": "test-token"}}],
                "contexts": [{"name": f"c{n}", "context": {"cluster": n, "user": "u"}} for n in ("a", "b")]}

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("ca")))
    before = client.Configuration.get_default_copy().host
    monkeypatch.setenv("AIRFLOW_CONN_IADEEP_CLUSTER", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(path), "cluster_context": "cb", "namespace": "ns1"}}))
    ref = cluster_ref()
    assert ref == {"kubeconfig": str(path), "context": "cb", "namespace": "ns1", "conn_id": "iadeep_cluster"}
    assert api_for(ref).configuration.host == "https://127.0.0.2:6423"  # the Connection's context, not current-context
    assert api_for(ref, hook=False).configuration.host == "https://127.0.0.2:6423"  # the triggers' path agrees
    monkeypatch.setenv("AIRFLOW_CONN_IADEEP_CLUSTER", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeconfig("ca"))}}))
    assert api_for(cluster_ref()).configuration.host == "https://127.0.0.1:6413"
    assert client.Configuration.get_default_copy().host == before
