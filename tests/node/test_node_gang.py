"""A gang on the real node: the live backend's Indexed Job of a trace job (``job_manifest``, its
headless Service) runs as one pod per member on containerd + runc + kubelet, placed by the rolled-out
``iadeep-scheduler`` with Kubernetes' gang scheduling (:data:`iadeep.dev._cluster.GANG_FEATURE_GATES`
on it; the session's control plane serves ``scheduling.k8s.io/v1alpha2`` and its Job controller
makes the PodGroup) in front of the extender's gang decision, the GPUs allocated by the device
plugin the kubelet calls.

The real node is one node of 2 emulated GPUs x 16 GiB (``k8s/local``), so the gang that runs is
2 members x 1 GPU on that one node (2 x 1 GPU <= its 2 GPUs), and the gang that does not fit is 2
members x 1 GPU of 13 GiB while another pod holds 4 GiB of one GPU: each member alone would fit
on the other GPU (and kube-scheduler's resource fit passes both: 4 + 2 x 13 <= 32 GiB), the gang
does not. The trace jobs are run as busybox's ``env`` (the image the node can start without a
registry), on the host network (the node has no CNI), pinned to the real node; everything else of
the pods is the live backend's.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from node_stack import ANN_INDEX, ANN_PHASE, ANN_UUID, SCHEDULER, Stack, env_of, gpu_pod
from node_support import pod_log, wait_phase

from iadeep.dev import REAL_NODE_LABEL, Node
from iadeep.dev._cluster import GANG_FEATURE_GATES
from iadeep.experiment._live import gang_service_manifest, job_manifest
from iadeep.podspec import ANNOTATION_GANG_INDEX, GANG_LABEL
from iadeep.testing import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scheduler_gates() -> Mapping[str, bool]:
    """``iadeep-scheduler`` with the gates the session's control plane runs with."""
    return dict(GANG_FEATURE_GATES)


def _gang_job(stack: Stack, job_id: str, *, members: int, gpus: int, mem_gib: float, run_s: int) -> dict[str, Any]:
    """The live backend's Job of a trace job of ``members x gpus`` GPUs on nodes of ``gpus``
    GPUs, whose containers print their environment and stay ``run_s`` seconds, on the real node."""
    row = SimpleNamespace(job_id=job_id, duration=float(run_s), num_gpus=members * gpus, model="ResNet-18",
                          batch_size=16)
    job = job_manifest(row, 0, namespace=stack.namespace, run="real-node", mem_gib=mem_gib, speedup=1.0,
                       pin_nodes=False, pod_gpus=gpus)
    spec = job["spec"]["template"]["spec"]
    spec.update(hostNetwork=True, terminationGracePeriodSeconds=1, nodeSelector={REAL_NODE_LABEL: "true"})
    (container,) = spec["containers"]
    container.update(image=stack.busybox, imagePullPolicy="Never", command=["sh", "-c", f"env; exec sleep {run_s}"])
    return job


def _create(stack: Stack, job: dict[str, Any], k8s_client: Any) -> str:
    service = gang_service_manifest(job)
    assert service is not None  # a gang: an Indexed Job with its headless Service
    stack.core.create_namespaced_service(stack.namespace, service)
    client.BatchV1Api(k8s_client).create_namespaced_job(stack.namespace, job)
    return job["metadata"]["name"]


def _members(stack: Stack, gang: str) -> list[Any]:
    pods = stack.core.list_namespaced_pod(stack.namespace, label_selector=f"{GANG_LABEL}={gang}").items
    return sorted(pods, key=lambda p: int(p.metadata.annotations[ANNOTATION_GANG_INDEX]))


def _held(stack: Stack, uids: set[str]) -> dict[str, list[int]]:
    """pod UID -> the GPU indexes its reservation holds, for ``uids``."""
    out: dict[str, list[int]] = {}
    for a in stack.store.assignments():
        if a.pod_uid in uids:
            out.setdefault(a.pod_uid, []).append(a.gpu)
    return {u: sorted(g) for u, g in out.items()}


def _delete_job(stack: Stack, k8s_client: Any, name: str) -> None:
    client.BatchV1Api(k8s_client).delete_namespaced_job(name, stack.namespace, propagation_policy="Background",
                                                        grace_period_seconds=0)
    stack.core.delete_namespaced_service(name, stack.namespace)
    wait_for(lambda: _members(stack, name), lambda ps: not ps, timeout=60, what=f"the pods of {name} gone")


def test_a_gang_runs_as_one_pod_per_member_with_the_gpus_the_extender_reserved(stack: Stack, real_node: Node,
                                                                                k8s_client) -> None:
    gpus, gib = stack.gpus
    assert gpus == 2 and gib == 16  # one node: the gang is 2 members x 1 GPU there
    name = _create(stack, _gang_job(stack, "gang2", members=2, gpus=1, mem_gib=12, run_s=20), k8s_client)
    try:
        pods = wait_for(lambda: _members(stack, name), lambda ps: len(ps) == 2 and all(
            p.status.phase in ("Running", "Succeeded", "Failed") for p in ps), timeout=180, what="2 members started")
        uids = {p.metadata.uid for p in pods}
        held = _held(stack, uids)  # read while they run: the reservation goes when they end
        assert all(p.status.phase == "Running" for p in pods), [(p.metadata.name, p.status.phase) for p in pods]
        inventory = {g.index: g.uuid for g in stack.store.inventories()[real_node.name].gpus}
        containers = set(real_node.ctr("containers", "list", "--quiet").split())
        envs = {p.metadata.name: wait_for(lambda p=p: env_of(pod_log(stack.core, stack.namespace, p.metadata.name)),
                                          lambda e: "RANK" in e, timeout=30, what=f"{p.metadata.name}'s environment")
                for p in pods}
        for p in pods:
            env, ann, index = envs[p.metadata.name], p.metadata.annotations, p.metadata.annotations[ANNOTATION_GANG_INDEX]
            assert p.spec.node_name == real_node.name and p.spec.scheduler_name == SCHEDULER
            # started by containerd on the real node: the kubelet's container is the node's
            (status,) = p.status.container_statuses
            assert status.container_id.startswith("containerd://") and status.state.running is not None
            assert status.container_id.removeprefix("containerd://") in containers
            # the rendezvous of the live backend: member 0 through the Service, the world, the rank = the index
            assert env["MASTER_ADDR"] == f"{name}-0.{name}" and env["MASTER_PORT"] == "29500"
            assert env["WORLD_SIZE"] == "2" and env["RANK"] == index
            # the device plugin served the member (the kubelet called Allocate) with the GPU the extender reserved
            assert ann[ANN_PHASE] == "allocated", p.metadata.name
            (gpu,) = held[p.metadata.uid]
            assert ann[ANN_INDEX] == env["IADEEP_GPU_INDEX"] == str(gpu), (p.metadata.name, held)
            assert ann[ANN_UUID] == env["IADEEP_GPU_UUID"] == env["NVIDIA_VISIBLE_DEVICES"] == inventory[gpu]
            assert env["IADEEP_GPU_MEM_LIMIT_MIB"] == str(12 * 1024)
        assert sorted(e["RANK"] for e in envs.values()) == ["0", "1"]
        assert sorted(g for gs in held.values() for g in gs) == [0, 1]  # one GPU each, none shared
        assert {j.gang for u, j in stack.store.jobs().items() if u in uids} == {name}
        # Kubernetes' gang scheduling in front of the extender: the Job controller's PodGroup, named
        # by both members, scheduled whole; the two Bindings within the extender's permit wait
        raw = [stack.core.read_namespaced_pod(p.metadata.name, stack.namespace, _preload_content=False) for p in pods]
        groups = {json.loads(r.data)["spec"]["schedulingGroup"]["podGroupName"] for r in raw}
        (group,) = client.CustomObjectsApi(k8s_client).list_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha2", stack.namespace, "podgroups")["items"]
        assert groups == {group["metadata"]["name"]} and group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
        assert ("PodGroupScheduled", "True") in [(c["type"], c["status"]) for c in group["status"]["conditions"]]
        times = [next(c.last_transition_time for c in p.status.conditions if c.type == "PodScheduled") for p in pods]
        assert (max(times) - min(times)).total_seconds() <= 4
        done = wait_for(lambda: client.BatchV1Api(k8s_client).read_namespaced_job_status(name, stack.namespace),
                        lambda j: any(c.type in ("Complete", "Failed") and c.status == "True"
                                      for c in j.status.conditions or []), timeout=120, what="the gang's Job finished")
        assert done.status.succeeded == 2
        wait_for(lambda: (_held(stack, uids), [j for j in stack.store.jobs().values() if j.gang == name]),
                 lambda left: left == ({}, []), timeout=30, what="nothing of the gang left in the state store")
    finally:
        _delete_job(stack, k8s_client, name)


def test_a_gang_that_does_not_fit_stays_wholly_unbound_and_reserves_nothing(stack: Stack, real_node: Node,
                                                                             k8s_client) -> None:
    filler = gpu_pod("filler", stack.busybox, 4)
    filler["spec"]["containers"][0]["command"] = ["sh", "-c", "exec sleep 600"]
    stack.core.create_namespaced_pod(stack.namespace, filler)
    name = ""
    try:
        f = wait_phase(stack.core, stack.namespace, "filler", {"Running", "Failed"}, timeout=120)
        assert f.status.phase == "Running"
        name = _create(stack, _gang_job(stack, f"wide-{uuid.uuid4().hex[:4]}", members=2, gpus=1, mem_gib=13,
                                        run_s=5), k8s_client)

        def refused(ps: list[Any]) -> bool:  # both members unschedulable, for the extender's gang reason
            conds = [next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None) for p in ps]
            return (len(ps) == 2 and all(c is not None and c.status == "False" for c in conds)
                    and any("gang of 2 pod(s)" in (c.message or "") for c in conds if c is not None))

        wait_for(lambda: _members(stack, name), refused, timeout=120, what="both members refused as one gang")
        time.sleep(5)  # kube-scheduler's retries meanwhile change nothing
        pods = _members(stack, name)
        uids = {p.metadata.uid for p in pods}
        assert [p.spec.node_name for p in pods] == [None, None]
        assert {a.pod_uid for a in stack.store.assignments()} == {f.metadata.uid}  # only the filler holds GPUs
        assert not [u for u, j in stack.store.jobs().items() if u in uids or j.gang == name]
        # once the filler is gone the gang fits, and binds whole
        stack.core.delete_namespaced_pod("filler", stack.namespace, grace_period_seconds=0)
        pods = wait_for(lambda: _members(stack, name), lambda ps: len(ps) == 2 and all(p.spec.node_name for p in ps),
                        timeout=120, what="the whole gang bound once it fits")
        assert {p.spec.node_name for p in pods} == {real_node.name}
    finally:
        if name:
            _delete_job(stack, k8s_client, name)
        with contextlib.suppress(client.ApiException):
            stack.core.delete_namespaced_pod("filler", stack.namespace, grace_period_seconds=0)
        wait_for(lambda: stack.store.assignments(), lambda held: not held, timeout=60, what="every reservation released")
