"""Job templates: rendered with the Kubernetes client's models, and accepted by a real kube-apiserver."""

from __future__ import annotations

import pytest
from kubernetes import client

from iadeep.interference import memory_gib
from iadeep.jobtypes import JobType
from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    control_plane,
    control_plane_options,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
from iadeep.training import JobTemplateSettings, VolumeSettings, job_manifest, job_name, render_job, render_trace_jobs


def _nfs_settings(**kw) -> JobTemplateSettings:
    return JobTemplateSettings(registry="registry.local:5000", image="iadeep-workload:0.1",
                               datasets=VolumeSettings(kind="nfs", server="127.0.0.1", path="/export/datasets"), **kw)


def test_render_job_fields() -> None:
    job = render_job("philly-42", "resnet50", 64, settings=_nfs_settings(etcd_endpoints="http://127.0.0.1:2379"),
                     duration_s=3600, max_steps=100)
    m = job_manifest(job)
    spec = m["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert m["metadata"]["name"] == "iadeep-resnet50-philly-42" and m["kind"] == "Job"
    assert spec["schedulerName"] == "iadeep-scheduler" and spec["restartPolicy"] == "OnFailure"
    assert c["image"] == "registry.local:5000/iadeep-workload:0.1"
    units = str(int(-(-memory_gib(JobType("ResNet-50", 64)) // 1)))
    assert c["resources"]["limits"] == {"iadeep.io/gpu-mem": units, "iadeep.io/gpu-count": "1"}
    assert c["args"][:3] == ["bench-job", "resnet50", "--batch-size"] and c["args"][-2:] == ["--max-steps", "100"]
    assert "/data/cifar-100" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["IADEEP_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["IADEEP_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["IADEEP_ETCD_ENDPOINTS"]["value"] == "http://127.0.0.1:2379"
    annotations = m["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"iadeep.io/model": "ResNet-50", "iadeep.io/batch-size": "64", "iadeep.io/workload": "resnet50",
                           "iadeep.io/duration-s": "3600"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["datasets"]["nfs"] == {"server": "127.0.0.1", "path": "/export/datasets"}
    assert volumes["checkpoint"] == {"name": "checkpoint", "emptyDir": {}}
    mounts = {v["name"]: v for v in c["volumeMounts"]}
    assert mounts["datasets"]["readOnly"] is True and mounts["checkpoint"]["mountPath"] == "/checkpoint"
    # Round trip through the client's deserialiser gives the same object.
    assert client.ApiClient()._ApiClient__deserialize(m, "V1Job") == job


def test_defaults_and_host_path_checkpoints() -> None:
    settings = JobTemplateSettings(checkpoints=VolumeSettings(kind="hostPath", path="/var/lib/iadeep/ckpt"))
    m = job_manifest(render_job(7, "neumf", settings=settings))
    spec = m["spec"]["template"]["spec"]
    assert "--batch-size" in spec["containers"][0]["args"] and "1024" in spec["containers"][0]["args"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["checkpoint"]["hostPath"]["path"] == "/var/lib/iadeep/ckpt/iadeep-neumf-7"
    assert volumes["datasets"]["hostPath"] == {"path": "/var/lib/iadeep/datasets", "type": "Directory"}
    assert job_name("A_very/Long id " * 8, "squeezenet") == job_name("A_very/Long id " * 8, "squeezenet")[:63]
    assert len(job_name("x" * 100, "squeezenet")) <= 63


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IADEEP_WORKLOAD_REGISTRY", "reg.example:5000")
    monkeypatch.setenv("IADEEP_WORKLOAD_DATASETS__KIND", "nfs")
    monkeypatch.setenv("IADEEP_WORKLOAD_DATASETS__SERVER", "127.0.0.2")
    monkeypatch.setenv("IADEEP_WORKLOAD_DATASETS__PATH", "/srv/data")
    s = JobTemplateSettings()
    assert s.image_ref == "reg.example:5000/iadeep-workload:latest" and s.datasets.server == "127.0.0.2"


@pytest.mark.parametrize(("kwargs", "message"), [({"model": "alexnet"}, "unknown workload"),
                                                 ({"model": "lstm", "batch_size": -1}, "batch size must be >= 1"),
                                                 ({"model": "lstm", "duration_s": 0}, "must be > 0")])
def test_bad_jobs_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_job(1, **kwargs)
    with pytest.raises(ValueError, match="nfs volume needs server and path"):
        VolumeSettings(kind="nfs", path="/x")


@pytest.mark.slow
def test_job_is_created_on_the_control_plane(k8s_client, k8s_namespace) -> None:  # noqa: F811
    """The API server validates the Job; the Job controller makes its pod with our spec."""
    import time

    settings = _nfs_settings(namespace=k8s_namespace)
    job = render_job("cp-1", "squeezenet", 128, settings=settings, duration_s=600)
    created = client.BatchV1Api(k8s_client).create_namespaced_job(k8s_namespace, job)
    assert created.metadata.uid and created.spec.template.spec.scheduler_name == "iadeep-scheduler"
    core = client.CoreV1Api(k8s_client)
    deadline = time.monotonic() + 60
    pods = []
    while time.monotonic() < deadline and not pods:
        pods = core.list_namespaced_pod(k8s_namespace, label_selector="iadeep.io/job-id=iadeep-squeezenet-cp-1").items
        time.sleep(0.2)
    assert pods, "the Job controller made no pod"
    pod = pods[0]
    assert pod.spec.scheduler_name == "iadeep-scheduler"
    assert pod.spec.containers[0].resources.limits["iadeep.io/gpu-mem"] == job.spec.template.spec.containers[0].resources.limits["iadeep.io/gpu-mem"]
    assert pod.metadata.annotations["iadeep.io/model"] == "ResNet-18"
    assert {v.name for v in pod.spec.volumes} >= {"datasets", "checkpoint"}


def test_workload_dockerfile_matches_the_job_template() -> None:
    """No container runtime builds images here (no registry for a base image): check the recipe's
    shape against what the Job template runs and against the repository it copies from."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "benchmarks" / "workloads" / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+$", text, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\} AS workload$", text, re.M)
    for line in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for source in line.split():
            assert (root / source).exists(), source
    assert '".[workloads]" -c constraints.txt' in text
    assert 'ENTRYPOINT ["iadeep"]' in text
    container = render_job(1, "lstm").spec.template.spec.containers[0]
    assert container.command == ["iadeep"] and container.args[0] == "bench-job"


def test_trace_jobs_of_the_iadeep_mix(philly_path) -> None:  # noqa: ANN001
    """The iadeep mix's apps are the workloads: every single-GPU trace job renders."""
    from iadeep.traces import TraceOptions, load_trace

    table = load_trace("philly", philly_path, TraceOptions(n_jobs=40, max_gpus=1, mix="iadeep", seed=3))
    jobs = render_trace_jobs(table)
    assert len(jobs) == len(table) and len({j.metadata.name for j in jobs}) == len(jobs)
    for job, row in zip(jobs, table.itertuples(index=False)):
        meta = job.spec.template.metadata
        assert meta.annotations["iadeep.io/workload"] == row.app and meta.annotations["iadeep.io/model"] == row.model
        assert meta.annotations["iadeep.io/batch-size"] == str(row.batch_size)
        assert float(meta.annotations["iadeep.io/duration-s"]) == pytest.approx(row.duration)
    gavel = table.assign(app="ResNet-50")
    with pytest.raises(ValueError, match=r"job .*: unknown workload 'ResNet-50'"):
        render_trace_jobs(gavel)
