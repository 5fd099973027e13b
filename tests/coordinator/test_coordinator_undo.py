"""The coordinator's undo against a real etcd and the real tuner process: a converged session whose
best measured progress is below the extender's ``undo_below`` records an ``UndoRecord`` (the
newest pod, the GPU's job types) and applies no configuration; above it, or without a threshold
published, nothing is recorded. The jobs here are played by a reporter thread that writes what a
job's SDK writes (steps/s at the batch size assigned to it), at a chosen fraction of the type's
isolated speed, so that the measured progress is known."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from iadeep.coordinator import CoordinatorService
from iadeep.jobtypes import JobType
from iadeep.state import BannedType, EtcdStateStore, Measurement, PlacementPolicy, UndoRecord
from iadeep.testing import wait_for
from iadeep.tuner import TunerClient

from test_coordinator_sessions import A, B, place, settings  # noqa: I001 - the sessions' own helpers


@contextmanager
def reporting_at(store: EtcdStateStore, model, fractions: dict[str, tuple[str, int, float]],
                 silent: Callable[[str], bool] = lambda pod: False) -> Iterator[None]:
    """Play the jobs: every 0.2 s each pod reports ``fraction x`` its type's isolated steps/s at the
    batch size the coordinator assigned it (its submitted size before any); a pod for which
    ``silent`` says so stops reporting (a job that hangs)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.2):
            for pod, (family, submitted, fraction) in fractions.items():
                if silent(pod):
                    continue
                assigned = store.batch_size(pod)
                size = assigned.batch_size if assigned is not None else submitted
                iso = float(model.isolated_steps_per_s[model.type_id(JobType(family, size))])
                store.add_measurement(Measurement(pod, fraction * iso, size, time.time()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _session(store, etcd_settings, tuner, interference_model, throughputs_path, fraction: float):
    place(store, A, B)
    jobs = {A[0]: (A[1], A[2], fraction), B[0]: (B[1], B[2], fraction)}
    with reporting_at(store, interference_model, jobs):
        svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings), store=store,
                                 tuner=TunerClient(tuner.url), model=interference_model).start()
        try:
            wait_for(lambda: svc.results, bool, timeout=120, what="a finished session")
        finally:
            svc.stop(timeout_s=30)
    return svc.results[0][1]


def test_a_session_measured_below_undo_below_records_the_undo(etcd_store, etcd_settings, tuner, interference_model,
                                                               throughputs_path) -> None:
    store = etcd_store
    store.put_placement(PlacementPolicy("iadeep", 2, time.time(), undo_below=1.0))
    t0 = time.time()
    result = _session(store, etcd_settings, tuner, interference_model, throughputs_path, fraction=0.25)
    assert result.outcome == "undone" and result.rounds >= 1
    assert result.progress < 1.0
    undos = store.undos()
    assert list(undos) == ["pod-b"]  # the newest pod (the last reserved), as the simulator evicts
    u = undos["pod-b"]
    assert u == result.undo
    assert (u.namespace, u.name, u.node, u.gpu) == ("default", "pod-b", "n1", 0)
    assert u.types == (BannedType("ResNet-50", 64), BannedType("Transformer", 64))  # as submitted, reservation order
    assert u.undo_below == 1.0 and 0 <= u.progress < 1.0 and u.outcome == "pending" and u.at >= t0
    assert u.session.startswith("n1.0.")
    assert store.tuning_requests() == []  # acknowledged
    assert result.applied == {}  # no configuration applied: the jobs are back at their sizes from before
    for pod in ("pod-a", "pod-b"):
        a = store.batch_size(pod)
        assert a is None or a.batch_size == 64


def test_a_session_measured_above_undo_below_records_nothing(etcd_store, etcd_settings, tuner, interference_model,
                                                             throughputs_path) -> None:
    store = etcd_store
    store.put_placement(PlacementPolicy("iadeep", 2, time.time(), undo_below=1.0))
    result = _session(store, etcd_settings, tuner, interference_model, throughputs_path, fraction=0.9)
    assert result.outcome == "converged" and result.progress >= 1.0
    assert set(result.applied) == {"pod-a", "pod-b"}
    assert store.undos() == {}


def test_without_a_published_threshold_a_bad_session_is_not_undone(etcd_store, etcd_settings, tuner, interference_model,
                                                                   throughputs_path) -> None:
    """No extender published a placement (or its policy never undoes: ``undo_below`` 0): the
    coordinator cannot know the threshold and undoes nothing."""
    store = etcd_store
    store.put_placement(PlacementPolicy("gandiva", 2, time.time(), undo_below=0.0))
    result = _session(store, etcd_settings, tuner, interference_model, throughputs_path, fraction=0.25)
    assert result.outcome == "converged" and result.progress < 1.0
    assert store.undos() == {}


def test_a_session_that_ends_at_its_deadline_is_never_undone(etcd_store, etcd_settings, tuner, interference_model,
                                                              throughputs_path) -> None:
    """A job stops reporting after the first round: the session ends at a round's deadline with the
    best measured so far below the threshold. Its measurements are incomplete (the simulator's
    sessions always run their trials), so nothing is undone: the best configuration is applied."""
    store = etcd_store
    store.put_placement(PlacementPolicy("iadeep", 2, time.time(), undo_below=1.0))
    place(store, A, B)
    jobs = {A[0]: (A[1], A[2], 0.25), B[0]: (B[1], B[2], 0.25)}
    svc = CoordinatorService(settings(tuner, throughputs_path, etcd_settings, deadline_s=4), store=store,
                             tuner=TunerClient(tuner.url), model=interference_model)
    told = lambda: svc.metrics.rounds._value.get() >= 1  # noqa: E731
    with reporting_at(store, interference_model, jobs, silent=lambda pod: pod == "pod-b" and told()):
        svc.start()
        try:
            wait_for(lambda: svc.results, bool, timeout=120, what="a finished session")
        finally:
            svc.stop(timeout_s=30)
    result = svc.results[0][1]
    assert result.outcome == "deadline" and result.rounds >= 1 and result.progress < 1.0
    assert store.undos() == {}


def test_undo_records_are_validated_strictly(etcd_store) -> None:
    """What a follower would drop as malformed is never written."""
    import pytest

    from iadeep.state import RecordError

    good = UndoRecord("pod-b", "default", "pod-b", "n1", 0, (BannedType("ResNet-50", 64), BannedType("LM", 5)), 0.6, 1.0)
    etcd_store.put_undo(good)
    for bad in (lambda: UndoRecord("pod-c", "default", "pod-c", "n1", 0, (BannedType("ResNet-50", 64),), 0.6, 1.0),  # one type
                lambda: UndoRecord("pod-c", "default", "pod-c", "n1", -1, good.types, 0.6, 1.0),
                lambda: UndoRecord("pod/c", "default", "pod-c", "n1", 0, good.types, 0.6, 1.0),
                lambda: UndoRecord("pod-c", "default", "pod-c", "n1", 0, good.types, 0.6, 1.0, outcome="maybe")):
        with pytest.raises(RecordError):
            etcd_store.put_undo(bad())
    with pytest.raises(RecordError, match=r"UndoRecord: \$\.progress: must be >= 0 and below undo_below"):
        UndoRecord("pod-c", "default", "pod-c", "n1", 0, good.types, 1.2, 1.0)  # not below the threshold: no such record
    assert etcd_store.undos() == {"pod-b": good}
    assert etcd_store.settle_undo(good, "evicted", at=5.0)
    assert not etcd_store.settle_undo(good, "evicted", at=6.0)  # compare and swap: the stored one changed
    assert etcd_store.undos()["pod-b"].outcome == "evicted"
