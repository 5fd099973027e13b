"""The coordinator's profile session (gandiva's packing profile) against a real etcd: one round at
the jobs' current batch sizes; a measured normalised-throughput sum below ``undo_below`` records an
``UndoRecord`` for the newest pod and the GPU's types as submitted, at or above it the packing is
kept; no batch size moves and no tuner takes part (the service runs it with its tuner URL pointing
at a port nobody serves). The jobs are played by the reporter of the undo tests (steps/s at a chosen
fraction of the type's isolated speed at the size assigned), so the measured sum is known exactly."""

from __future__ import annotations

import time

import pytest

from iadeep.coordinator import CoordinatorService, CoordinatorSettings, RoundSettings, run_profile
from iadeep.state import BannedType, BatchSizeAssignment, PlacementPolicy
from iadeep.testing import wait_for

from test_coordinator_sessions import A, B, NODE, place  # noqa: I001 - the sessions' own helpers
from test_coordinator_undo import reporting_at

ROUND = RoundSettings(deadline_s=20.0, reports=2)


def _profile(store, model, fractions: tuple[float, float], *, undo_below: float | None = 1.0, rounds=ROUND,
             silent=lambda pod: False, sizes: dict[str, int] | None = None):
    place(store, A, B)
    for pod, size in (sizes or {}).items():  # a job running at another size than it was submitted with
        store.set_batch_size(BatchSizeAssignment(pod, size, "earlier", -1, time.time()))
    (request,) = store.tuning_requests()
    jobs = {A[0]: (A[1], A[2], fractions[0]), B[0]: (B[1], B[2], fractions[1])}
    with reporting_at(store, model, jobs, silent=silent):
        return run_profile(request, store=store, model=model, rounds=rounds, undo_below=undo_below)


def test_a_packing_measured_below_one_is_undone_as_gandiva_undoes_it(etcd_store, interference_model) -> None:
    store = etcd_store
    t0 = time.time()
    result = _profile(store, interference_model, (0.25, 0.5))
    assert result.outcome == "undone" and result.rounds == 1 and result.applied == {}
    assert result.progress == pytest.approx(0.75, abs=1e-9)  # the sum of the normalised throughputs
    undos = store.undos()
    assert list(undos) == ["pod-b"]  # the newest pod (the last reserved), as the simulator's gandiva evicts
    u = undos["pod-b"]
    assert u == result.undo and u.outcome == "pending" and u.at >= t0
    assert (u.namespace, u.name, u.node, u.gpu) == ("default", "pod-b", NODE, 0)
    assert u.types == (BannedType("ResNet-50", 64), BannedType("Transformer", 64))  # as submitted, reservation order
    assert u.undo_below == 1.0 and u.progress == pytest.approx(0.75, abs=1e-9)
    # one round at the current sizes: written again (trial 0), nothing moved, nothing else written
    for pod, size in ((A[0], A[2]), (B[0], B[2])):
        a = store.batch_size(pod)
        assert (a.batch_size, a.trial) == (size, 0)
    assert sorted(round(s.normalised_throughput, 6) for s in store.samples()) == [0.25, 0.5]
    assert store.tuning_requests() == []  # acknowledged


def test_a_packing_measured_at_or_above_one_is_kept(etcd_store, interference_model) -> None:
    store = etcd_store
    result = _profile(store, interference_model, (0.5, 0.5))
    assert result.outcome == "profiled" and result.undo is None and result.rounds == 1
    assert result.progress == pytest.approx(1.0, abs=1e-9)  # not below 1: kept (the rule is strict)
    assert store.undos() == {}
    assert store.tuning_requests() == []


def test_without_a_threshold_a_profile_never_undoes(etcd_store, interference_model) -> None:
    result = _profile(etcd_store, interference_model, (0.2, 0.2), undo_below=None)
    assert result.outcome == "profiled" and result.progress == pytest.approx(0.4, abs=1e-9)
    assert etcd_store.undos() == {}


def test_the_jobs_are_measured_at_their_current_sizes(etcd_store, interference_model) -> None:
    """A job assigned another size than submitted is profiled at it (normalised by that type's
    isolated speed), and the ban still names the types as submitted."""
    store = etcd_store
    other = next(t.batch_size for t in interference_model.types if t.model == A[1] and t.batch_size != A[2])
    result = _profile(store, interference_model, (0.3, 0.4), sizes={A[0]: other})
    assert result.outcome == "undone" and result.progress == pytest.approx(0.7, abs=1e-9)
    assert store.batch_size(A[0]).batch_size == other and store.batch_size(B[0]).batch_size == B[2]
    assert result.undo.types[0] == BannedType(A[1], A[2])


def test_a_job_that_stops_reporting_ends_the_profile_at_its_deadline_without_an_undo(etcd_store,
                                                                                  interference_model) -> None:
    store = etcd_store
    result = _profile(store, interference_model, (0.1, 0.1), rounds=RoundSettings(deadline_s=2.0, reports=1),
                      silent=lambda pod: pod == B[0])
    assert result.outcome == "deadline" and result.undo is None
    assert store.undos() == {} and store.tuning_requests() == []


def test_the_service_runs_a_profile_when_the_extender_publishes_one_and_needs_no_tuner(
        etcd_store, etcd_settings, interference_model, throughputs_path) -> None:
    store = etcd_store
    store.put_placement(PlacementPolicy("gandiva", 2, time.time(), undo_below=1.0, session="profile"))
    place(store, A, B)
    settings = CoordinatorSettings(node=NODE, tuner_url="http://127.0.0.1:9", throughputs_file=throughputs_path,
                                   idle_s=1.0, round=ROUND, etcd=etcd_settings)
    from iadeep.tuner import TunerClient

    jobs = {A[0]: (A[1], A[2], 0.3), B[0]: (B[1], B[2], 0.3)}
    with reporting_at(store, interference_model, jobs):
        svc = CoordinatorService(settings, store=store, tuner=TunerClient(settings.tuner_url),
                                 model=interference_model).start()
        try:
            wait_for(lambda: svc.results, bool, timeout=60, what="a finished profile")
        finally:
            svc.stop(timeout_s=30)
    (_, result), = svc.results
    assert result.outcome == "undone" and list(store.undos()) == ["pod-b"]
