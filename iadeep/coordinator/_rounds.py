"""The parts of a measured round that a tuning session (:mod:`iadeep.coordinator._session`) and a
profile session (:mod:`iadeep.coordinator._profile`) share.

- :func:`check_still_valid` / :class:`Superseded`: a session stops when its GPU's request changed
  (a job came or left) or one of its jobs finished;
- :func:`assign_sizes` writes a trial's batch sizes and follows the jobs' reports at them;
  :func:`measure_round` waits, at most ``RoundSettings.deadline_s``, until every job reported at
  its new size once, then for ``RoundSettings.reports`` more reports of each, and returns each
  job's normalised throughput: its mean steps/s over the type's isolated steps/s (Gavel's);
- :func:`pair_samples`: a two-job round as two interference samples, one per ordered pair;
- :func:`undo_record`: :func:`iadeep.policy.undo_rule` over a converged session's measured
  summed progress, as an :class:`~iadeep.state.UndoRecord` for the extender to carry out.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence

import numpy as np

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.policy import undo_rule
from iadeep.state import (
    MAX_NORMALISED_THROUGHPUT,
    BannedType,
    BatchSizeAssignment,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    RecordError,
    StateStore,
    TuningRequest,
    UndoRecord,
    from_json,
)
from iadeep.tuner import Proposal, TunedJob
from iadeep.coordinator._metrics import CoordinatorMetrics
from iadeep.coordinator._settings import RoundSettings

log = logging.getLogger(__name__)

__all__ = ["Superseded", "alive", "assign_sizes", "check_still_valid", "measure_round", "pair_samples", "undo_record"]


class Superseded(Exception):
    """The session's request changed or a job finished during it.

    Attributes:
        outcome: the session's outcome for it, ``superseded`` or ``job_left``.
    """

    def __init__(self, outcome: str, why: str) -> None:
        super().__init__(why)
        self.outcome = outcome


def alive(store: StateStore, pod: str) -> bool:
    """Whether ``pod``'s job still runs (no workload status recorded yet counts as running)."""
    st = store.workload(pod)
    return st is None or st.state == "running"


def check_still_valid(request: TuningRequest, store: StateStore, pods: Sequence[str]) -> None:
    """Raise :class:`Superseded` when the request changed or a job finished."""
    current = next((t for t in store.tuning_requests() if (t.node, t.gpu) == (request.node, request.gpu)), None)
    if current != request:
        raise Superseded("superseded", "the GPU's co-location set changed")
    for p in pods:
        if not alive(store, p):
            raise Superseded("job_left", f"job {p} finished")


def assign_sizes(store: StateStore, name: str, trial: int, sizes: Mapping[str, int], clock: Callable[[], float],
                 deadline_s: float) -> Generator[Measurement | None, None, None]:
    """Write the jobs' batch sizes (``sizes``, pod -> size) and follow their reports for at most
    ``deadline_s``: per event of the watch, the report it carries when it is one of these jobs'
    at its new size made after the write, else ``None`` (so a caller sees every event).

    Only the session's jobs are watched (``measurements/<pod>/``, one etcd watch each on one
    stream): other jobs' reports never reach a round; the watch is opened before the writes, so
    no report is missed."""
    deadline = time.monotonic() + deadline_s
    events = store.watch([f"measurements/{p}/" for p in sizes], timeout_s=deadline_s)
    t_set = clock()
    for p, b in sizes.items():
        store.set_batch_size(BatchSizeAssignment(p, b, name, trial, t_set))
    return _reports(events, sizes, t_set, deadline)


def _reports(events: Iterator[Mapping[str, str]], sizes: Mapping[str, int], t_set: float,
             deadline: float) -> Generator[Measurement | None, None, None]:
    """The generator half of :func:`assign_sizes` (the writes happen before its first step)."""
    try:
        for ev in events:
            if time.monotonic() > deadline:
                return
            m = None
            if ev.get("type") == "put":
                try:
                    m = from_json(Measurement, ev["value"])
                except RecordError:
                    m = None
            if m is not None and (m.pod_uid not in sizes or m.batch_size != sizes[m.pod_uid] or m.at <= t_set):
                m = None
            yield m
    finally:
        if hasattr(events, "close"):
            events.close()  # type: ignore[union-attr]


def measure_round(name: str, proposal: Proposal, jobs: Sequence[TunedJob], store: StateStore,
                  model: InterferenceModel, rounds: RoundSettings, clock: Callable[[], float],
             metrics: CoordinatorMetrics | None = None) -> dict[str, float] | None:
    """Write the trial's batch sizes and wait for the jobs' normalised throughputs at them.

    Returns:
        job key -> normalised throughput, or ``None`` when the deadline passed first.
    """
    switched: dict[str, float] = {}  # pod -> time of its first report at the new size
    collected: dict[str, list[float]] = {j.key: [] for j in jobs}
    keys = {j.key for j in jobs}
    sizes = {j.key: proposal.config[j.key] for j in jobs}
    with contextlib.closing(assign_sizes(store, name, proposal.trial, sizes, clock, rounds.deadline_s)) as reports:
        for m in reports:
            if metrics:
                metrics.measurement_events.inc()
            if m is None:
                continue
            if len(switched) < len(keys):
                switched.setdefault(m.pod_uid, m.at)
                continue
            if m.at > max(switched.values()):  # every job had switched before this window began
                collected[m.pod_uid].append(m.steps_per_s)
            if all(len(v) >= rounds.reports for v in collected.values()):
                break
    if not all(collected.values()):
        return None
    out = {}
    for j in jobs:
        tid = model.type_id(JobType(j.model, proposal.config[j.key]))
        reports = collected[j.key][: rounds.reports]
        mean = sum(x / len(reports) for x in reports)  # each term <= its report: finite for any finite reports
        out[j.key] = mean / float(model.isolated_steps_per_s[tid])
    return out


def pair_samples(config: Mapping[str, int], jobs: Sequence[TunedJob], normalised: Mapping[str, float],
             at: float) -> list[InterferenceSampleRecord]:
    """One sample per ordered pair of a two-job configuration (more jobs: not a pair measurement).
    A normalised throughput outside ``[0, MAX_NORMALISED_THROUGHPUT]`` (a job reporting steps/s far
    beyond the interference table's isolated rate: another GPU, or a unit error) is logged and
    not kept: stored, no reader would accept it."""
    if len(jobs) != 2:
        return []
    a, b = jobs
    out = []
    for x, y in ((a, b), (b, a)):
        value = float(normalised[x.key])
        if not 0.0 <= value <= MAX_NORMALISED_THROUGHPUT:
            log.warning("sample of %s beside %s not kept: normalised throughput %.3g outside [0, %g]", x.key, y.key,
                        value, MAX_NORMALISED_THROUGHPUT)
            continue
        out.append(InterferenceSampleRecord(x.model, config[x.key], y.model, config[y.key], value, at))
    return out


def undo_record(request: TuningRequest, ending: str, progress: float, pods: Sequence[str], records: Mapping[str, JobRecord],
          undo_below: float | None, name: str, clock: Callable[[], float]) -> UndoRecord | None:
    """The undo record of a session that ended ``ending`` with the best measured summed
    ``progress`` (NaN: nothing measured; module docstring), or ``None``:
    :func:`iadeep.policy.undo_rule` over the session's pods in reservation order, their job types
    as submitted, and ``progress``; only a converged session is judged (a profile session's
    measured round counts as converged, :mod:`iadeep.coordinator._profile`)."""
    if ending != "converged" or not undo_below:
        return None
    types = [BannedType(records[p].model, int(records[p].batch_size)) for p in pods]
    undo = undo_rule(float(progress), list(pods), types, undo_below)
    if undo is None:
        return None
    newest = records[undo.evict]
    return UndoRecord(newest.pod_uid, newest.namespace, newest.name, request.node, request.gpu, undo.avoid,
                      max(undo.progress, 0.0), undo.below, session=name, reason=undo.reason, at=clock())
