"""Records of the node side (batch sizes set by the coordinator, jobs' own status) on both stores:
round trip, watch, end of life with the job record, malformed values refused naming the field."""

from __future__ import annotations

import pytest
from state_support import job

from iadeep.state import (BatchSizeAssignment, JobCheckpoint, Measurement, PlacementPolicy, RecordError, WorkloadStatus,
                          from_json, to_json)


def test_batch_size_and_workload_round_trip_and_die_with_the_job(store) -> None:
    store.put_job(job("p1"))
    assert store.batch_size("p1") is None and store.workload("p1") is None
    events = store.watch("batchsizes/p1", timeout_s=0.5)
    a = BatchSizeAssignment("p1", 64, "n.0.1", 2, 1700000000.5)
    store.set_batch_size(a)
    store.set_batch_size(BatchSizeAssignment("p1", 32, "n.0.1", -1, 1700000001.0))
    assert [from_json(BatchSizeAssignment, e["value"]).batch_size for e in events if e["type"] == "put"] == [64, 32]
    assert store.batch_size("p1").batch_size == 32
    w = WorkloadStatus("p1", "running", 32, 0, 1700000000.0, 1700000000.0)
    store.put_workload(w)
    assert store.workload("p1") == w
    store.add_measurement(Measurement("p1", 3.5, 32, 1700000002.0, samples=640))
    assert store.measurements("p1")[0].samples == 640
    assert store.delete_job("p1")
    assert store.batch_size("p1") is None and store.workload("p1") is None and store.measurements("p1") == []


@pytest.mark.parametrize(("cls", "text", "field"), [
    (BatchSizeAssignment, '{"pod_uid": "p", "batch_size": 0}', "batch_size"),
    (WorkloadStatus, '{"pod_uid": "p", "state": "paused", "batch_size": 8}', "state"),
    (Measurement, '{"pod_uid": "p", "steps_per_s": -1.0, "batch_size": 8, "at": 1.0}', "steps_per_s"),
    (BatchSizeAssignment, '{"pod_uid": "p", "batch_size": "big"}', "batch_size"),
    (PlacementPolicy, '{"policy": "iadeep", "colocation_limit": 0}', "colocation_limit"),
])
def test_malformed_records_name_the_field(cls, text, field) -> None:
    with pytest.raises(RecordError, match=field):
        from_json(cls, text)


def test_old_measurements_without_samples_still_parse() -> None:
    m = from_json(Measurement, '{"pod_uid": "p", "steps_per_s": 2.0, "batch_size": 8, "at": 1.0}')
    assert m.samples == 0 and from_json(Measurement, to_json(m)) == m


def test_placement_round_trip_replace_and_refusal(store) -> None:
    """The extender's placement (the device plugins' gpu-count slots per GPU): absent until
    published, replaced by the next publication; a limit below 1 is refused, nothing stored."""
    assert store.placement() is None
    store.put_placement(PlacementPolicy("iadeep", 2, 1700000000.0))
    store.put_placement(PlacementPolicy("antman", 3, 1700000001.0))
    assert store.placement() == PlacementPolicy("antman", 3, 1700000001.0)
    with pytest.raises(RecordError, match="colocation_limit"):
        store.put_placement(PlacementPolicy("iadeep", 0))
    assert store.placement().colocation_limit == 3


def test_a_job_checkpoint_is_kept_by_job_across_its_pods(store) -> None:
    """An evicted pod's progress is written under its job's key; the replacement pod reads it by
    the same key; the job's completion deletes it. A bad key or value is refused, nothing written."""
    assert store.checkpoint("ns.job-a") is None
    c = JobCheckpoint("ns.job-a", 2400.5, evictions=1, updated_at=1700000100.0, first_started_at=1700000000.0)
    store.put_checkpoint(c)
    store.put_job(job("p1"))
    assert store.delete_job("p1")  # a pod's records go with the pod; the job's checkpoint stays
    assert store.checkpoint("ns.job-a") == c and store.checkpoint("ns.job-b") is None
    with pytest.raises(RecordError):
        store.put_checkpoint(JobCheckpoint("ns/job-a", 1.0))
    assert store.delete_checkpoint("ns.job-a") and not store.delete_checkpoint("ns.job-a")
    assert store.checkpoint("ns.job-a") is None
