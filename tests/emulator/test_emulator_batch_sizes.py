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
                                         "iadeep.io/emulated": "true", "iadeep.io/emulation-speedup": "100",
                                         "iadeep.io/gpu-mem-gib": "8"}},  # as the extender's bind sets it
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


def test_the_progress_pass_writes_a_record_only_once_the_extenders_projection_drifted(model):
    """The extender projects a record's work left at 1 per wall second (``iadeep.extender._view``);
    at speedup 100 a job's truth falls 100 times faster. A pass rewrites the record once the gap
    exceeds 5 % of the work left (at least 60 emulated s), not on every pass."""
    now = [1000.0]
    store = MemoryStateStore()
    svc = EmulatorService(EmulatorSettings(measurement_noise=0.0, report_measurements=False), store=store, kube=None,
                          model=model, clock=lambda: now[0])
    svc.nodes["n1"] = NodeInventory("n1", (GpuInfo(0, 32.0, "GPU-0"),))
    svc._on_pod("ADDED", _pod("a", "ResNet-50", 64))  # 3,600 s of work at 100x, alone: rate 1
    assert store.jobs()["a"].remaining_s == pytest.approx(3600.0)  # written at its start
    now[0] = 1000.5  # truth 3,550, projection 3,599.5: within 60 s
    assert svc.progress_pass() == 0
    now[0] = 1001.0  # truth 3,500, projection 3,599: 99 s off, under 5 % of 3,500 (175 s)
    assert svc.progress_pass() == 0
    now[0] = 1002.0  # truth 3,400, projection 3,598: 198 s off
    assert svc.progress_pass() == 1 and store.jobs()["a"].remaining_s == pytest.approx(3400.0)
    now[0] = 1002.5
    assert svc.progress_pass() == 0
    now[0] = 1035.0  # near the end: truth 100 s, off by 3,267 s
    assert svc.progress_pass() == 1 and store.jobs()["a"].remaining_s == pytest.approx(100.0)
    now[0] = 1035.5  # truth 50, projection 99.5: 49.5 s off, more than 5 % but within the 60-s floor
    assert svc.progress_pass() == 0
