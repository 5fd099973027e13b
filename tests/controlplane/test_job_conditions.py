"""A Job's outcome (:func:`iadeep.experiment.job_outcome`) on the real Job controller, through the
three readers that use it: trace submission's ``job_states``, the deferrable wait's trigger and
the live backend's Job watch.

The Job controller adds ``SuccessCriteriaMet`` or ``FailureTarget`` when a Job's outcome is
decided and ``Complete`` or ``Failed`` once its last pod has terminated. A finalizer of our own on
the pods holds a deleted pod terminating, so each test sees the Job between the two conditions
(pods stay Running under kwok: they are annotated as emulated; the test writes their end through
``pods/status``, as the GPU emulator does).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from k8s_support import gpu_container, wait_for

from iadeep.dev._kwok import EMULATED_ANNOTATION

client = pytest.importorskip("kubernetes.client")

RUN_LABEL = "iadeep.io/run"
HOLD = "iadeep.io/test-hold"  # pod finalizer: a deleted pod stays terminating until the test lets it go
INDEX = "batch.kubernetes.io/job-completion-index"


def _job(name: str, run: str, **spec: object) -> dict:
    template = {
        "metadata": {"labels": {RUN_LABEL: run}, "annotations": {EMULATED_ANNOTATION: "true"}, "finalizers": [HOLD]},
        "spec": {"containers": [gpu_container(gpu_mem=1)], "restartPolicy": "Never"},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {RUN_LABEL: run}},
            "spec": {"completions": 2, "parallelism": 2, **spec, "template": template}}


def _true(job) -> set[str]:
    return {c.type for c in job.status.conditions or [] if c.status == "True"}


def _running_pods(core, ns: str, run: str) -> list:
    return wait_for(lambda: core.list_namespaced_pod(ns, label_selector=f"{RUN_LABEL}={run}").items,
                    lambda pods: len(pods) == 2 and all(p.status.phase == "Running" for p in pods),
                    timeout=60, what="2 pods Running")


def _end(core, pod, exit_code: int) -> None:
    """Write the pod's end as a kubelet reports it (phase, terminated container)."""
    ok = exit_code == 0
    state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if ok else "Error"}}
    containers = [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0, "state": state}
                  for c in pod.spec.containers]
    body = {"status": {"phase": "Succeeded" if ok else "Failed", "containerStatuses": containers}}
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)


def _release(core, ns: str, run: str) -> None:
    """Take the test's finalizer off every pod of the run (optimistic concurrency, retried on 409)."""
    for pod in core.list_namespaced_pod(ns, label_selector=f"{RUN_LABEL}={run}").items:
        for _ in range(20):
            finalizers = pod.metadata.finalizers or []
            if HOLD not in finalizers:
                break
            body = {"metadata": {"finalizers": [f for f in finalizers if f != HOLD],
                                 "resourceVersion": pod.metadata.resource_version}}
            try:
                core.patch_namespaced_pod(pod.metadata.name, ns, body, _content_type="application/merge-patch+json")
                break
            except client.ApiException as exc:
                if exc.status == 404:
                    break
                if exc.status != 409:
                    raise
                pod = core.read_namespaced_pod(pod.metadata.name, ns)


def _readers(api, control_plane, ns: str, run: str, name: str) -> dict[str, object]:
    """What each reader says about the run's one Job."""
    from iadeep.experiment._replay import watch_jobs
    from iadeep.orchestration import job_states

    seen: list[tuple[str, str]] = []
    watch_jobs(api, ns, f"{RUN_LABEL}={run}", 1, time.time() + 30, lambda n, kind, _at: seen.append((n, kind)))
    out: dict[str, object] = {"job_states": job_states(api, ns, run), "watch_jobs": seen}
    try:
        from iadeep.orchestration import JobsFinishedTrigger
    except ImportError:  # Airflow not installed: the trigger reads job_states, checked above
        return out

    async def first_event() -> dict:
        ref = {"kubeconfig": str(control_plane.kubeconfig), "context": None, "namespace": ns}
        async for event in JobsFinishedTrigger(ref, run, 1, time.time() + 30, poll_s=0.2).run():
            return event.payload
        raise AssertionError("the trigger yielded nothing")

    out["trigger"] = asyncio.run(first_event())
    return out


@pytest.mark.parametrize(
    ("conditions", "outcome"),
    [
        ([], None),
        ([{"type": "Suspended", "status": "True"}], None),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], "Complete"),
        ([{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}], "Complete"),
        ([{"type": "Complete", "status": "False"}], None),
        ([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}], "Failed"),
        ([{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}], "Failed"),
        ([{"type": "FailureTarget", "status": "Unknown"}], None),
        (["not an object", {"status": "True"}], None),
    ],
)
def test_job_outcome_reads_every_terminal_condition(conditions: list, outcome: str | None) -> None:
    from iadeep.experiment import job_outcome

    assert job_outcome({"conditions": conditions}) == outcome
    assert job_outcome(None) is None and job_outcome({}) is None


@pytest.mark.slow
def test_a_job_whose_success_policy_is_met_is_complete_before_its_pods_end(k8s_client, k8s_namespace, control_plane):
    batch, core = client.BatchV1Api(k8s_client), client.CoreV1Api(k8s_client)
    run, name = "succ", "policy-met"
    batch.create_namespaced_job(k8s_namespace, _job(name, run, completionMode="Indexed", backoffLimit=0,
                                                    successPolicy={"rules": [{"succeededIndexes": "0"}]}))
    try:
        pods = _running_pods(core, k8s_namespace, run)
        _end(core, next(p for p in pods if p.metadata.annotations[INDEX] == "0"), 0)
        job = wait_for(lambda: batch.read_namespaced_job_status(name, k8s_namespace),
                       lambda j: "SuccessCriteriaMet" in _true(j), timeout=60, what="SuccessCriteriaMet")
        assert "Complete" not in _true(job)  # index 1 is still terminating (held by the finalizer)
        assert job.status.terminating == 1
        readers = _readers(k8s_client, control_plane, k8s_namespace, run, name)
        expected = {"job_states": {name: "Complete"}, "watch_jobs": [(name, "Complete")],
                    "trigger": {"status": "finished", "states": {name: "Complete"}}}
        assert readers == {k: expected[k] for k in readers}
    finally:
        _release(core, k8s_namespace, run)
    wait_for(lambda: batch.read_namespaced_job_status(name, k8s_namespace), lambda j: "Complete" in _true(j),
             timeout=60, what="Complete")
    from iadeep.orchestration import job_states

    assert job_states(k8s_client, k8s_namespace, run) == {name: "Complete"}


@pytest.mark.slow
def test_a_job_failed_by_its_pod_failure_policy_is_failed_before_its_pods_end(k8s_client, k8s_namespace, control_plane):
    batch, core = client.BatchV1Api(k8s_client), client.CoreV1Api(k8s_client)
    run, name = "fail", "policy-failjob"
    rules = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]
    batch.create_namespaced_job(k8s_namespace, _job(name, run, backoffLimit=6, podFailurePolicy={"rules": rules}))
    try:
        pods = _running_pods(core, k8s_namespace, run)
        _end(core, pods[0], 3)
        job = wait_for(lambda: batch.read_namespaced_job_status(name, k8s_namespace),
                       lambda j: "FailureTarget" in _true(j), timeout=60, what="FailureTarget")
        assert "Failed" not in _true(job)  # the other pod is still terminating (held by the finalizer)
        assert next(c.reason for c in job.status.conditions if c.type == "FailureTarget") == "PodFailurePolicy"
        readers = _readers(k8s_client, control_plane, k8s_namespace, run, name)
        expected = {"job_states": {name: "Failed"}, "watch_jobs": [(name, "Failed")],
                    "trigger": {"status": "finished", "states": {name: "Failed"}}}
        assert readers == {k: expected[k] for k in readers}
    finally:
        _release(core, k8s_namespace, run)
    wait_for(lambda: batch.read_namespaced_job_status(name, k8s_namespace), lambda j: "Failed" in _true(j),
             timeout=60, what="Failed")
    from iadeep.orchestration import job_states

    assert job_states(k8s_client, k8s_namespace, run) == {name: "Failed"}
