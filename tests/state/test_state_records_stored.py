"""Stored record JSON: what the store holds reads back, and writes back byte for byte.

``STORED`` are values as etcd holds them, one or more of every record type, each the exact text
``to_json`` gives for that record (keys sorted, compact, ASCII escapes, Python's float form):
floats that Python writes with an exponent (``1e-05``, ``1.7e+16``), non-ASCII text, empty tuples
and default fields. Reading one and writing it again must give the same bytes: the etcd store's
compare-and-swap (``settle_undo``) and the reservations' compares match stored bytes with
``to_json`` of the record read.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from iadeep import state
from iadeep.state import (
    ArrivalRecord,
    Assignment,
    BannedType,
    BatchSizeAssignment,
    GpuInfo,
    GpuState,
    InterferenceSampleRecord,
    JobCheckpoint,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    RecordError,
    TuningRequest,
    UndoRecord,
    WorkloadStatus,
    from_json,
    to_json,
)
from iadeep.state._keys import reservation_from_json, reservation_json

STORED: list[tuple[type, str]] = [
    (GpuInfo, '{"index":3,"mem_gib":31.75,"model":"V100M32","uuid":"GPU-ab12"}'),
    (NodeInventory, '{"allocates":true,"gpus":[{"index":0,"mem_gib":24.0,"model":"","uuid":"GPU-0"},'
                    '{"index":1,"mem_gib":1e-05,"model":"T4","uuid":""}],"node":"node-\\u00b5"}'),
    (JobRecord, '{"batch_size":64,"gang":"g","gpu_models":["V100M16","V100M32"],"mem_gib":12.5,"model":"ResNet-50",'
                '"name":"train-1","namespace":"ns","num_gpus":2,"pod_uid":"uid-1","remaining_s":1234.5,"submitted_at":1.7e+16}'),
    (JobRecord, '{"batch_size":5,"gang":"","gpu_models":[],"mem_gib":8.0,"model":"LM","name":"job-2","namespace":"default",'
                '"num_gpus":1,"pod_uid":"uid-2","remaining_s":0.0,"submitted_at":0.0}'),
    (Assignment, '{"assumed_at":1700000000.123456,"gpu":0,"mem_gib":3.3333333333333335,"node":"n1","pod_uid":"uid-1"}'),
    (GpuState, '{"gpu":0,"mem_used_gib":1.2345678901234568e+17,"node":"n1","pods":["p1","p2"]}'),
    (GpuState, '{"gpu":1,"mem_used_gib":0.0,"node":"n1","pods":[]}'),
    (Measurement, '{"at":1700000002.0,"batch_size":32,"pod_uid":"p1","samples":640,"steps_per_s":3e-07}'),
    (TuningRequest, '{"gpu":0,"node":"n1","pods":["a","b"],"requested_at":100.5}'),
    (InterferenceSampleRecord, '{"at":2.0,"job_batch_size":32,"job_model":"ResNet-50","normalised_throughput":0.5005,'
                               '"partner_batch_size":20,"partner_model":"LM"}'),
    (BatchSizeAssignment, '{"at":1700000000.5,"batch_size":64,"pod_uid":"p1","session":"n.0.1","trial":2}'),
    (WorkloadStatus, '{"batch_size":32,"pod_uid":"p1","samples":10,"started_at":1700000000.0,"state":"completed",'
                     '"updated_at":1700000100.25}'),
    (JobCheckpoint, '{"evictions":2,"first_started_at":1700000000.0,"job_key":"ns.job-a","remaining_s":2400.5,'
                    '"updated_at":1700000100.0}'),
    (PlacementPolicy, '{"at":1.0,"colocation_limit":2,"policy":"gandiva","session":"profile","undo_below":0.95}'),
    (BannedType, '{"batch_size":4,"model":"A3C"}'),
    (UndoRecord, '{"at":5.0,"gpu":0,"name":"train-p2","namespace":"ns","node":"n1","outcome":"evicted","pod_uid":"p2",'
                 '"progress":0.0,"reason":"co-location undone \\u2014 \\u00b5 \\u2264 1","session":"n1.0.1","settled_at":7.25,'
                 '"types":[{"batch_size":64,"model":"ResNet-50"},{"batch_size":5,"model":"LM"}],"undo_below":1.0}'),
    (ArrivalRecord, '{"at":1700000000.5,"batch_size":128,"gpu_milli":null,"job":"uid-1","keep_until":1700086400.5,'
                    '"mem_gib":12.932,"model":"ResNet-50","num_gpus":1}'),
    (ArrivalRecord, '{"at":0.0,"batch_size":1,"gpu_milli":250.0,"job":"uid-2","keep_until":86400.0,"mem_gib":2.0,'
                    '"model":"A3C","num_gpus":8}'),
]

RESERVATION = ('{"assignments":[{"assumed_at":1.5,"gpu":0,"mem_gib":1e-05,"node":"n1","pod_uid":"uid-1"},'
               '{"assumed_at":1.5,"gpu":2,"mem_gib":1e-05,"node":"n1","pod_uid":"uid-1"}],"nonce":"nonce-1"}')


def test_every_record_type_has_a_stored_sample() -> None:
    records = {getattr(state, n) for n in state.__all__ if isinstance(getattr(state, n), type)
               and issubclass(getattr(state, n), msgspec.Struct)}
    assert records == {cls for cls, _ in STORED}


@pytest.mark.parametrize(("cls", "text"), STORED, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(STORED)])
def test_a_stored_record_reads_and_writes_back_the_same_bytes(cls: type, text: str) -> None:
    record = from_json(cls, text)
    assert type(record) is cls
    assert to_json(record) == text
    assert from_json(cls, text.encode()) == record
    assert msgspec.structs.asdict(record).keys() == json.loads(text).keys()


def test_a_record_built_in_code_writes_what_is_stored() -> None:
    """Ints where floats are declared are written as given (``8``), as the store always wrote
    them, and read back as floats."""
    j = JobRecord("uid-2", "default", "job-2", "LM", 5, 1, 8, remaining_s=0, submitted_at=0)
    assert to_json(j) == ('{"batch_size":5,"gang":"","gpu_models":[],"mem_gib":8,"model":"LM","name":"job-2",'
                          '"namespace":"default","num_gpus":1,"pod_uid":"uid-2","remaining_s":0,"submitted_at":0}')
    assert from_json(JobRecord, to_json(j)) == j and isinstance(from_json(JobRecord, to_json(j)).mem_gib, float)
    inv = NodeInventory("node-µ", (GpuInfo(0, 24.0, "GPU-0"), GpuInfo(1, 1e-05, "", "T4")), allocates=True)
    assert to_json(inv) == STORED[1][1]


def test_a_stored_reservation_writes_back_the_same_bytes() -> None:
    assignments, nonce = reservation_from_json(RESERVATION)
    assert assignments == [Assignment("uid-1", "n1", 0, 1e-05, 1.5), Assignment("uid-1", "n1", 2, 1e-05, 1.5)]
    assert reservation_json(assignments, nonce) == RESERVATION


@pytest.mark.parametrize(("build", "message"), [
    (lambda: NodeInventory("n", (GpuInfo(0, 1.0), GpuInfo(0, 2.0))), r"NodeInventory: \$\.gpus: GPU indexes repeat"),
    (lambda: GpuState("n", 0, 1.0, ("a", "b", "a")), r"GpuState: \$\.pods: a pod is listed twice"),
    (lambda: UndoRecord("p", "ns", "n", "n1", 0, (BannedType("a", 1), BannedType("b", 1)), -0.1, 1.0),
     r"UndoRecord: \$\.progress: must be >= 0"),
    (lambda: UndoRecord("p", "ns", "n", "n1", 0, (BannedType("a", 1), BannedType("b", 1)), float("nan"), 1.0),
     r"UndoRecord: \$\.progress"),
    (lambda: ArrivalRecord("j", 10.0, 9.0, 1, "LM", 5, 8.0), r"ArrivalRecord: \$\.keep_until: must be >= at"),
])
def test_a_record_that_breaks_a_rule_over_its_fields_cannot_be_built(build, message) -> None:
    with pytest.raises(RecordError, match=message):
        build()


@pytest.mark.parametrize(("cls", "text", "message"), [
    (NodeInventory, '{"node":"n","gpus":[{"index":0,"mem_gib":1},{"index":0,"mem_gib":2}]}',
     r"^NodeInventory: \$\.gpus: GPU indexes repeat: \[0, 0\]$"),
    (NodeInventory, '{"node":"n","gpus":[{"index":0,"mem_gib":0}]}', r"^NodeInventory: \$\.gpus\[0\]\.mem_gib: .*> 0.*got 0$"),
    (NodeInventory, '{"node":"n","gpus":[{"index":-1,"mem_gib":1}]}', r"^NodeInventory: \$\.gpus\[0\]\.index: .*>= 0.*got -1$"),
    (GpuState, '{"node":"n","gpu":0,"pods":["a","a"]}', r"^GpuState: \$\.pods: a pod is listed twice"),
    (JobRecord, '{"pod_uid":"p","namespace":"ns","name":"n","model":"m","batch_size":1,"num_gpus":0,"mem_gib":1}',
     r"^JobRecord: \$\.num_gpus: .*>= 1.*got 0$"),
    (JobRecord, '{"pod_uid":"p","namespace":"ns","name":"n","model":"m","batch_size":1,"num_gpus":1,"mem_gib":1e400}',
     r"^JobRecord: \$\.mem_gib: "),
    (JobRecord, '{"pod_uid":"p","namespace":"ns","name":"n","model":"m","batch_size":1,"num_gpus":1,"mem_gib":NaN}',
     r"^JobRecord: invalid JSON"),
    (JobCheckpoint, '{"job_key":"k","remaining_s":-1}', r"^JobCheckpoint: \$\.remaining_s: .*got -1$"),
    (UndoRecord, '{"pod_uid":"a/b","namespace":"n","name":"x","node":"n","gpu":0,"types":[{"model":"a","batch_size":1},'
                 '{"model":"b","batch_size":1}],"progress":0,"undo_below":1}', r'^UndoRecord: \$\.pod_uid: .*got "a/b"$'),
    (UndoRecord, '{"pod_uid":"a","namespace":"n","name":"x","node":"n","gpu":0,"types":[{"model":"a","batch_size":1},'
                 '{"model":"","batch_size":1}],"progress":0,"undo_below":1}', r'^UndoRecord: \$\.types\[1\]\.model: '),
    (UndoRecord, '{"pod_uid":"a","namespace":"n","name":"x","node":"n","gpu":0,"types":[{"model":"a","batch_size":1},'
                 '{"model":"b","batch_size":1}],"progress":0,"undo_below":1,"outcome":"maybe"}',
     r"^UndoRecord: \$\.outcome: must be one of pending, evicted, gone, kept, got 'maybe'$"),
    (ArrivalRecord, '{"job":"a/b","at":1,"keep_until":2,"num_gpus":1,"model":"LM","batch_size":5,"mem_gib":8}',
     r'^ArrivalRecord: \$\.job: .*got "a/b"$'),
    (ArrivalRecord, '{"job":"a","at":1,"keep_until":2,"num_gpus":1,"model":"LM","batch_size":5,"mem_gib":8,"gpu_milli":0}',
     r"^ArrivalRecord: \$\.gpu_milli: "),
    (WorkloadStatus, '{"pod_uid":"p","state":"paused","batch_size":8}',
     r"^WorkloadStatus: \$\.state: must be one of running, completed, failed, got 'paused'$"),
    (Measurement, '{"pod_uid":"p","steps_per_s":1,"batch_size":true,"at":1}', r"^Measurement: \$\.batch_size: .*`bool`"),
    # integers beyond JSON's exact range (2**53 - 1): the services' int64 arrays would overflow
    (NodeInventory, '{"node":"n","gpus":[{"index":100000000000000000000,"mem_gib":16}]}',
     r"^NodeInventory: \$\.gpus\[0\]\.index: .*<= 9007199254740991"),
    (JobRecord, '{"pod_uid":"p","namespace":"ns","name":"n","model":"m","batch_size":1,"num_gpus":9007199254740992,'
                '"mem_gib":1}', r"^JobRecord: \$\.num_gpus: .*<= 9007199254740991"),
    (Assignment, '{"pod_uid":"p","node":"n","gpu":-1,"mem_gib":1,"assumed_at":0}', r"^Assignment: \$\.gpu: .*>= 0"),
    # a learned sample outside [0, 8] or of a batch size below 1 would skew (or overflow) the learner
    (InterferenceSampleRecord, '{"job_model":"a","job_batch_size":64,"partner_model":"b","partner_batch_size":64,'
                               '"normalised_throughput":1e308}', r"^InterferenceSampleRecord: \$\.normalised_throughput: .*<= 8"),
    (InterferenceSampleRecord, '{"job_model":"a","job_batch_size":64,"partner_model":"b","partner_batch_size":64,'
                               '"normalised_throughput":-0.5}', r"^InterferenceSampleRecord: \$\.normalised_throughput: .*>= 0"),
    (InterferenceSampleRecord, '{"job_model":"a","job_batch_size":64,"partner_model":"b","partner_batch_size":-5,'
                               '"normalised_throughput":0.5}', r"^InterferenceSampleRecord: \$\.partner_batch_size: .*>= 1"),
])
def test_a_malformed_stored_record_names_its_type_field_and_value(cls: type, text: str, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        from_json(cls, text)


@pytest.mark.parametrize(("record", "path"), [
    (ArrivalRecord("j", 1.0, float("inf"), 2, "LM", 5, 8.0), r"\$\.keep_until"),
    (Measurement("p", float("nan"), 8, 1.0), r"\$\.steps_per_s"),
    (UndoRecord("a", "n", "x", "node", 0, (BannedType("a", 1), BannedType("b", 1)), 0.5, 1.0, at=float("-inf")),
     r"\$\.at"),
])
def test_a_record_with_a_value_json_cannot_hold_is_refused_when_written(record, path) -> None:
    """NaN and infinity are not JSON: stored, every reader would drop the record as malformed."""
    with pytest.raises(RecordError, match=rf"^{type(record).__name__}: {path}: must be finite"):
        to_json(record)
