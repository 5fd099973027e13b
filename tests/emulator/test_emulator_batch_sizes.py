"""The emulator applies the node coordinator's batch sizes (the ``batchsizes/`` records a training
job's SDK follows) and reports throughput at the new size, with the state store's in-memory
implementation (the same protocol as etcd's) and pods as the API serves them."""

from __future__ import annotations

import pytest

from iadeep.emulator import EmulatorService
from iadeep.emulator._settings import EmulatorSettings
from iadeep.jobtypes import JobType
from iadeep.state import BatchSizeAssignment, GpuInfo, MemoryStateStore, NodeInventory


def _pod(uid: str, model: str, batch: int, gpu: int = 0) -> dict:
    return {"metadata": {"uid": uid, "namespace": "ns", "name": uid,
                         "annotations": {"iadeep.io/gpu-index": str(gpu), "iadeep.io/model": model,
                                         "iadeep.io/batch-size": str(batch), "iadeep.io/duration-s": "3600",
                                         "iadeep.io/emulated": "true", "iadeep.io/emulation-speedup": "100"}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


@pytest.fixture
def service(model):
    store = MemoryStateStore()
    svc = EmulatorService(EmulatorSettings(measurement_noise=0.0), store=store, kube=None, model=model,
                          clock=lambda: 1000.0)
    svc.nodes["n1"] = NodeInventory("n1", (GpuInfo(0, 32.0, "GPU-0"),))
    return svc, store


def test_an_assigned_batch_size_changes_the_type_and_is_reported_at_once(service, model):
    svc, store = service
    svc._on_pod("ADDED", _pod("a", "ResNet-50", 64))
    svc._on_pod("ADDED", _pod("b", "ResNet-18", 64))
    before = svc.gpus.jobs["a"].rate
    svc.apply_batch_size(BatchSizeAssignment("a", 32, "s", 0, 999.0))
    job = svc.gpus.jobs["a"]
    assert model.types[job.type_id] == JobType("ResNet-50", 32) and model.types[job.base_type_id].batch_size == 64
    assert job.rate != before  # the pair's rates follow the new type (and the goodput gain of the size)
    assert store.measurements("a")[-1].batch_size == 32  # the SDK reports after a switch
    assert svc.status()["resized"] == 1 and svc.pods["a"].trials == 1


def test_a_size_never_measured_is_refused_and_an_early_one_applies_at_start(service, model):
    svc, store = service
    svc._on_pod("ADDED", _pod("a", "ResNet-50", 64))
    svc.apply_batch_size(BatchSizeAssignment("a", 63, "s", 0, 999.0))
    assert model.types[svc.gpus.jobs["a"].type_id].batch_size == 64 and svc.status()["errors"] == 1
    svc.apply_batch_size(BatchSizeAssignment("c", 128, "s", -1, 999.0))  # before the pod is seen
    svc._on_pod("ADDED", _pod("c", "ResNet-50", 64))
    assert model.types[svc.gpus.jobs["c"].type_id].batch_size == 128
    assert model.types[svc.gpus.jobs["c"].base_type_id].batch_size == 64
