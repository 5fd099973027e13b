"""Every record type survives a trip through each store (and its JSON form)."""

from __future__ import annotations

import json

import pytest
from state_support import inventory, job

from iadeep.state import (
    Assignment,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    RecordError,
    TuningRequest,
    from_json,
    to_json,
)


def test_inventory_round_trip(store):
    a, b = inventory("node-a", 2, 40.0), inventory("node-b", 8, 80.0)
    store.put_inventory(a)
    store.put_inventory(b)
    assert store.inventories() == {"node-a": a, "node-b": b}
    a2 = inventory("node-a", 3, 24.0)
    store.put_inventory(a2)  # replaces
    assert store.inventories()["node-a"] == a2


def test_job_round_trip(store):
    j = JobRecord("uid-1", "ns", "train-1", "Transformer", 64, 2, 12.5, remaining_s=1234.5, submitted_at=17.25)
    store.put_job(j)
    assert store.jobs() == {"uid-1": j}
    j2 = JobRecord("uid-1", "ns", "train-1", "Transformer", 64, 2, 12.5, remaining_s=10.0, submitted_at=17.25)
    store.put_job(j2)
    assert store.jobs() == {"uid-1": j2}
    assert store.delete_job("uid-1") is True
    assert store.delete_job("uid-1") is False
    assert store.jobs() == {}


def test_assignment_gpu_state_tuning_round_trip(store):
    store.put_inventory(inventory("n1", 2))
    got = store.reserve(job("p1", 10.0, 2), "n1", [0, 1], colocation_limit=2, now_s=100.5)
    assert got == [Assignment("p1", "n1", 0, 10.0, 100.5), Assignment("p1", "n1", 1, 10.0, 100.5)]
    assert store.assignments() == got
    assert store.assignments("n1") == got
    assert store.gpu_states() == {
        ("n1", 0): GpuState("n1", 0, 10.0, ("p1",)),
        ("n1", 1): GpuState("n1", 1, 10.0, ("p1",)),
    }
    assert store.tuning_requests() == [
        TuningRequest("n1", 0, ("p1",), 100.5),
        TuningRequest("n1", 1, ("p1",), 100.5),
    ]
    assert store.jobs()["p1"] == job("p1", 10.0, 2)


def test_measurements_oldest_first(store):
    ms = [Measurement("p1", 10.0 + i, 32, 1000.0 + i) for i in range(5)]
    for m in ms:
        store.add_measurement(m)
    store.add_measurement(Measurement("p10", 1.0, 8, 1.0))  # a pod whose uid extends p1's
    assert store.measurements("p1") == ms
    assert store.measurements("p10") == [Measurement("p10", 1.0, 8, 1.0)]
    assert store.measurements("nope") == []
    store.put_job(job("p1"))
    store.delete_job("p1")
    assert store.measurements("p1") == []
    assert store.measurements("p10") == [Measurement("p10", 1.0, 8, 1.0)]


def test_samples_oldest_first_and_batched(store):
    first = [InterferenceSampleRecord("ResNet-50", 32, "LM", 20 + i, 0.5 + i / 1000, at=float(i)) for i in range(3)]
    store.add_samples(first)
    many = [InterferenceSampleRecord("A3C", 4, "CycleGAN", 1, i / 500, at=float(i)) for i in range(250)]
    store.add_samples(many)  # more than one etcd transaction
    store.add_samples([])
    assert store.samples() == first + many


@pytest.mark.parametrize(
    "record",
    [
        inventory("n", 2),
        job("p"),
        Assignment("p", "n", 1, 4.0, 2.0),
        GpuState("n", 0, 4.0, ("a", "b")),
        Measurement("p", 3.5, 16, 9.0),
        TuningRequest("n", 0, ("a",), 1.0),
        InterferenceSampleRecord("a", 1, "b", 2, 0.7, 3.0),
    ],
    ids=lambda r: type(r).__name__,
)
def test_json_round_trip(record):
    assert from_json(type(record), to_json(record)) == record
    assert from_json(type(record), to_json(record).encode()) == record


@pytest.mark.parametrize(
    "text, field",
    [("{", "invalid JSON"), ("[]", "object"), ('{"node": "n", "gpu": 0, "bogus": 1}', "bogus"), ('{"node": "n"}', "GpuState")],
)
def test_malformed_record_names_the_problem(text, field):
    with pytest.raises(RecordError, match=field):
        from_json(GpuState, text)


def test_malformed_stored_record_is_a_record_error(etcd_store):
    """A value someone else wrote badly raises RecordError (not a crash inside the store)."""
    etcd_store._post("/kv/put", {"key": _b64(etcd_store.keys.node("bad")), "value": _b64("{not json")})
    with pytest.raises(RecordError, match="NodeInventory"):
        etcd_store.inventories()


@pytest.mark.parametrize("bad", ["", "a/b"])
def test_names_with_slashes_are_rejected(store, bad):
    with pytest.raises(RecordError):
        store.put_inventory(NodeInventory(bad, ()))
    with pytest.raises(RecordError):
        store.put_job(job(bad))
    assert store.jobs() == {} and store.inventories() == {}


def _b64(s: str) -> str:
    import base64

    return base64.b64encode(s.encode()).decode()


def test_watch_event_values_are_record_json(store):
    events = store.watch("jobs/", timeout_s=0.3)
    store.put_job(job("w1"))
    got = list(events)
    assert [e["type"] for e in got] == ["put"]
    assert got[0]["key"] == f"{store.keys.prefix}/jobs/w1"
    assert from_json(JobRecord, got[0]["value"]) == job("w1")
    assert json.loads(got[0]["value"])["pod_uid"] == "w1"
