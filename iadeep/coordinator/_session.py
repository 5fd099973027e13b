"""One tuning session of one GPU, run by the node coordinator.

A session follows a :class:`~iadeep.state.TuningRequest` (a GPU whose co-location set changed):

1. the jobs are read from their records (model, submitted batch size, the pod's memory request)
   and their current batch sizes; a session of one job returns it to its submitted size and its
   reservation to what that size needs (at least its request). The session may use the GPU
   memory no pod outside it reserves (the GPU's memory from the node's inventory, less the other
   pods' reservations): a job may grow into memory nobody reserved, never below its request
   (:class:`iadeep.tuner.SearchSpace`). **A job never runs at a size its reservation does not
   hold**: before the jobs switch to a configuration, each pod's reservation grows to cover both
   its old and its new size (one transaction, :meth:`iadeep.state.StateStore.resize`; a job
   switches at its next step boundary, so until it reports at the new size it may use either);
   only after every job reported at its new size do the reservations shrink to the new sizes. A
   switch whose growth is refused (the memory was taken meanwhile) writes nothing: the jobs keep
   the sizes whose reservations they hold;
2. the tuner gets a session named after the request (``<node>.<gpu>.<requested_at µs>``: the same
   name after a coordinator restart, so the tuner's stored study resumes) and a warm start, the
   configurations the learned interference model predicts best
   (:func:`iadeep.tuner.predicted_warm_start`, which the simulator's sessions use too);
3. rounds: ask the tuner; write every job's batch size (``batchsizes/<pod>``); watching only
   the session's jobs' reports (``measurements/<pod>/`` of each, one stream), wait until every
   job reported at its new size once (they all switched), then for ``reports`` more reports of
   each, at most ``deadline_s``; tell the tuner the normalised throughputs (steps/s over the
   type's isolated steps/s); repeat until the tuner is done;
4. the best configuration is written to **every** co-located job (trial ``-1``), the measured
   pairs are stored as interference samples (the extender's predictions learn from them), the
   request is acknowledged and the tuner's study deleted.

**Undo** (the rule the simulator's policy applies, :func:`iadeep.policy.undo_rule`): when a
converged session's best measured summed progress is below the extender's ``undo_below``
(published in :class:`~iadeep.state.PlacementPolicy`; 0 or no record: never), the best
configuration is not applied; the jobs a trial moved go back to the sizes they ran at before the
session (as the simulator keeps them: an undo applies no configuration), the session's newest pod
(the last in reservation order) and the GPU's job types are recorded in an
:class:`~iadeep.state.UndoRecord`, and the request is acknowledged. The extender, which holds the
``pods/eviction`` right, bans the pair in its policy and evicts the pod; the coordinator evicts
nothing. A session that ends any other way (a job left, superseded, a round past its deadline)
never undoes: its measurements are incomplete, and the simulator's sessions always run their
trials to the end.

A session ends early, cleanly, when a job finishes (its SDK reports ``completed``/``failed``),
when the request changes (a job left or came: the new request starts a new session; the jobs a
trial moved go back to the sizes they ran at before, as the simulator discards an interrupted
session), or when a round passes its deadline (the configuration measured best so far is applied).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from iadeep.interference import InterferenceModel, InterferenceSample, OnlineInterferenceLearner
from iadeep.jobtypes import JobType
from iadeep.state import (
    AllocationConflict,
    BatchSizeAssignment,
    InterferenceSampleRecord,
    StateStore,
    TuningRequest,
    UndoRecord,
)
from iadeep.tuner import Outcome, Proposal, SearchSpace, SpaceError, StopRule, TunedJob, predicted_warm_start
from iadeep.coordinator._metrics import CoordinatorMetrics
from iadeep.coordinator._rounds import (
    Superseded,
    alive,
    assign_sizes,
    check_still_valid,
    measure_round,
    pair_samples,
    undo_record,
)
from iadeep.coordinator._settings import RoundSettings

__all__ = ["TunerApi", "SessionResult", "run_session", "session_name"]

log = logging.getLogger(__name__)


class TunerApi(Protocol):
    """What a session needs of the tuner (:class:`iadeep.tuner.TunerClient` over HTTP)."""

    def open(self, name: str, jobs: Sequence[TunedJob], warm_start: Sequence[Mapping[str, int]] = (),
             stop: StopRule | None = None, *, gpu_mem_gib: float | None = None) -> Outcome: ...

    def ask(self, name: str) -> tuple[Proposal | None, Outcome]: ...

    def tell(self, name: str, trial: int, normalised: Mapping[str, float]) -> Outcome: ...

    def close_session(self, name: str) -> bool: ...


@dataclass
class SessionResult:
    """How a session ended.

    Attributes:
        outcome: ``converged``, ``undone`` (converged below ``undo_below``: :attr:`undo` was
            recorded), ``profiled`` (a profile session kept the packing:
            :func:`iadeep.coordinator._profile.run_profile`), ``single_job``, ``job_left``, ``superseded``, ``deadline``,
            ``untunable`` (a job whose model or batch size the measurements do not cover) or
            ``no_inventory`` (the node publishes no such GPU: nothing ran, the request stays and the
            service retries it with back-off).
        applied: pod UID -> batch size written at the end (empty when nothing was applied).
        restored: pod UID -> batch size written back when the session was superseded: the size
            the job ran at before the session, for the jobs a trial had moved (empty otherwise).
        rounds: rounds measured by this run of the session.
        progress: summed progress rate of the applied configuration as measured (NaN if not); of
            an undone or profiled session, the measured sum it was judged on.
        undo: the undo recorded (``undone`` only), else ``None``.
    """

    outcome: str
    applied: dict[str, int] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    progress: float = math.nan
    undo: UndoRecord | None = None


def session_name(request: TuningRequest) -> str:
    """The tuner session of a request (URL-safe, stable across coordinator restarts)."""
    return f"{request.node}.{request.gpu}.{round(request.requested_at * 1e6)}"


def _nearest(model: InterferenceModel, family: str, batch: int) -> int:
    sizes = model.batch_sizes(family)
    return min(sizes, key=lambda b: (abs(b - batch), b)) if sizes else batch


def run_session(request: TuningRequest, *, store: StateStore, tuner: TunerApi, model: InterferenceModel,
                rounds: RoundSettings, metrics: CoordinatorMetrics | None = None,
                clock: Callable[[], float] = time.time, undo_below: float | None = None) -> SessionResult:
    """Run one session to its end (module docstring).

    Args:
        undo_below: the policy's undo threshold (summed progress rate; ``None`` or 0: never undo),
            from the extender's :class:`~iadeep.state.PlacementPolicy`.

    Raises:
        StoreUnavailable: etcd failed (the request stays; the caller retries the session).
        TunerUnavailable, TunerError: the tuner failed (likewise).
    """
    t0 = time.monotonic()
    records = store.jobs()
    pods = [p for p in request.pods if p in records]
    name = session_name(request)
    if len(pods) <= 1:
        applied = {}
        for p in pods:
            job = records[p]
            size = _nearest(model, job.model, job.batch_size)
            now = store.batch_size(p)
            old = now.batch_size if now is not None else size
            try:  # its reservations as a session's (max(request, the size's memory))
                one = SearchSpace(model, [TunedJob(p, job.model, size, old, mem_request_gib=float(job.mem_gib))])
                cover, after = _cover(one, {p: old}, {p: size}), one.reservations_gib({p: size})
            except SpaceError:  # sizes the measurements do not cover: its request
                cover = after = {p: float(job.mem_gib)}
            if _switch(store, request, name, -1, clock, {p: size}, cover, after, deadline_s=rounds.deadline_s,
                       wait=old != size):
                applied[p] = size
        store.complete_tuning(request)
        return SessionResult("single_job", applied)
    jobs = []
    for p in pods:
        job = records[p]
        base = _nearest(model, job.model, job.batch_size)
        current = store.batch_size(p)
        jobs.append(TunedJob(p, job.model, base, current.batch_size if current else base, tunable=job.num_gpus == 1,
                             mem_request_gib=float(job.mem_gib)))
    gpu = _inventory_gpu(store, request)
    if gpu is None:
        # no published GPU (the node's device plugin gone, its inventory's lease expired): no
        # reservation can move, so no trial could start; the request stays for when it is back
        log.warning("session %s: node %s publishes no GPU %d (device plugin gone?): deferred", name, request.node,
                    request.gpu)
        return SessionResult("no_inventory")
    cap = _session_memory(store, request, pods, float(gpu.mem_gib))
    try:
        space = SearchSpace(model, jobs, gpu_mem_gib=cap)
    except SpaceError as exc:  # a job the measurements do not cover: nothing to tune, ever
        log.warning("session %s: not tunable: %s", name, exc)
        store.complete_tuning(request)
        return SessionResult("untunable")
    warm = _warm_start(space, store, model, rounds.warm_start)
    tuner.open(name, jobs, warm, gpu_mem_gib=cap)
    done_rounds = 0
    outcome: Outcome | None = None
    samples: list[InterferenceSampleRecord] = []
    ending = "converged"
    running = space.current()  # the sizes the jobs run at (their reservations cover them)
    try:
        while True:
            check_still_valid(request, store, pods)
            proposal, outcome = tuner.ask(name)
            if proposal is None:
                break
            r0 = time.monotonic()
            # both sizes covered while the jobs switch (module docstring); refused: nothing written
            if not _resize(store, request, _cover(space, running, proposal.config)):
                check_still_valid(request, store, pods)
                raise Superseded("superseded", "the GPU's memory changed under the session")
            normalised = measure_round(name, proposal, jobs, store, model, rounds, clock, metrics)
            running = dict(proposal.config)
            if normalised is not None:  # every job reported at its new size: it switched
                _resize(store, request, space.reservations_gib(running))
            if normalised is None:
                if metrics:
                    metrics.measurement_timeouts.inc()
                check_still_valid(request, store, pods)  # a job that left explains the silence
                ending = "deadline"
                log.warning("session %s: trial %d got no measurement from every job within %.0f s; "
                            "applying the best measured so far", name, proposal.trial, rounds.deadline_s)
                break
            outcome = tuner.tell(name, proposal.trial, normalised)
            done_rounds += 1
            samples += pair_samples(proposal.config, jobs, normalised, clock())
            if metrics:
                metrics.rounds.inc()
                metrics.round_seconds.observe(time.monotonic() - r0)
            log.info("session %s: trial %d %s -> %s (best %.3f after %d)", name, proposal.trial, proposal.config,
                     {k: round(v, 3) for k, v in normalised.items()}, outcome.best_objective, outcome.trials)
    except Superseded as exc:
        ending = exc.outcome
        log.info("session %s ends early: %s", name, exc)
    if samples:
        store.add_samples(samples)
    result = SessionResult(ending, rounds=done_rounds)
    if ending == "superseded":
        # back to the sizes from before the session only where their memory can be held again
        if _resize(store, request, _cover(space, running, space.current())):
            result.restored = _restore(jobs, store, name, clock)
        else:
            log.warning("session %s: the jobs keep the trial's sizes %s: the memory of the earlier ones was taken",
                        name, running)
    elif (undo := undo_record(request, ending, outcome.best_objective if outcome is not None else math.nan, pods, records,
                        undo_below, name, clock)) is not None:
        # the simulator's undo applies no configuration: back to the sizes from before the session
        if _resize(store, request, _cover(space, running, space.current())):
            result.restored = _restore(jobs, store, name, clock)
        store.put_undo(undo)
        result.outcome, result.undo, result.progress = "undone", undo, undo.progress
        log.info("session %s: %s; recorded for the extender to evict %s/%s and ban %s", name, undo.reason,
                 undo.namespace, undo.name, [f"{t.model}/{t.batch_size}" for t in undo.types])
        store.complete_tuning(request)
    else:
        best = outcome.best if outcome is not None else running
        live = [j for j in jobs if j.key in best and alive(store, j.key)]
        target = {**running, **{j.key: best[j.key] for j in live}}
        keys = [j.key for j in live]
        cover, after = _cover(space, running, target), space.reservations_gib(target)
        if not _switch(store, request, name, -1, clock, {k: target[k] for k in keys}, {k: cover[k] for k in keys},
                       {k: after[k] for k in keys}, deadline_s=rounds.deadline_s, wait=target != running):
            # the memory is no longer there: the jobs keep the sizes they hold memory for
            best = running
            for k in keys:
                store.set_batch_size(BatchSizeAssignment(k, running[k], name, -1, clock()))
        result.applied = {j.key: best[j.key] for j in live}
        result.progress = outcome.best_objective if outcome is not None else math.nan
        store.complete_tuning(request)
    tuner.close_session(name)
    if metrics:
        metrics.session_seconds.observe(time.monotonic() - t0)
    return result


def _restore(jobs: Sequence[TunedJob], store: StateStore, name: str, clock: Callable[[], float]) -> dict[str, int]:
    """Put the jobs a superseded session's trials moved back to the sizes they ran at before it.

    The simulator discards an interrupted session (its jobs keep the sizes they had), and so does
    the live system: the next session, for the GPU's new set, starts from a configuration that
    was chosen, not from whichever trial was in flight. Sessions of one GPU run one after another
    (:class:`~iadeep.coordinator.CoordinatorService`), so the next one reads the restored sizes.
    """
    restored = {}
    for j in jobs:
        now = store.batch_size(j.key)
        if alive(store, j.key) and now is not None and now.batch_size != j.batch_size:
            store.set_batch_size(BatchSizeAssignment(j.key, j.batch_size, name, -1, clock()))
            restored[j.key] = j.batch_size
    return restored


def _inventory_gpu(store: StateStore, request: TuningRequest):
    """The request's GPU in its node's published inventory (:class:`~iadeep.state.NodeInventory`), or
    ``None`` when the node publishes none or not that GPU."""
    inventory = store.inventories().get(request.node)
    return next((g for g in inventory.gpus if g.index == request.gpu), None) if inventory else None


def _session_memory(store: StateStore, request: TuningRequest, pods: Sequence[str], gpu_mem_gib: float) -> float:
    """GPU memory (GiB) left to a session's jobs: the GPU's (``gpu_mem_gib``, from its node's
    inventory) less what pods outside the session reserve on it."""
    held = [a for a in store.assignments(request.node) if a.gpu == request.gpu]
    return gpu_mem_gib - sum(a.mem_gib for a in held if a.pod_uid not in pods)


def _cover(space: SearchSpace, old: Mapping[str, int], new: Mapping[str, int]) -> dict[str, float]:
    """Per job, the memory (GiB) that covers both configurations: what it may use while it switches."""
    a, b = space.reservations_gib(old), space.reservations_gib(new)
    return {k: max(a[k], b[k]) for k in a}


def _switch(store: StateStore, request: TuningRequest, name: str, trial: int, clock: Callable[[], float],
            sizes: Mapping[str, int], cover: Mapping[str, float], after: Mapping[str, float], *, deadline_s: float,
            wait: bool) -> bool:
    """Move jobs to ``sizes`` (module docstring): the reservations to ``cover`` first (False, nothing
    written, when refused), then the batch sizes; with ``wait``, once every job reported at its new
    size (at most ``deadline_s``), the reservations shrink to ``after``; without, at once."""
    if not _resize(store, request, cover):
        return False
    if not wait:
        for p, b in sizes.items():
            store.set_batch_size(BatchSizeAssignment(p, b, name, trial, clock()))
        _resize(store, request, after)
        return True
    left = set(sizes)
    with contextlib.closing(assign_sizes(store, name, trial, sizes, clock, deadline_s)) as reports:
        for m in reports:
            if m is not None:
                left.discard(m.pod_uid)
                if not left:
                    break
    if not left:
        _resize(store, request, after)
    else:  # a job that did not report keeps the covering reservation (the safe side)
        log.info("session %s: %s did not report at the new size within %.0f s; reservations kept", name, sorted(left),
                 deadline_s)
    return True


def _resize(store: StateStore, request: TuningRequest, sizes: Mapping[str, float]) -> bool:
    """Move the reservations of the session's pods on its GPU to ``sizes`` (GiB per pod; only
    those that change and still hold one there); False when the store refused (the memory was
    taken, a pod left)."""
    now = {a.pod_uid: a.mem_gib for a in store.assignments(request.node) if a.gpu == request.gpu}
    change = {p: float(v) for p, v in sizes.items() if p in now and abs(now[p] - float(v)) > 1e-9}
    if not change:
        return True
    try:
        store.resize(request.node, request.gpu, change)
    except AllocationConflict as exc:
        log.warning("tuning of %s/gpu%d: reservations not moved: %s", request.node, request.gpu, exc)
        return False
    return True


def _warm_start(space: SearchSpace, store: StateStore, model: InterferenceModel, n: int) -> list[dict[str, int]]:
    """The ``n`` configurations the online learner (fed with every stored sample) predicts best:
    :func:`iadeep.tuner.predicted_warm_start`, as the simulator's sessions (the policy core's
    learner, fed with the same samples, predicts the same)."""
    if n <= 0:
        return []
    learner = OnlineInterferenceLearner(model.types)
    known = set(model.types)
    for s in store.samples():
        a, b = JobType(s.job_model, s.job_batch_size), JobType(s.partner_model, s.partner_batch_size)
        if a in known and b in known:
            learner.observe(InterferenceSample(a, b, s.normalised_throughput))
    predicted = np.where(model.fits, learner.matrix(), 0.0)
    return predicted_warm_start(space, predicted, n)


