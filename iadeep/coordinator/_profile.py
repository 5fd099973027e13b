"""One profile session of one GPU: Gandiva's measurement of a packing, run by the node coordinator.

The session the coordinator runs when the extender's policy profiles instead of tuning
(:attr:`iadeep.state.PlacementPolicy.session` ``profile``; :attr:`iadeep.policy.Policy.node_session`,
gandiva's). It is the live half of :meth:`iadeep.policy.gandiva.Gandiva.tune`, which measures one
trial of the packed jobs at their current sizes and undoes the packing when the normalised
throughputs sum below 1:

1. the jobs are read from their records and their current batch sizes (the last assignment, else
   the submitted size); one job: nothing to profile, the request is acknowledged;
2. one round, as a tuning session's round (:mod:`iadeep.coordinator._session`): every job's
   current size is written again (trial 0; the reservations already hold it: nothing moves),
   the coordinator waits until every job reported at it once, then for ``reports`` more reports of
   each, at most ``deadline_s``; each job's normalised throughput is its mean steps/s over the
   type's isolated steps/s (Gavel's);
3. :func:`iadeep.policy.undo_rule` with the summed normalised throughputs, the pods in reservation
   order and their types as submitted, and the extender's ``undo_below`` (gandiva's 1.0): below it,
   an :class:`~iadeep.state.UndoRecord` names the newest pod and the types, and the extender bans the
   pair and evicts the pod (:mod:`iadeep.extender._undo`), as for iadeep's undo. The measured pair
   is stored as interference samples; the request is acknowledged.

No tuner takes part: a profile searches nothing, so it needs no study, no warm start and no tuner
round trip (docs/design/2026-12-04-gandiva-live.md).

A profile that ends otherwise never undoes (as a tuning session): the request changed or a job
finished during the round (``superseded`` / ``job_left``), or the round passed its deadline
(``deadline``: a job that stopped reporting; the request is acknowledged, nothing recorded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.state import StateStore, TuningRequest
from iadeep.tuner import Proposal, TunedJob
from iadeep.coordinator._metrics import CoordinatorMetrics
from iadeep.coordinator._rounds import Superseded, check_still_valid, measure_round, pair_samples, undo_record
from iadeep.coordinator._session import SessionResult, session_name
from iadeep.coordinator._settings import RoundSettings

__all__ = ["run_profile"]

log = logging.getLogger(__name__)


def run_profile(request: TuningRequest, *, store: StateStore, model: InterferenceModel, rounds: RoundSettings,
                metrics: CoordinatorMetrics | None = None, clock: Callable[[], float] = time.time,
                undo_below: float | None = None) -> SessionResult:
    """Profile one GPU's packing once and undo it when it measures below ``undo_below`` (module docstring).

    Args:
        request: the GPU's tuning request (its pods in reservation order).
        store: the state store.
        model: the interference model (isolated steps/s per job type).
        rounds: the round's ``reports`` and ``deadline_s`` (``warm_start`` is unused: no tuner).
        metrics: the coordinator's metrics (rounds, round seconds, timeouts), or ``None``.
        clock: Unix time (s) for the records written.
        undo_below: the policy's threshold on the summed normalised throughput (``None`` or 0:
            never undo), from the extender's :class:`~iadeep.state.PlacementPolicy`.

    Returns:
        A :class:`~iadeep.coordinator.SessionResult`: ``undone`` (:attr:`~SessionResult.undo`
        recorded), ``profiled`` (the packing is kept; ``progress`` is the measured sum),
        ``single_job``, ``untunable`` (a job type the measurements do not cover: nothing to
        normalise by), ``superseded``, ``job_left`` or ``deadline``. Nothing is ever applied.

    Raises:
        StoreUnavailable: etcd failed (the request stays; the caller retries the session).
    """
    t0 = time.monotonic()
    records = store.jobs()
    pods = [p for p in request.pods if p in records]
    name = session_name(request)
    if len(pods) <= 1:
        store.complete_tuning(request)
        return SessionResult("single_job")
    sizes = {}
    for p in pods:
        current = store.batch_size(p)
        sizes[p] = current.batch_size if current is not None else int(records[p].batch_size)
    known = set(model.types)
    missing = [f"{records[p].model}/{sizes[p]}" for p in pods if JobType(records[p].model, sizes[p]) not in known]
    if missing:
        log.warning("profile %s: job type(s) %s not in the measurements: nothing to profile", name, missing)
        store.complete_tuning(request)
        return SessionResult("untunable")
    jobs = [TunedJob(p, records[p].model, sizes[p], sizes[p], tunable=False, mem_request_gib=float(records[p].mem_gib))
            for p in pods]
    result = SessionResult("profiled")
    try:
        check_still_valid(request, store, pods)
        normalised = measure_round(name, Proposal(0, dict(sizes)), jobs, store, model, rounds, clock, metrics)
        check_still_valid(request, store, pods)  # a round the GPU's set changed under measured another packing
    except Superseded as exc:
        log.info("profile %s ends early: %s", name, exc)
        if exc.outcome != "superseded":  # superseded: the new request is the one to acknowledge
            store.complete_tuning(request)
        return SessionResult(exc.outcome)
    if normalised is None:
        if metrics:
            metrics.measurement_timeouts.inc()
        log.warning("profile %s: no measurement from every job within %.0f s; the packing is kept", name,
                    rounds.deadline_s)
        store.complete_tuning(request)
        return SessionResult("deadline")
    result.rounds, result.progress = 1, float(sum(normalised.values()))
    if metrics:
        metrics.rounds.inc()
        metrics.round_seconds.observe(time.monotonic() - t0)
    store.add_samples(pair_samples(sizes, jobs, normalised, clock()))
    undo = undo_record(request, "converged", result.progress, pods, records, undo_below, name, clock)
    if undo is not None:
        store.put_undo(undo)
        result.outcome, result.undo = "undone", undo
        log.info("profile %s: %s; recorded for the extender to evict %s/%s and ban %s", name, undo.reason,
                 undo.namespace, undo.name, [f"{t.model}/{t.batch_size}" for t in undo.types])
    else:
        log.info("profile %s: packing kept, measured sum %.3f (%s)", name, result.progress,
                 {k: round(v, 3) for k, v in normalised.items()})
    store.complete_tuning(request)
    if metrics:
        metrics.session_seconds.observe(time.monotonic() - t0)
    return result
