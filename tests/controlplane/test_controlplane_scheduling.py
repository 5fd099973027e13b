"""The real kube-scheduler and controllers against kwok GPU nodes."""

from __future__ import annotations

import time

import pytest
from k8s_support import gpu_container, wait_for

from iadeep.dev import FAKE_EXIT_CODE_ANNOTATION, FAKE_RUN_DURATION_ANNOTATION, GPU_MEM_RESOURCE

pytestmark = pytest.mark.slow

client = pytest.importorskip("kubernetes.client")


def _pod(name: str, *, gpu_mem: int, gpus: int | None = None, scheduler: str | None = None) -> dict:
    spec: dict = {"containers": [gpu_container(gpu_mem=gpu_mem, gpus=gpus)], "restartPolicy": "Never"}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _events(core, namespace: str, name: str) -> list:
    return core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def test_scheduler_binds_pod_to_kwok_node_and_it_runs(k8s_client, k8s_namespace, control_plane):
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(k8s_namespace, _pod("trainer", gpu_mem=8, gpus=1))

    pod = wait_for(
        lambda: core.read_namespaced_pod("trainer", k8s_namespace),
        lambda p: p.status.phase == "Running",
        what="pod Running",
    )
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["type"] == "kwok"
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["PodScheduled"] == "True"
    assert conditions["Ready"] == "True"
    assert pod.status.pod_ip

    # The binding came from kube-scheduler itself, not from a test shortcut.
    scheduled = wait_for(
        lambda: [e for e in _events(core, k8s_namespace, "trainer") if e.reason == "Scheduled"],
        bool,
        what="Scheduled event",
    )
    assert scheduled[0].reporting_component == "default-scheduler"
    assert f"to {pod.spec.node_name}" in scheduled[0].message


def test_job_completes_through_kwok_stages(k8s_client, k8s_namespace):
    batch = client.BatchV1Api(k8s_client)
    template = {
        "metadata": {"annotations": {FAKE_RUN_DURATION_ANNOTATION: "2s"}},
        "spec": {"containers": [gpu_container(gpu_mem=16, gpus=1)], "restartPolicy": "Never"},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0, "template": template},
    }
    batch.create_namespaced_job(k8s_namespace, job)

    done = wait_for(
        lambda: batch.read_namespaced_job_status("train", k8s_namespace),
        lambda j: any(c.type in ("Complete", "Failed") and c.status == "True" for c in j.status.conditions or []),
        timeout=60,
        what="Job finished",
    )
    conditions = {c.type: c.status for c in done.status.conditions}
    assert conditions.get("Complete") == "True", conditions
    assert done.status.succeeded == 2

    core = client.CoreV1Api(k8s_client)
    pods = core.list_namespaced_pod(k8s_namespace, label_selector="job-name=train").items
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    # The fake run time is honoured (give or take the stage's start).
    started = done.status.start_time
    assert (done.status.completion_time - started).total_seconds() >= 1.5


def test_job_pod_failure_fails_the_job(k8s_client, k8s_namespace):
    batch = client.BatchV1Api(k8s_client)
    template = {
        "metadata": {"annotations": {FAKE_EXIT_CODE_ANNOTATION: "3", FAKE_RUN_DURATION_ANNOTATION: "500ms"}},
        "spec": {"containers": [gpu_container(gpu_mem=4)], "restartPolicy": "Never"},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crash"},
        "spec": {"backoffLimit": 0, "template": template},
    }
    batch.create_namespaced_job(k8s_namespace, job)
    done = wait_for(
        lambda: batch.read_namespaced_job_status("crash", k8s_namespace),
        lambda j: any(c.type in ("Complete", "Failed") and c.status == "True" for c in j.status.conditions or []),
        timeout=60,
        what="Job finished",
    )
    assert {c.type: c.status for c in done.status.conditions}.get("Failed") == "True"
    pod = client.CoreV1Api(k8s_client).list_namespaced_pod(k8s_namespace, label_selector="job-name=crash").items[0]
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_pod_larger_than_any_node_stays_pending_with_scheduler_reason(k8s_client, k8s_namespace, control_plane):
    core = client.CoreV1Api(k8s_client)
    per_node = control_plane.gpus_per_node * control_plane.gpu_mem_gib
    core.create_namespaced_pod(k8s_namespace, _pod("huge", gpu_mem=per_node + 1))

    pod = wait_for(
        lambda: core.read_namespaced_pod("huge", k8s_namespace),
        lambda p: any(c.type == "PodScheduled" for c in p.status.conditions or []),
        what="PodScheduled condition",
    )
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert cond.status == "False"
    assert cond.reason == "Unschedulable"
    assert f"Insufficient {GPU_MEM_RESOURCE}" in cond.message

    failed = wait_for(
        lambda: [e for e in _events(core, k8s_namespace, "huge") if e.reason == "FailedScheduling"],
        bool,
        what="FailedScheduling event",
    )
    assert f"Insufficient {GPU_MEM_RESOURCE}" in failed[0].message
    assert failed[0].type == "Warning"

    time.sleep(2)  # still nowhere to go
    pod = core.read_namespaced_pod("huge", k8s_namespace)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"


def test_pods_fill_gpu_memory_then_queue(k8s_client, k8s_namespace, control_plane):
    """Capacity accounting of our extended resource is the scheduler's: exactly as many
    whole-node pods fit as there are nodes."""
    core = client.CoreV1Api(k8s_client)
    nodes = len(core.list_node(label_selector="type=kwok").items)
    per_node = control_plane.gpus_per_node * control_plane.gpu_mem_gib
    for i in range(nodes + 1):
        core.create_namespaced_pod(k8s_namespace, _pod(f"full-{i}", gpu_mem=per_node))

    def phases():
        return [p.status.phase for p in core.list_namespaced_pod(k8s_namespace).items]

    wait_for(phases, lambda ph: ph.count("Running") == nodes, what=f"{nodes} pods Running")
    pods = core.list_namespaced_pod(k8s_namespace).items
    assert len({p.spec.node_name for p in pods if p.status.phase == "Running"}) == nodes
    pending = [p for p in pods if p.status.phase == "Pending"]
    assert len(pending) == 1
    wait_for(
        lambda: core.read_namespaced_pod(pending[0].metadata.name, k8s_namespace),
        lambda p: any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or []),
        what="the extra pod Unschedulable",
    )
    # Freeing one node lets the queued pod in.
    running = next(p for p in pods if p.status.phase == "Running")
    core.delete_namespaced_pod(running.metadata.name, k8s_namespace, grace_period_seconds=0)
    wait_for(
        lambda: core.read_namespaced_pod(pending[0].metadata.name, k8s_namespace),
        lambda p: p.status.phase == "Running",
        what="queued pod Running after a node was freed",
    )


def test_custom_scheduler_profile(k8s_client, k8s_namespace, control_plane):
    """A caller-supplied KubeSchedulerConfiguration is honoured (the extender work plugs in here)."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"}, {"schedulerName": "iadeep-test"}],
    }
    control_plane.restart_scheduler(config)
    try:
        core = client.CoreV1Api(k8s_client)
        core.create_namespaced_pod(k8s_namespace, _pod("custom", gpu_mem=1, scheduler="iadeep-test"))
        pod = wait_for(
            lambda: core.read_namespaced_pod("custom", k8s_namespace),
            lambda p: p.status.phase == "Running",
            what="pod Running via the iadeep-test profile",
        )
        assert pod.spec.scheduler_name == "iadeep-test"
        scheduled = wait_for(
            lambda: [e for e in _events(core, k8s_namespace, "custom") if e.reason == "Scheduled"],
            bool,
            what="Scheduled event",
        )
        assert scheduled[0].reporting_component == "iadeep-test"
    finally:
        control_plane.restart_scheduler({})


def test_a_test_namespace_leaves_no_pending_pod_behind(k8s_client, control_plane):
    """``delete_test_namespace`` (the ``k8s_namespace`` fixture's teardown): the namespace's
    unscheduled pods are gone when it returns (a later test's scheduler extender could place
    them otherwise); a bound pod is left to the namespace controller."""
    from iadeep.testing.controlplane import delete_test_namespace

    core = client.CoreV1Api(k8s_client)
    name = "t-leftover"
    control_plane.create_namespace(name)
    core.create_namespaced_pod(name, _pod("waits", gpu_mem=1, scheduler="nobody-schedules-this"))
    core.create_namespaced_pod(name, _pod("runs", gpu_mem=1, gpus=1))
    wait_for(lambda: core.read_namespaced_pod("runs", name), lambda p: p.status.phase == "Running",
             timeout=60, what="the bound pod running")
    delete_test_namespace(k8s_client, name)
    left = {p.metadata.name for p in core.list_namespaced_pod(name).items if not p.spec.node_name}
    assert left == set()
