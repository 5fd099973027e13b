"""The GPU emulator reads a pod as the extender does: one demand (:func:`iadeep.podspec.pod_demand`)
over the API's pod object and over kube-scheduler's wire pod, and the job record the emulator
keeps up to date is the extender's (its gang and GPU models too), with the work left and the
assume time its own."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import msgspec
import pytest

from iadeep.emulator import EmulatorService, EmulatorSettings
from iadeep.extender import Pod, job_record
from iadeep.extender import pod_demand as extender_demand
from iadeep.podspec import PodFacts, PodSpecError, pod_demand
from iadeep.state import GpuInfo, MemoryStateStore, NodeInventory

CREATED_S = datetime(2026, 11, 30, 14, 56, 47, tzinfo=timezone.utc).timestamp()
DEFAULTS = {"default_model": "ResNet-50", "default_batch_size": 64, "default_duration_s": 3600.0}

#: a gang member as the API returns it after the extender's bind (two GPUs of 12 GiB each)
BOUND = {
    "metadata": {"uid": "u-7", "namespace": "ns", "name": "big-0-x1", "creationTimestamp": "2026-11-30T14:56:47Z",
                 "labels": {"iadeep.io/gang": "big"},
                 "annotations": {"iadeep.io/model": "Transformer", "iadeep.io/batch-size": "32",
                                 "iadeep.io/duration-s": "90.5", "iadeep.io/gpu-models": "V100M16|V100M32",
                                 "iadeep.io/gang-size": "2", "batch.kubernetes.io/job-completion-index": "0",
                                 "iadeep.io/gpu-index": "0,1", "iadeep.io/gpu-mem-gib": "12",
                                 "iadeep.io/assume-time": "1700000000500000000", "iadeep.io/emulated": "true"}},
    "spec": {"nodeName": "n1", "priority": 5,
             "containers": [{"name": "main", "resources": {"limits": {"iadeep.io/gpu-mem": "20", "iadeep.io/gpu-count": "2"}}},
                            {"name": "side", "resources": {"requests": {"iadeep.io/gpu-mem": "4"}}}],
             "initContainers": [{"name": "warm", "resources": {"limits": {"iadeep.io/gpu-mem": "3"}}}]},
    "status": {"phase": "Running"},
}


def test_the_api_pod_and_the_wire_pod_give_one_demand() -> None:
    d = pod_demand(PodFacts.from_api(BOUND), **DEFAULTS)
    assert d == extender_demand(Pod.model_validate(BOUND), gpu_mem_resource="iadeep.io/gpu-mem",
                                gpu_count_resource="iadeep.io/gpu-count", **DEFAULTS)
    assert (d.num_gpus, d.model, d.batch_size, d.duration_s, d.gpu_models) == (2, "Transformer", 32, 90.5,
                                                                              ("V100M16", "V100M32"))
    assert d.mem_gib == 12.0  # (20 + 4) over 2 GPUs; the init container's 3 is smaller
    assert (d.gang, d.gang_size, d.gang_index, d.priority, d.created_s) == ("big", 2, 0, 5, CREATED_S)


def test_a_malformed_api_pod_is_a_pod_spec_error_not_a_crash() -> None:
    bad = copy.deepcopy(BOUND)
    bad["metadata"]["annotations"]["iadeep.io/batch-size"] = "big"
    with pytest.raises(PodSpecError, match="iadeep.io/batch-size='big' is not an integer"):
        pod_demand(PodFacts.from_api(bad), **DEFAULTS)
    assert pod_demand(PodFacts.from_api({"metadata": None, "spec": {"containers": "x"}}), **DEFAULTS) is None


def test_the_emulator_keeps_the_extenders_job_record(model) -> None:
    svc = EmulatorService(EmulatorSettings(measurement_noise=0.0), store=MemoryStateStore(), kube=None, model=model,
                          clock=lambda: 1000.0)
    svc.nodes["n1"] = NodeInventory("n1", (GpuInfo(0, 32.0, "GPU-0"), GpuInfo(1, 32.0, "GPU-1")))
    svc._on_pod("ADDED", BOUND)
    got = svc._job_record(BOUND, svc.gpus.jobs["u-7"].gpus, 42.0)
    want = job_record(extender_demand(Pod.model_validate(BOUND), gpu_mem_resource="iadeep.io/gpu-mem",
                                      gpu_count_resource="iadeep.io/gpu-count", **DEFAULTS), 1700000000.5)
    assert got.remaining_s == 42.0
    assert got == msgspec.structs.replace(want, remaining_s=42.0)
    assert (got.gang, got.gpu_models) == ("big", ("V100M16", "V100M32"))
    job = svc.gpus.jobs["u-7"]
    assert model.types[job.type_id].model == "Transformer"
