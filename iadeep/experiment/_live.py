"""The experiment on a live cluster: Jobs submitted at their arrival times, results read back.

:func:`run_live_policy` replays a job table against one policy on a Kubernetes cluster and
returns a :class:`~iadeep.sim.SimResult` with the simulator's columns, so that the report, the
plots and ``summary.json`` are the simulator backend's. Per trace job it creates one
``batch/v1`` Job (:func:`job_manifest`): scheduler ``iadeep-scheduler``, the GPU-memory request
(``iadeep.io/gpu-mem``, whole GiB: extended resources are integers), ``iadeep.io/gpu-count``, and
the annotations the extender and the emulator read (model, batch size, duration,
``iadeep.io/emulated``, speedup). The Job is created ``LiveSettings.ahead_s`` before its arrival
with its pod gated (those of the first ``ahead_s`` before the clock starts at ``t0``), and the
gate removed at ``t0 + (submit - first submit) / speedup`` wall seconds (:class:`~iadeep.experiment._replay.GatedSubmitter`: Job creation and the Job
controller's latency are off the arrival path). It waits for every Job to finish (a success or
failure condition, :func:`~iadeep.experiment.job_outcome`) through a watch (reopened until a
deadline), then reads the times back:

- submit: the wall time the pod's gate was removed (pod annotation ``iadeep.io/submit-time``,
  written with the removal; the API's timestamps have 1 s resolution, 1,000 emulated s at 1000x);
- start: the emulator's ``iadeep.io/emulated-start`` (when the GPUs started the work; the
  extender's ``iadeep.io/assume-time`` is the bind);
- end: the emulator's ``iadeep.io/emulated-end``;

and converts them to emulated seconds, ``submit_0 + (wall - t0) x speedup`` (:mod:`._readback`). Placement and
co-location partners come from the pods' ``iadeep.io/gpu-index`` and nodes (two jobs are
partners when their runs overlap on a GPU). At the end the reservations left in etcd are counted
(the extender releases each when its pod ends). The per-job overhead breakdown (submission lag,
bind latency, start lag, completion lag) goes to ``metrics-<policy>.json``.

The cluster around it: :class:`iadeep.experiment._livecluster.LocalCluster` (the default) or
:class:`~iadeep.experiment._livecluster.UserCluster` (a user's cluster).
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iadeep._host import HeldClock
from iadeep.experiment._readback import JOB_ID_ANNOTATION, live_result
from iadeep.experiment._replay import ARRIVAL_GATE, SUBMIT_ANNOTATION, GatedSubmitter, api_json, watch_jobs
from iadeep.interference import InterferenceModel
from iadeep.podspec import (
    ANNOTATION_GANG_INDEX, ANNOTATION_GANG_SIZE, ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_RANK, ENV_WORLD_SIZE, GANG_LABEL,
)
from iadeep.sim import ClusterSpec, SimResult

__all__ = ["LiveSettings", "TUNED_POLICIES", "gang_service_manifest", "job_manifest", "run_live_policy", "live_result"]

log = logging.getLogger("iadeep.experiment")

SCHEDULER = "iadeep-scheduler"
RENDEZVOUS_PORT = 29500
"""The gang's rendezvous port (``MASTER_PORT``; PyTorch's default)."""
RUN_LABEL = "iadeep.io/run"
TUNED_POLICIES = frozenset({"iadeep", "gandiva"})
"""Policies whose tuning the live system runs with the node coordinator (and the tuner): iadeep's
batch-size sessions and gandiva's profile of a packing (one round at the current sizes, its undo by
eviction; :func:`iadeep.coordinator.run_profile`). The others' tuning in the simulator is the
default no-op."""


@dataclass(frozen=True)
class LiveSettings:
    """How a live run goes.

    Attributes:
        speedup: emulated seconds per wall second (1000: an hour of trace in 3.6 s).
        timeout_s: wall-clock bound of one policy's run (submission and completion); ``None``:
            the trace span plus the total work over the cluster's GPUs plus the longest job, at
            ``speedup``, x 3 + 120 s.
        namespace: namespace of the Jobs (created; a fresh one per policy when ``None``).
        reservations_wait_s: how long to wait at the end for the extender to release every reservation.
        ahead_s: how long (wall s) before its arrival a Job is created, its pod gated until the
            arrival (:class:`~iadeep.experiment._replay.GatedSubmitter`); the Jobs arriving in
            the first ``ahead_s`` are created, and their pods seen, before the arrival clock
            starts (``prefill_s`` in the metrics).
        clock_file: the run's shared clock (:class:`iadeep.emulator.HeldClock`, the GPU emulator
            reads it too), held while kube-scheduler decides an opened pod (at most
            ``hold_max_s`` wall seconds a pod) and ``settle_s`` after each pod that ends; times
            are then read on it, not the wall. ``None``: wall time.
    """

    speedup: float = 1000.0
    timeout_s: float | None = None
    namespace: str | None = None
    reservations_wait_s: float = 10.0
    ahead_s: float = 10.0
    clock_file: Path | None = None
    hold_max_s: float = 2.0
    settle_s: float = 0.3


def job_name(index: int, job_id: str) -> str:
    """A DNS-1123 Job name for trace job ``job_id`` (``j-<index>-<id>``, at most 63 characters)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", str(job_id).lower()).strip("-")
    return f"j-{index:05d}-{clean}"[:63].rstrip("-")


def job_manifest(row: Any, index: int, *, namespace: str, run: str, mem_gib: float, speedup: float,
                 submit_time_s: float | None = None, pin_nodes: bool = True, gated: bool = False,
                 pod_gpus: int | None = None) -> dict[str, Any]:
    """The ``batch/v1`` Job for one trace job (a pure function; see the module docstring). A pod
    the extender evicts (to preempt the job, or to undo a co-location) is replaced, not counted as a failure (the Job's
    ``podFailurePolicy`` ignores the ``DisruptionTarget`` condition that the Eviction API sets).

    A job of more GPUs than one node has is a gang (``pod_gpus`` below ``num_gpus``): an Indexed
    Job (``completionMode: Indexed``, ``completions = parallelism = n_pods = num_gpus // pod_gpus``)
    whose pods of ``pod_gpus`` GPUs each carry the gang's label and size
    (:data:`~iadeep.podspec.GANG_LABEL` = the Job's name, :data:`~iadeep.podspec.ANNOTATION_GANG_SIZE`),
    which the extender places all or nothing, and the rendezvous of PyTorch's ``env://``:
    ``MASTER_ADDR`` (member 0 through the headless Service of :func:`gang_service_manifest`, the
    pods' ``subdomain``), ``MASTER_PORT``, ``WORLD_SIZE = n_pods`` and ``RANK`` = the completion
    index (Downward API). The Job succeeds when every member has (the Job controller counts the
    indexes).

    Args:
        row: the job's row of the job table (job_id, duration, num_gpus, model, batch_size).
        index: its position in the table (makes the name unique).
        namespace / run: the namespace and the run's label value (nodes carry the same label).
        mem_gib: GPU memory per GPU (GiB); requested for the pod as ``ceil(mem_gib) x num_gpus``.
        speedup: emulated seconds per wall second.
        submit_time_s: wall time of creation (Unix s), for the Job's submit annotation (a Job
            created at its arrival); ``None``: no annotation (the arrival is written on the pod).
        pin_nodes: select the nodes labelled with ``run`` (the local cluster's per-run nodes).
        gated: the pod carries the scheduling gate :data:`~iadeep.experiment._replay.ARRIVAL_GATE`
            (the Job is created ahead of its arrival and the gate removed at the arrival:
            :class:`~iadeep.experiment._replay.GatedSubmitter`).
        pod_gpus: GPUs of each pod (:func:`iadeep.policy.pod_size` of the cluster's nodes);
            ``None`` or ``num_gpus``: one pod.

    Raises:
        ValueError: ``pod_gpus`` does not divide ``num_gpus``.
    """
    total = int(row.num_gpus)
    gpus = total if pod_gpus is None else int(pod_gpus)
    if gpus < 1 or total % gpus:
        raise ValueError(f"job {row.job_id}: pod_gpus={pod_gpus} does not divide num_gpus={total}")
    n_pods = total // gpus
    name = job_name(index, row.job_id)
    res = {"iadeep.io/gpu-mem": str(int(math.ceil(mem_gib - 1e-9)) * gpus), "iadeep.io/gpu-count": str(gpus)}
    annotations = {
        "iadeep.io/model": str(row.model),
        "iadeep.io/batch-size": str(int(row.batch_size)),
        "iadeep.io/duration-s": f"{float(row.duration):.3f}",
        "iadeep.io/emulated": "true",
        "iadeep.io/emulation-speedup": f"{speedup:g}",
        JOB_ID_ANNOTATION: str(row.job_id),
    }
    labels = {RUN_LABEL: run}
    pod_labels = dict(labels)
    container: dict[str, Any] = {"name": "train", "image": "registry.invalid/iadeep/emulated-trainer:0",
                                 "resources": {"limits": dict(res), "requests": dict(res)}}
    gang: dict[str, Any] = {}
    if n_pods > 1:
        pod_labels[GANG_LABEL] = name
        annotations[ANNOTATION_GANG_SIZE] = str(n_pods)
        container["env"] = [
            {"name": ENV_MASTER_ADDR, "value": f"{name}-0.{name}"},  # the Indexed Job's pod hostname, in the Service
            {"name": ENV_MASTER_PORT, "value": str(RENDEZVOUS_PORT)},
            {"name": ENV_WORLD_SIZE, "value": str(n_pods)},
            {"name": ENV_RANK, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_GANG_INDEX}']"}}},
        ]
        gang = {"completionMode": "Indexed"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": {JOB_ID_ANNOTATION: str(row.job_id),
                                     **({SUBMIT_ANNOTATION: f"{submit_time_s:.6f}"} if submit_time_s is not None else {})}},
        "spec": {
            "backoffLimit": 0,
            # a pod evicted for a preemption or an undo (the Eviction API marks it DisruptionTarget) is replaced
            # without counting as a failure; the replacement resumes from the job's checkpoint
            # (Job API, batch/v1 podFailurePolicy: needs restartPolicy Never; the replacement is made
            # once the evicted pod has failed, podReplacementPolicy Failed)
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "completions": n_pods,
            "parallelism": n_pods,
            **gang,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": {
                    "schedulerName": SCHEDULER,
                    **({"schedulingGates": [{"name": ARRIVAL_GATE}]} if gated else {}),
                    "restartPolicy": "Never",
                    **({"subdomain": name} if n_pods > 1 else {}),
                    **({"nodeSelector": {RUN_LABEL: run}} if pin_nodes else {}),
                    "containers": [container],
                },
            },
        },
    }


def gang_service_manifest(job: dict[str, Any]) -> dict[str, Any] | None:
    """The headless Service of a gang's Job (:func:`job_manifest`), ``None`` for a one-pod Job:
    named as the Job and the pods' ``subdomain``, selecting the Job's pods, so that member ``i``
    resolves as ``<job>-<i>.<job>`` (the Indexed Job's pod hostnames) and ``MASTER_ADDR`` names
    member 0. ``publishNotReadyAddresses``: the members rendezvous before they are ready."""
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        return None
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {})},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"batch.kubernetes.io/job-name": meta["name"]},
                 "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]},
    }


def run_live_policy(api_client: Any, workload: pd.DataFrame, model: InterferenceModel, cluster: ClusterSpec, *,
                    policy: str, run: str, settings: LiveSettings, store: Any | None = None,
                    progress: Callable[[int], None] | None = None,
                    pin_nodes: bool = True) -> tuple[SimResult, dict[str, Any]]:
    """Submit ``workload`` as Jobs at their (compressed) arrival times and wait for all of them.

    Args:
        api_client: a ``kubernetes.client.ApiClient`` for the cluster.
        workload: the job table (job_id, submit_time, duration, num_gpus, model, batch_size).
        model: the interference model (memory estimates of the job types).
        cluster: the cluster shape (for the result's GPU count and node names).
        policy / run: the policy's name (for the result) and the run label of the nodes.
        settings: speedup, deadline, namespace.
        store: the state store the extender uses (reservations are counted at the end), or ``None``.
        progress: called with the number of finished Jobs.
        pin_nodes: select the nodes labelled ``run`` (the local cluster's); off on a user's cluster.

    Returns:
        ``(result, metrics)``: the simulator-shaped result and the live metrics (overhead
        breakdown, reservations left, wall time).

    Raises:
        TimeoutError: not every Job finished before the deadline (the message says how many).
    """
    from kubernetes import client

    from iadeep.jobtypes import JobType
    from iadeep.policy import pod_size

    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    ns = settings.namespace or f"live-{run}"
    try:
        core.create_namespace({"metadata": {"name": ns}})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    _wait_service_account(core, ns)
    speedup = settings.speedup
    jobs = workload.reset_index(drop=True)
    submit0 = float(jobs["submit_time"].min()) if len(jobs) else 0.0
    span = float(jobs["submit_time"].max() - submit0) if len(jobs) else 0.0
    work = float((jobs["duration"] * jobs["num_gpus"]).sum()) / cluster.total_gpus
    longest = float(jobs["duration"].max()) if len(jobs) else 0.0  # a makespan is at least span + the longest job
    timeout = settings.timeout_s or 3.0 * (span + work + longest) / speedup + 120.0
    order = np.argsort(jobs["submit_time"].to_numpy(), kind="stable")
    finished = {"n": 0}
    done_at: dict[str, tuple[str, float]] = {}

    def on_done(name: str, kind: str, at: float) -> None:
        done_at[name] = (kind, at)
        finished["n"] += 1
        if progress is not None:
            progress(finished["n"])

    import threading

    selector = f"{RUN_LABEL}={run}"
    node_gpus = [g.gpus_per_node for g in cluster.node_groups() for _ in range(g.count)]
    named = []
    for i in order:
        row = jobs.iloc[i]
        mem = float(model.mem_gib[model.type_id(JobType(str(row.model), int(row.batch_size)))])
        body = job_manifest(row, int(i), namespace=ns, run=run, mem_gib=mem, speedup=speedup, pin_nodes=pin_nodes,
                            gated=True, pod_gpus=pod_size(int(row.num_gpus), node_gpus))
        service = gang_service_manifest(body)
        if service is not None:  # before the Job: the members' names resolve from their start
            core.create_namespaced_service(ns, service)
        named.append(((float(row.submit_time) - submit0) / speedup, body))
    clock = HeldClock(settings.clock_file) if settings.clock_file is not None else None
    if clock is not None:  # held time is wall time the run takes on top
        timeout += len(jobs) * (settings.hold_max_s + settings.settle_s)
    submitter = GatedSubmitter(api_client, ns, selector, ahead_s=settings.ahead_s, clock=clock,
                               hold_max_s=settings.hold_max_s, settle_s=settings.settle_s)
    errors: list[BaseException] = []
    try:
        p0 = time.time()
        # the first window's Jobs, before the clock starts (the pod watch outlives the run's deadline)
        created = submitter.prefill(named, p0 + timeout, watch_until=p0 + 2 * timeout + 60.0)
        prefill_s = time.time() - p0
        w0 = time.time()
        t0 = submitter.now() + 0.5  # the first arrival, on the run's clock
        deadline = w0 + 0.5 + timeout
        waiter = threading.Thread(target=lambda: _guard(errors, watch_jobs, api_client, ns, selector, len(jobs), deadline,
                                                        on_done), name="iadeep-live-wait", daemon=True)
        waiter.start()
        lags = submitter.run([(t0 + offset, body) for offset, body in named], deadline, created=created)
        waiter.join(timeout=max(deadline - time.time(), 0) + 30)
    finally:
        submitter.close()
        held_s = clock.held_s() if clock is not None else 0.0
        if clock is not None:
            clock.close()
    errors += submitter.errors
    if errors:
        raise errors[0]
    if waiter.is_alive():
        raise TimeoutError(f"Jobs of run {run} not finished by the deadline")
    wall = time.time() - w0
    pods = api_json(core.list_namespaced_pod, ns, label_selector=selector).get("items") or []
    jobs_doc = api_json(batch.list_namespaced_job, ns, label_selector=selector).get("items") or []
    left = _reservations_left(store, settings.reservations_wait_s)
    result, breakdown = live_result(jobs, jobs_doc, pods, done_at, cluster=cluster, policy=policy, run=run, t0=t0,
                                    submit0=submit0, speedup=speedup, model=model, on_wall=clock is None)
    metrics = {"backend": "kubernetes", "speedup": speedup, "wall_s": wall, "jobs_per_wall_s": len(jobs) / wall if wall else 0.0,
               "reservations_left": left, "failed_jobs": sum(k == "Failed" for k, _ in done_at.values()),
               "replacement_pods": submitter.replacements,
               "submit_lag_s_median": float(np.median(lags)) if lags else 0.0,
               "submit_lag_s_p90": float(np.percentile(lags, 90)) if lags else 0.0, "create_ahead_s": settings.ahead_s,
               "prefilled_jobs": created, "prefill_s": prefill_s, "breakdown_s": breakdown, "namespace": ns,
               "held_clock": clock is not None, "clock_held_s": held_s, "submitter_held_s": submitter.held_s()}
    return result, metrics


def _guard(errors: list[BaseException], fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread
        errors.append(exc)


def _wait_service_account(core: Any, ns: str, timeout_s: float = 30.0) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", ns)
            return
        except ApiException:
            time.sleep(0.1)
    raise TimeoutError(f"namespace {ns}: no default service account after {timeout_s:.0f}s")


def _reservations_left(store: Any | None, wait_s: float) -> int | None:
    if store is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        n = len(store.assignments())
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def iter_runs(policies: list[str]) -> Iterator[tuple[str, str]]:
    """``(policy, run label)`` for each policy, labels unique per call."""
    tag = uuid.uuid4().hex[:5]
    for k, p in enumerate(policies):
        yield p, f"r{tag}{k}"
