"""GPU models in the extender: a node's model comes from its inventory, a pod may require models
(the same semantics as the simulator's ``gpu_spec``, issue 10)."""

from __future__ import annotations

import pytest
from extender_support import gpu_pod, wire

from iadeep.extender import Snapshot, TypeResolver, ViewBase, build_view, job_record, pod_demand
from iadeep.extender._wire import Pod
from iadeep.policy import Placement, make_policy
from iadeep.state import GpuInfo, JobRecord, NodeInventory, from_json, to_json

DEFAULTS = {"gpu_mem_resource": "iadeep.io/gpu-mem", "gpu_count_resource": "iadeep.io/gpu-count",
            "default_model": "ResNet-50", "default_batch_size": 64, "default_duration_s": 3600.0}


@pytest.fixture(scope="module")
def types(model) -> TypeResolver:
    return TypeResolver(model, "ResNet-50", 64)


@pytest.fixture
def snapshot() -> Snapshot:
    inv = {"t4": NodeInventory("t4", tuple(GpuInfo(i, 16.0, f"GPU-t4-{i}", "T4") for i in range(2))),
           "v100": NodeInventory("v100", tuple(GpuInfo(i, 32.0, f"GPU-v-{i}", "V100M32") for i in range(2))),
           "old": NodeInventory("old", (GpuInfo(0, 32.0, "GPU-old-0"),))}  # published without a model
    return Snapshot(inv, {}, {}, taken_at_s=0.0)


def test_inventory_model_reaches_the_view_and_the_policy(snapshot, types, model):
    job = JobRecord("p", "ns", "p", "ResNet-18", 64, 1, 4.0, remaining_s=10.0, gpu_models=("V100M32", "V100M16"))
    view, req = build_view(snapshot, job, types, now_s=1.0, slots=2)
    assert view.node_names == ("old", "t4", "v100")
    assert view.gpu_model.tolist() == ["", "T4", "T4", "V100M32", "V100M32"]
    assert req.gpu_models == ("V100M32", "V100M16")
    policy = make_policy("exclusive", model)
    result = policy.filter(req, view)
    assert set(result.feasible) == {"v100"}
    assert "GPU model not among those the job accepts" in result.failed["t4"]
    placed = policy.place(req, view)
    assert isinstance(placed, Placement) and all(view.gpu_model[g] == "V100M32" for g in placed.gpus)
    # the restricted view (one node, as the extender's bind uses) keeps the models
    base = ViewBase.from_snapshot(snapshot, types, slots=2)
    assert base.restrict("t4").gpu_model.tolist() == ["T4", "T4"]
    # a pod without a requirement fits anywhere
    anyjob = JobRecord("q", "ns", "q", "ResNet-18", 64, 1, 4.0, remaining_s=10.0)
    view, req = build_view(snapshot, anyjob, types, now_s=1.0, slots=2)
    assert set(policy.filter(req, view).feasible) == {"old", "t4", "v100"}


def test_pod_annotation_and_records_round_trip():
    pod = Pod.model_validate(wire(gpu_pod("p", mem="8", annotations={"iadeep.io/gpu-models": "V100M16|V100M32, T4"})))
    d = pod_demand(pod, **DEFAULTS)
    assert d is not None and d.gpu_models == ("V100M16", "V100M32", "T4")
    rec = job_record(d, 5.0)
    assert rec.gpu_models == ("V100M16", "V100M32", "T4")
    assert from_json(JobRecord, to_json(rec)) == rec
    inv = NodeInventory("n", (GpuInfo(0, 16.0, "GPU-0", "T4"),))
    assert from_json(NodeInventory, to_json(inv)) == inv
    # records written before the field existed still decode (model "", any GPU model)
    assert from_json(GpuInfo, '{"index": 0, "mem_gib": 16.0, "uuid": ""}').model == ""
