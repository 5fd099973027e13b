"""Trace submission as Kubernetes Jobs, in steps an orchestrator can interleave with waits.

The experiments' kubernetes backend (``iadeep experiment run --backend kubernetes``) submits and waits in one process; here the
same Jobs (:func:`iadeep.experiment.job_manifest`: scheduler ``iadeep-scheduler``, the
GPU-memory and GPU-count requests, the emulator's annotations, the run label) are planned once
(:func:`plan_submissions`: one entry per trace job with its due wall time, ``t0 + (submit -
first submit) / speedup``), created in batches when due (:func:`submit_due`, idempotent: a Job
that already exists is left alone, so a retried task submits nothing twice), and finished Jobs are
read from their conditions only (:func:`job_states`, by :func:`iadeep.experiment.job_outcome`:
``SuccessCriteriaMet``/``Complete`` and ``FailureTarget``/``Failed``): a Job whose pod does not
exist yet is simply not finished.

Job names are :func:`job_name`: DNS-1123 labels of at most 63 characters for any trace job id.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DATASET_MOUNT", "job_name", "plan_submissions", "plan_trace", "submit_due", "job_states", "collect_jobs"]

RUN_LABEL = "iadeep.io/run"
#: Where a Job's pod mounts the dataset claim (read-only).
DATASET_MOUNT = "/var/lib/iadeep/datasets"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def job_name(index: int, job_id: Any) -> str:
    """A DNS-1123 label (``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63 characters) for trace job
    ``job_id`` at position ``index``: ``j-<index>-<id, lower case, other characters as '-'>``.

    The index keeps names unique when two ids clean to the same text; Kubernetes object names:
    https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names.
    """
    clean = re.sub(r"[^a-z0-9-]+", "-", str(job_id).lower()).strip("-")
    clean = re.sub(r"-{2,}", "-", clean)
    name = f"j-{int(index):05d}-{clean}"[:63].rstrip("-") if clean else f"j-{int(index):05d}"
    assert _DNS1123.match(name) and len(name) <= 63, name
    return name


def plan_submissions(workload: pd.DataFrame, mem_gib: list[float], *, namespace: str, run: str, speedup: float,
                     t0: float, dataset_claim: str | None = None, pin_nodes: bool = False) -> list[dict[str, Any]]:
    """One entry per job, in arrival order: ``{"due": wall s, "name", "job_id", "manifest"}``.

    Args:
        workload: the job table (job_id, submit_time, duration, num_gpus, model, batch_size).
        mem_gib: GPU memory per GPU (GiB) of each row (the interference model's estimate).
        namespace / run: the Jobs' namespace and ``iadeep.io/run`` label.
        speedup: emulated seconds per wall second (> 0).
        t0: wall time (Unix s) of the first arrival.
        dataset_claim: a PersistentVolumeClaim (the NFS dataset export) mounted read-only at
            :data:`DATASET_MOUNT`; ``None``: no volume.
        pin_nodes: select nodes labelled with ``run`` (the local cluster's per-run nodes).

    Raises:
        ValueError: ``speedup`` is not positive or the lengths differ.
    """
    from iadeep.experiment import job_manifest

    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    jobs = workload.reset_index(drop=True)
    if len(mem_gib) != len(jobs):
        raise ValueError(f"{len(mem_gib)} memory estimates for {len(jobs)} jobs")
    submit0 = float(jobs["submit_time"].min()) if len(jobs) else 0.0
    plan = []
    for i in jobs.sort_values("submit_time", kind="stable").index:
        row = jobs.loc[i]
        due = t0 + (float(row.submit_time) - submit0) / speedup
        body = job_manifest(row, int(i), namespace=namespace, run=run, mem_gib=float(mem_gib[i]), speedup=speedup,
                            submit_time_s=due, pin_nodes=pin_nodes)
        name = job_name(int(i), row.job_id)
        body["metadata"]["name"] = name
        pod = body["spec"]["template"]["spec"]
        if dataset_claim:
            pod["volumes"] = [{"name": "datasets", "persistentVolumeClaim": {"claimName": dataset_claim, "readOnly": True}}]
            pod["containers"][0]["volumeMounts"] = [{"name": "datasets", "mountPath": DATASET_MOUNT, "readOnly": True}]
        plan.append({"due": due, "name": name, "job_id": str(row.job_id), "manifest": body})
    return plan


def submit_due(api: Any, plan: list[dict[str, Any]], start: int, now: float | None = None) -> int:
    """Create the Jobs of ``plan[start:]`` that are due by ``now``; returns the index of the first
    Job not yet due (``len(plan)`` when all are submitted).

    The submit annotation (``iadeep.io/submit-time``) is set to the creation wall time. A Job that
    already exists (HTTP 409: a retried task) counts as submitted.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    batch = client.BatchV1Api(api)
    now = time.time() if now is None else now
    k = start
    while k < len(plan) and plan[k]["due"] <= now:
        body = json.loads(json.dumps(plan[k]["manifest"]))
        body["metadata"]["annotations"]["iadeep.io/submit-time"] = f"{time.time():.6f}"
        try:
            batch.create_namespaced_job(body["metadata"]["namespace"], body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        k += 1
        now = max(now, time.time())
    return k


def job_states(api: Any, namespace: str, run: str) -> dict[str, str]:
    """``{Job name: "Complete" | "Failed" | "Running"}`` of the run's Jobs, from Job conditions only
    (:func:`iadeep.experiment.job_outcome`; "Running" is any Job not finished, pending ones too)."""
    from kubernetes import client

    from iadeep.experiment import api_json, job_outcome

    listed = api_json(client.BatchV1Api(api).list_namespaced_job, namespace, label_selector=f"{RUN_LABEL}={run}")
    return {job["metadata"]["name"]: job_outcome(job.get("status")) or "Running" for job in listed.get("items") or []}


def collect_jobs(api: Any, namespace: str, run: str, out: Path) -> dict[str, Any]:
    """Write ``jobs.json`` (per Job: state, node, GPU indices, submit/start/end wall s) into ``out``.

    Returns:
        ``{"jobs": n, "complete": n, "failed": n, "path": str}``.
    """
    from kubernetes import client

    states = job_states(api, namespace, run)
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    jobs = {j.metadata.name: j for j in batch.list_namespaced_job(namespace, label_selector=f"{RUN_LABEL}={run}").items}
    rows = {}
    for p in core.list_namespaced_pod(namespace, label_selector=f"{RUN_LABEL}={run}").items:
        owner = [o.name for o in p.metadata.owner_references or [] if o.kind == "Job"]
        if not owner or owner[0] not in jobs:
            continue
        ann = p.metadata.annotations or {}
        rows[owner[0]] = {"node": p.spec.node_name, "gpus": ann.get("iadeep.io/gpu-index", ""),
                          "start": _f(ann.get("iadeep.io/emulated-start")), "end": _f(ann.get("iadeep.io/emulated-end"))}
    table = {name: {"job_id": (j.metadata.annotations or {}).get("iadeep.io/job-id"), "state": states.get(name),
                    "submit": _f((j.metadata.annotations or {}).get("iadeep.io/submit-time")), **rows.get(name, {})}
             for name, j in jobs.items()}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "jobs.json"
    path.write_text(json.dumps(table, indent=2) + "\n")
    values = list(states.values())
    return {"jobs": len(values), "complete": values.count("Complete"), "failed": values.count("Failed"), "path": str(path)}


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def plan_trace(config: dict[str, Any], *, namespace: str, run: str, dataset_claim: str | None = None,
               lead_s: float = 2.0, pin_nodes: bool = False, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Build the trace slice of ``config`` (an ``ExperimentConfig`` dict) and plan its Jobs.

    Writes ``workload.csv``/``workload.json`` and ``plan.json`` into the config's ``out``; the
    first Job is due ``lead_s`` seconds from now. ``cache_dir``: the dataset cache
    (:func:`iadeep.experiment.fetch_inputs`).

    Returns:
        ``{"plan_file", "run", "namespace", "jobs", "span_s", "timeout_s"}`` (span and timeout in
        wall seconds; the timeout is the config's ``timeout_s`` or 3 x (span + work over the
        cluster's GPUs) / speedup + 60 s, as the kubernetes backend bounds a run).
    """
    from iadeep.experiment import ExperimentConfig, build_workload, cluster_of, fetch_inputs
    from iadeep.interference import InterferenceModel
    from iadeep.jobtypes import JobType

    cfg = ExperimentConfig.from_dict(config)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = fetch_inputs(cfg, progress=False, cache_dir=cache_dir)
    workload, _ = build_workload(cfg, paths["trace"], paths["throughputs"])
    model = InterferenceModel.from_file(paths["throughputs"], cfg.gpu_type)
    mem = [float(model.mem_gib[model.type_id(JobType(str(m), int(b)))])
           for m, b in zip(workload["model"], workload["batch_size"])]
    plan = plan_submissions(workload, mem, namespace=namespace, run=run, speedup=cfg.speedup, t0=time.time() + lead_s,
                            dataset_claim=dataset_claim, pin_nodes=pin_nodes)
    (out / "plan.json").write_text(json.dumps(plan))
    span = (plan[-1]["due"] - plan[0]["due"]) if plan else 0.0
    work = float((workload["duration"] * workload["num_gpus"]).sum()) / cluster_of(cfg).total_gpus / cfg.speedup
    timeout = cfg.timeout_s or 3.0 * (span + work) + 60.0
    return {"plan_file": str(out / "plan.json"), "run": run, "namespace": namespace, "jobs": len(plan),
            "span_s": span, "timeout_s": timeout}
