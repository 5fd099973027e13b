"""A job's progress across its pods, for the GPU emulator: an evicted pod's work left is kept by
its Job (:class:`iadeep.state.JobCheckpoint`) and its Job's replacement pod resumes from it.

The emulator plays the kubelet of an evicted pod: it stops the work, writes the checkpoint and
sets the pod ``Failed`` (:func:`end_evicted_pod`): the Eviction API's ``DisruptionTarget``
condition stays on it, so a Job whose ``podFailurePolicy`` ignores that condition replaces the pod
(once it has failed: ``podReplacementPolicy: Failed``, the only value allowed with a
``podFailurePolicy``) without counting a failure.
"""

from __future__ import annotations

import logging
from typing import Any

from iadeep.emulator._kube import KubeApi, KubeCallError
from iadeep.podspec import ANNOTATION_GANG_INDEX, GANG_LABEL
from iadeep.state import JobCheckpoint, RecordError, StateStore, StoreUnavailable

__all__ = ["ANNOTATION_EMULATED_EVICTED", "ANNOTATION_EMULATED_EVICTIONS", "ANNOTATION_EMULATED_FIRST_START", "job_key",
           "read_checkpoint", "keep_checkpoint", "end_evicted_pod"]

log = logging.getLogger("iadeep.emulator")

ANNOTATION_EMULATED_EVICTED = "iadeep.io/emulated-evicted"
"""Written by the emulator on a pod that left its GPUs before its work was done (evicted):
when, Unix seconds (decimal); the job's progress went to its checkpoint (:class:`JobCheckpoint`)."""
ANNOTATION_EMULATED_EVICTIONS = "iadeep.io/emulated-evictions"
"""Written by the emulator on the pod that completed a job: the job's pods evicted before it."""
ANNOTATION_EMULATED_FIRST_START = "iadeep.io/emulated-first-start"
"""Written by the emulator on the pod that completed a job: when the job's first pod started its
work (an evicted pod is gone by then: its Job removes it once it has failed)."""


def job_key(pod: dict[str, Any]) -> str | None:
    """The key of the job a pod runs for, ``<namespace>.<Job name>`` (its owning Job: a replacement
    pod has the same), ``<namespace>.<Job name>.<index>`` for a gang member (each member's progress
    is its own; a member's replacement has its index), ``None`` for a pod no Job owns (its
    progress is its own)."""
    meta = pod.get("metadata") or {}
    owners = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job" and o.get("name")]
    if not owners:
        return None
    index = (meta.get("annotations") or {}).get(ANNOTATION_GANG_INDEX)
    member = f".{index}" if (meta.get("labels") or {}).get(GANG_LABEL) and index else ""
    return f"{meta.get('namespace', '')}.{owners[0]}{member}"


def read_checkpoint(store: StateStore, pod: dict[str, Any]) -> JobCheckpoint | None:
    """The checkpoint of the pod's job, if an earlier pod of it was evicted (None otherwise, or
    when the store cannot be read: the job then starts over, logged)."""
    key = job_key(pod)
    if key is None:
        return None
    try:
        return store.checkpoint(key)
    except (StoreUnavailable, RecordError) as exc:
        log.warning("job %s: could not read its checkpoint, starting over: %s", key, exc)
        return None


def keep_checkpoint(store: StateStore, checkpoint: JobCheckpoint) -> None:
    """Write the job's checkpoint (an unreachable store is logged: the job would start over)."""
    try:
        store.put_checkpoint(checkpoint)
    except StoreUnavailable as exc:
        log.warning("job %s: could not keep its progress: %s", checkpoint.job_key, exc)


def end_evicted_pod(kube: KubeApi, pod: dict[str, Any], started: float, now: float, start_annotation: str) -> bool:
    """End a pod being deleted (evicted) as its kubelet would: annotated with its start
    (``start_annotation``) and eviction times, then ``Failed`` (exit code 137, as a killed
    container). Returns False when the API refused (logged; a pod already gone is no error)."""
    meta = pod.get("metadata") or {}
    ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
    try:
        kube.annotate_pod(ns, name, uid, {start_annotation: f"{started:.6f}", ANNOTATION_EMULATED_EVICTED: f"{now:.6f}"})
        kube.complete_pod(pod, started_s=started, finished_s=now, exit_code=137)
    except KubeCallError as exc:
        if exc.status == 404:
            return True
        log.warning("could not end evicted pod %s/%s: %s", ns, name, exc)
        return False
    return True
