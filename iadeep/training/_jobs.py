"""Kubernetes Jobs for trace jobs: a pure function from (job, settings) to a ``V1Job``.

The trace-submission and experiment steps call :func:`render_job`; it builds the object with the
official client's models (their setters reject missing required fields), so what it returns is
what ``BatchV1Api.create_namespaced_job`` sends. :func:`job_manifest` gives the plain dict.

The pod:

* ``schedulerName: iadeep-scheduler`` (configurable): kube-scheduler with our extender places it;
* requests the extended resources the extender manages: ``iadeep.io/gpu-mem`` (GiB, rounded up)
  and ``iadeep.io/gpu-count`` (1), and carries the ``iadeep.io/model`` (Gavel family),
  ``iadeep.io/batch-size`` and, when known, ``iadeep.io/duration-s`` annotations it reads;
* learns its own name, namespace and UID through the downward API (``IADEEP_POD_NAME``,
  ``IADEEP_POD_NAMESPACE``, ``IADEEP_POD_UID``), the identity it reports under;
* mounts the dataset volume (NFS or hostPath, read-only) at ``/data`` and reads
  ``/data/<dataset>``, the layout ``iadeep datasets fetch`` makes under ``<cache>/datasets``, so
  an NFS export of a registry cache's ``datasets`` folder is enough;
* checkpoints to ``/checkpoint``: an ``emptyDir`` by default (it survives container restarts,
  ``restartPolicy: OnFailure``), or a hostPath/NFS folder per job to survive pod replacement.

GPU memory per job: the estimate of :func:`iadeep.interference.memory_gib` for the workload's
Gavel family at its batch size (the same estimate the simulator and the extender's defaults use;
its constants and their sources are in :mod:`iadeep.interference._memory`). It is an estimate,
not a measurement on our GPUs: ``iadeep profile`` on a CUDA device records the peak memory each
(model, batch size) actually allocated, and ``mem_gib=`` overrides the estimate.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from kubernetes import client
from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep.interference import memory_gib
from iadeep.jobtypes import JobType
from iadeep.podspec import ANNOTATION_BATCH_SIZE, ANNOTATION_DURATION, ANNOTATION_MODEL, GPU_COUNT_RESOURCE, GPU_MEM_RESOURCE
from iadeep.training._spec import defaults_of

__all__ = ["VolumeSettings", "JobTemplateSettings", "render_job", "render_trace_jobs", "job_manifest", "job_name",
           "DATA_MOUNT", "CHECKPOINT_MOUNT"]

DATA_MOUNT = "/data"
CHECKPOINT_MOUNT = "/checkpoint"
_DNS1123 = re.compile(r"[^a-z0-9-]+")


class VolumeSettings(BaseModel):
    """A volume: ``kind`` ``"nfs"`` (``server`` and ``path``), ``"hostPath"`` (``path``) or ``"emptyDir"``.

    Attributes:
        kind: ``nfs``, ``hostPath`` or ``emptyDir``.
        server: the NFS server (``nfs`` only).
        path: the exported folder (``nfs``) or the node's folder (``hostPath``).
    """

    kind: Literal["nfs", "hostPath", "emptyDir"] = "hostPath"
    server: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> "VolumeSettings":
        if self.kind == "nfs" and not (self.server and self.path):
            raise ValueError("an nfs volume needs server and path")
        if self.kind == "hostPath" and not self.path:
            raise ValueError("a hostPath volume needs path")
        return self


class JobTemplateSettings(BaseSettings):
    """Where the workload image and the data are; env ``IADEEP_WORKLOAD_...`` (``__`` nests).

    Attributes:
        registry: image registry host (and port), e.g. ``registry.local:5000``; empty: none.
        image: image name and tag (the ``workload`` target of ``benchmarks/workloads/Dockerfile``).
        namespace: namespace of the Jobs.
        scheduler_name: the kube-scheduler profile that calls the extender.
        datasets: volume holding one folder per dataset (``<dataset>/...``).
        checkpoints: ``emptyDir`` or a volume whose ``<job name>`` subfolder keeps the checkpoint.
        etcd_endpoints: passed to the job as ``IADEEP_ETCD_ENDPOINTS`` (empty: the job reports
            to its log only).
        etcd_prefix: the state store's key prefix, passed as ``IADEEP_ETCD_PREFIX``.
        backoff_limit: pod failures before the Job fails.
        image_pull_policy: ``IfNotPresent`` by default (images are built on the nodes here).
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_WORKLOAD_", env_nested_delimiter="__", extra="ignore")

    registry: str = ""
    image: str = "iadeep-workload:latest"
    namespace: str = "default"
    scheduler_name: str = "iadeep-scheduler"
    datasets: VolumeSettings = Field(default_factory=lambda: VolumeSettings(kind="hostPath", path="/var/lib/iadeep/datasets"))
    checkpoints: VolumeSettings = Field(default_factory=lambda: VolumeSettings(kind="emptyDir"))
    etcd_endpoints: str = ""
    etcd_prefix: str = "/iadeep"
    backoff_limit: int = Field(3, ge=0)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"

    @property
    def image_ref(self) -> str:
        return f"{self.registry.rstrip('/')}/{self.image}" if self.registry else self.image


def job_name(job_id: str | int, model: str) -> str:
    """A DNS-1123 name ``iadeep-<model>-<job id>`` of at most 63 characters."""
    name = _DNS1123.sub("-", f"iadeep-{model}-{job_id}".lower()).strip("-")
    return name[:63].rstrip("-")


def _volume(name: str, v: VolumeSettings, subfolder: str | None = None) -> client.V1Volume:
    if v.kind == "emptyDir":
        return client.V1Volume(name=name, empty_dir=client.V1EmptyDirVolumeSource())
    path = v.path if subfolder is None else f"{v.path.rstrip('/')}/{subfolder}"  # type: ignore[union-attr]
    if v.kind == "nfs":
        return client.V1Volume(name=name, nfs=client.V1NFSVolumeSource(server=v.server, path=path))
    return client.V1Volume(name=name, host_path=client.V1HostPathVolumeSource(path=path, type="DirectoryOrCreate" if subfolder else "Directory"))


def render_job(
    job_id: str | int,
    model: str,
    batch_size: int | None = None,
    *,
    settings: JobTemplateSettings | None = None,
    duration_s: float | None = None,
    max_steps: int | None = None,
    mem_gib: float | None = None,
) -> client.V1Job:
    """The Kubernetes Job that trains trace job ``job_id`` with workload ``model``.

    Args:
        job_id: the trace job's id (part of the Job's name).
        model: workload name (``vgg16``, ``resnet50``, ``squeezenet``, ``lstm``, ``neumf``).
        batch_size: starting batch size; default the workload's.
        settings: image, volumes, scheduler; default read from the environment.
        duration_s: expected run time alone on a GPU (s), for the ``iadeep`` policy.
        max_steps: stop after this many steps (trace replays that cap a job's work).
        mem_gib: GPU memory to request (GiB); default the documented estimate.

    Raises:
        ValueError: unknown model, non-positive batch size, duration or memory.
    """
    d = defaults_of(model)
    settings = settings or JobTemplateSettings()
    bs = batch_size or d.batch_size
    if bs < 1:
        raise ValueError(f"batch size must be >= 1, got {bs}")
    mem = memory_gib(JobType(d.gavel_family, bs)) if mem_gib is None else mem_gib
    if not mem > 0 or (duration_s is not None and not duration_s > 0):
        raise ValueError("mem_gib and duration_s must be > 0")
    name = job_name(job_id, model)
    args = ["bench-job", model, "--batch-size", str(bs), "--data-dir", f"{DATA_MOUNT}/{d.dataset}",
            "--checkpoint-dir", CHECKPOINT_MOUNT, "--mem-gib", f"{mem:g}"]
    if max_steps is not None:
        args += ["--max-steps", str(max_steps)]

    def field_env(var: str, path: str) -> client.V1EnvVar:
        return client.V1EnvVar(name=var, value_from=client.V1EnvVarSource(field_ref=client.V1ObjectFieldSelector(field_path=path)))

    env = [field_env("IADEEP_POD_NAME", "metadata.name"), field_env("IADEEP_POD_NAMESPACE", "metadata.namespace"),
           field_env("IADEEP_POD_UID", "metadata.uid")]
    if settings.etcd_endpoints:
        env += [client.V1EnvVar(name="IADEEP_ETCD_ENDPOINTS", value=settings.etcd_endpoints),
                client.V1EnvVar(name="IADEEP_ETCD_PREFIX", value=settings.etcd_prefix)]
    units = str(math.ceil(mem))
    container = client.V1Container(
        name="train", image=settings.image_ref, image_pull_policy=settings.image_pull_policy,
        command=["iadeep"], args=args, env=env,
        resources=client.V1ResourceRequirements(limits={GPU_MEM_RESOURCE: units, GPU_COUNT_RESOURCE: "1"},
                                                requests={GPU_MEM_RESOURCE: units, GPU_COUNT_RESOURCE: "1"}),
        volume_mounts=[client.V1VolumeMount(name="datasets", mount_path=DATA_MOUNT, read_only=True),
                       client.V1VolumeMount(name="checkpoint", mount_path=CHECKPOINT_MOUNT)])
    annotations = {ANNOTATION_MODEL: d.gavel_family, ANNOTATION_BATCH_SIZE: str(bs), "iadeep.io/workload": model}
    if duration_s is not None:
        annotations[ANNOTATION_DURATION] = f"{duration_s:.10g}"  # whole seconds of multi-day jobs kept
    labels = {"app.kubernetes.io/name": "iadeep-workload", "app.kubernetes.io/component": model, "iadeep.io/job-id": name[-63:]}
    pod = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels, annotations=annotations),
        spec=client.V1PodSpec(
            scheduler_name=settings.scheduler_name, restart_policy="OnFailure", containers=[container],
            volumes=[_volume("datasets", settings.datasets),
                     _volume("checkpoint", settings.checkpoints, None if settings.checkpoints.kind == "emptyDir" else name)]))
    return client.V1Job(
        api_version="batch/v1", kind="Job",
        metadata=client.V1ObjectMeta(name=name, namespace=settings.namespace, labels=labels, annotations=annotations),
        spec=client.V1JobSpec(template=pod, backoff_limit=settings.backoff_limit))


def render_trace_jobs(jobs: Any, settings: JobTemplateSettings | None = None) -> list[client.V1Job]:
    """The Jobs of a job table (:mod:`iadeep.traces` schema, e.g. the ``iadeep`` mix's workload).

    Each row's ``app`` is the workload (``vgg16``, ...), ``batch_size`` its starting batch size
    and ``duration`` its run time alone (s). Multi-GPU rows are refused: the workloads train on
    one GPU.

    Args:
        jobs: a ``pandas.DataFrame`` with ``job_id``, ``app``, ``batch_size``, ``duration``, ``num_gpus``.
        settings: as for :func:`render_job`.

    Raises:
        ValueError: a row whose app is not a workload, or that needs more than one GPU (the job
            id is named).
    """
    settings = settings or JobTemplateSettings()
    out = []
    for row in jobs.itertuples(index=False):
        if int(row.num_gpus) != 1:
            raise ValueError(f"job {row.job_id}: needs {row.num_gpus} GPUs; the training workloads use one")
        try:
            defaults_of(str(row.app))
        except ValueError as exc:
            raise ValueError(f"job {row.job_id}: {exc}") from None
        out.append(render_job(row.job_id, str(row.app), int(row.batch_size), settings=settings, duration_s=float(row.duration)))
    return out


def job_manifest(job: client.V1Job) -> dict[str, Any]:
    """The Job as the plain JSON-ready dict the API server receives (camelCase keys)."""
    return client.ApiClient().sanitize_for_serialization(job)
