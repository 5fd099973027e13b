"""Every record type survives a trip through each store (and its JSON form)."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from state_support import inventory, job

from iadeep.state import (
    UNDO_OUTCOMES,
    ArrivalRecord,
    Assignment,
    BannedType,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    RecordError,
    TuningRequest,
    UndoRecord,
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


def test_one_malformed_record_does_not_hide_a_lists_others(store, caplog):
    """Many writers append samples, measurements and tuning requests: one record no reader accepts
    (written past the store's checks) is logged and left out, the others are listed."""
    from iadeep.state._kv import Put

    good = InterferenceSampleRecord("ResNet-50", 32, "LM", 20, 0.5, at=1.0)
    store.add_samples([good])
    store.add_measurement(Measurement("p", 3.5, 16, 9.0))
    store.put_inventory(inventory("n", 2))
    store.reserve(job("p"), "n", [0], colocation_limit=2, now_s=1.0)
    prefix = store.keys.prefix
    store.backend.txn([], [Put(f"{prefix}/samples/99999999999999999999-zz-000000",
                               '{"job_model":"a","job_batch_size":64,"partner_model":"b","partner_batch_size":64,'
                               '"normalised_throughput":22.75}'),
                           Put(f"{prefix}/tuning/n9/7", '{"node":"n9","gpu":-1,"pods":[],"requested_at":0}'),
                           Put(store.keys.measurement("p", "99999999999999999999-zz-000000"),
                               '{"pod_uid":"p","steps_per_s":1,"batch_size":16,"at":10,"samples":-300}')])
    assert store.samples() == [good]
    assert [(t.node, t.gpu) for t in store.tuning_requests()] == [("n", 0)]
    assert [m.steps_per_s for m in store.measurements("p")] == [3.5]
    assert caplog.text.count("malformed record") == 3


@pytest.mark.parametrize(("record", "field"), [
    (Measurement("p", 1.0, 16, 10.0, -300), r"\$\.samples: .*>= 0"),
    (InterferenceSampleRecord("a", 64, "b", 64, 22.75), r"\$\.normalised_throughput: .*<= 8"),
    (TuningRequest("n", -1, (), 0.0), r"\$\.gpu: .*>= 0"),
])
def test_a_record_no_reader_would_accept_is_refused_when_written(store, record, field):
    with pytest.raises(RecordError, match=rf"^{type(record).__name__}: {field}"):
        to_json(record)


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
        UndoRecord("p", "ns", "train-p", "n", 1, (BannedType("a", 1), BannedType("b", 2)), 0.4, 1.0, "n.1.2", "r", 3.0),
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
    etcd_store.backend._post("/kv/put", {"key": _b64(etcd_store.keys.node("bad")), "value": _b64("{not json")})
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


def _undo(pod: str = "p2", progress: float = 0.6) -> UndoRecord:
    return UndoRecord(pod, "ns", f"train-{pod}", "n1", 0, (BannedType("ResNet-50", 64), BannedType("LM", 5)), progress, 1.0,
                      session="n1.0.1", reason="co-location undone", at=5.0)


def test_undo_records_round_trip_settle_once_and_are_followed(store):
    """Both stores: put, list (with the followed state), follow as ``undo`` changes, settle by compare
    and swap (a second settle of the same record, e.g. another worker's, changes nothing)."""
    start = store.revision() + 1
    u = _undo()
    store.put_undo(u)
    assert store.undos() == {"p2": u}
    assert store.list_state().undos == {"p2": u}
    assert store.settle_undo(u, "evicted", at=7.0)
    settled = store.undos()["p2"]
    assert (settled.outcome, settled.settled_at) == ("evicted", 7.0)
    assert not store.settle_undo(u, "gone", at=8.0) and store.undos()["p2"] == settled
    assert not store.settle_undo(_undo("nobody"), "gone", at=8.0)  # no such record: nothing written
    with pytest.raises(RecordError):
        store.settle_undo(settled, "pending", at=9.0)
    changes = [c for batch in store.changes(start, idle_s=0.3) for c in batch.changes if c.kind == "undo"]
    assert [(c.name, c.record) for c in changes] == [("p2", u), ("p2", settled)]


def test_a_placement_record_without_undo_below_reads_as_never():
    """A record an extender wrote before the field existed: its coordinators never undo."""
    p = from_json(PlacementPolicy, '{"policy":"iadeep","colocation_limit":2,"at":1.0}')
    assert p.undo_below == 0.0
    with pytest.raises(RecordError, match="undo_below"):
        from_json(PlacementPolicy, '{"policy":"iadeep","colocation_limit":2,"undo_below":-1}')


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                        ["pod_uid", "namespace", "name", "node", "gpu", "types", "model", "batch_size", "progress",
                         "undo_below", "outcome", "x"]), inner, max_size=6), max_leaves=20))
def test_any_undo_record_text_parses_or_is_a_record_error(value):
    """Fuzz target of the undo record (an input surface of the extender): anything a writer may
    put there either parses into a record that keeps its rules or raises RecordError."""
    try:
        text = json.dumps(value)
    except ValueError:
        return
    try:
        u = from_json(UndoRecord, text)
    except RecordError:
        return
    assert len(u.types) >= 2 and 0 <= u.progress < u.undo_below and u.outcome in UNDO_OUTCOMES


def test_a_placement_record_names_its_session_kind_and_reads_as_tune_without_it():
    """The node coordinators run the session kind the extender names; a record without it tunes."""
    assert from_json(PlacementPolicy, '{"policy":"iadeep","colocation_limit":2}').session == "tune"
    p = PlacementPolicy("gandiva", 2, 1.0, undo_below=1.0, session="profile")
    assert from_json(PlacementPolicy, to_json(p)) == p
    with pytest.raises(RecordError, match=r"\$\.session: must be one of tune, profile, got 'search'"):
        from_json(PlacementPolicy, '{"policy":"gandiva","colocation_limit":2,"session":"search"}')


def test_arrival_records_round_trip_oldest_first_and_are_pruned_after_their_use(store, caplog):
    """Both stores: arrivals written in one call (more than one transaction's worth) list oldest
    first; a malformed record is logged and left out, never read as another; a record is pruned
    once its ``keep_until`` has passed, the malformed one with the first prune; nothing else goes."""
    many = [ArrivalRecord(f"j{i:03d}", 1000.0 - i, 1000.0 - i + 86400.0, 1, "ResNet-50", 128, 12.9)
            for i in range(store.max_txn_ops + 5)]
    gang = ArrivalRecord("gang", 500.0, 500.0 + 4 * 86400.0, 8, "LM", 5, 8.0)
    share = ArrivalRecord("share", 600.0, 601.0, 1, "A3C", 1, 2.0, gpu_milli=250.0)
    store.put_arrivals([*many, gang, share])
    store.put_undo(_undo())  # another folder: never listed nor pruned as an arrival
    store._put(store.keys.arrival("bad"), '{"job":"bad","at":"yesterday"}')
    with caplog.at_level("WARNING"):
        listed = store.arrivals()
    assert [r.job for r in listed] == ["gang", "share", *reversed([r.job for r in many])]
    assert listed[0] == gang and listed[1] == share
    assert "arrivals/bad" in caplog.text and "ArrivalRecord" in caplog.text
    assert store.prune_arrivals(0.0) == 1  # the malformed record only
    assert store.prune_arrivals(many[-3].keep_until + 0.5) == 4  # the three oldest of many, and the share
    left = {r.job for r in store.arrivals()}
    assert left == {"gang", *(r.job for r in many[:-3])}
    assert store.undos() == {"p2": _undo()}
    # the same job again: the earliest meeting that is still of use stays
    store.put_arrivals([msgspec.structs.replace(gang, at=700.0, keep_until=700.0 + 86400.0)])
    assert [r for r in store.arrivals() if r.job == "gang"] == [gang]
    store.put_arrivals([msgspec.structs.replace(gang, at=400.0)])
    assert [r.at for r in store.arrivals() if r.job == "gang"] == [400.0]
    late = msgspec.structs.replace(gang, at=10 * 86400.0, keep_until=11 * 86400.0)  # after the stored one's use
    store.put_arrivals([late])
    assert [r for r in store.arrivals() if r.job == "gang"] == [late]
    store._put(store.keys.arrival("gang"), "{broken")
    store.put_arrivals([gang])
    assert [r for r in store.arrivals() if r.job == "gang"] == [gang]
    with pytest.raises(RecordError):
        store.put_arrivals([msgspec.structs.replace(gang, job="a/b")])
