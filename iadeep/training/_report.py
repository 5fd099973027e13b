"""How a training run reports: the interface the job-reporting SDK implements, and two implementations.

:class:`JobReporter` is the whole contract between the runner and the outside world. The runner
calls :meth:`~JobReporter.progress` after every step and :meth:`~JobReporter.assigned_batch_size`
before every step, so both must be cheap and do no I/O on the caller's thread: an implementation
rate-limits what it sends and learns its batch size from a watch (the SDK of ``iadeep.workload``
does the same; the runner accepts it unchanged).

* :class:`LogReporter`: no shared state (a local run): logs progress, never changes batch size.
* :class:`StateReporter`: the live system's records through :mod:`iadeep.state` (the only module
  that talks to etcd): registers the job's :class:`~iadeep.state.JobRecord` when there is none,
  appends :class:`~iadeep.state.Measurement` records at most once per ``interval_s``, and follows
  its job record with a watch; the record's ``batch_size`` is the assigned batch size.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # the state store is imported when a StateReporter is made (not by profiling workers)
    from iadeep.state import StateStore

__all__ = ["JobInfo", "Progress", "Outcome", "JobReporter", "LogReporter", "StateReporter"]

log = logging.getLogger("iadeep.training")


@dataclass(frozen=True)
class JobInfo:
    """Who is training what.

    Attributes:
        pod_uid, namespace, name: the pod (a local run makes up its own).
        model: workload name (e.g. ``"vgg16"``); family: its Gavel model family.
        batch_size: batch size the run starts with; mem_gib: GPU memory it was given (GiB).
    """

    pod_uid: str
    namespace: str
    name: str
    model: str
    family: str
    batch_size: int
    mem_gib: float


@dataclass(frozen=True)
class Progress:
    """Where a run is after a step.

    Attributes:
        step: steps done so far (all epochs, resumed runs included).
        epoch: current epoch (0-based); samples: samples trained so far.
        batch_size: the batch size of the step just done.
        train_s: seconds spent in training steps so far (evaluation and checkpoints excluded);
            a reporter's throughput is ``delta(step) / delta(train_s)``.
        loss: the step's training loss.
    """

    step: int
    epoch: int
    samples: int
    batch_size: int
    train_s: float
    loss: float


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``reason`` is ``"target"``, ``"max_epochs"``, ``"max_steps"`` or ``"stopped"``."""

    reason: str
    step: int
    epoch: int
    metric: float | None


@runtime_checkable
class JobReporter(Protocol):
    """What the runner needs from the job-reporting SDK (calls come from the training thread)."""

    def start(self, job: JobInfo) -> None:
        """The run begins (or resumes); register the job."""

    def progress(self, p: Progress) -> None:
        """After every step; must return at once (rate-limit, no blocking I/O per step)."""

    def assigned_batch_size(self) -> int | None:
        """The batch size the system wants now (``None``: no opinion); no I/O."""

    def finish(self, outcome: Outcome) -> None:
        """The run ends (also when stopped); flush and stop background work."""


class LogReporter:
    """Reports to the log only (no shared state); never asks for another batch size."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self.clock = interval_s, clock
        self._last: tuple[float, Progress] | None = None

    def start(self, job: JobInfo) -> None:
        log.info("training %s (%s) at batch size %d", job.model, job.name, job.batch_size)

    def progress(self, p: Progress) -> None:
        now = self.clock()
        if self._last is None:
            self._last = (now, p)
            return
        if now - self._last[0] >= self.interval_s:
            prev = self._last[1]
            rate = (p.step - prev.step) / max(p.train_s - prev.train_s, 1e-9)
            log.info("epoch %d step %d: loss %.4f, %.2f steps/s at batch size %d", p.epoch, p.step, p.loss, rate, p.batch_size)
            self._last = (now, p)

    def assigned_batch_size(self) -> int | None:
        return None

    def finish(self, outcome: Outcome) -> None:
        log.info("finished (%s) at step %d, epoch %d, metric %s", outcome.reason, outcome.step, outcome.epoch, outcome.metric)


class StateReporter:
    """Reports through a :class:`~iadeep.state.StateStore` (etcd in the live system).

    Args:
        store: the state store.
        interval_s: at most one measurement per this many seconds (the node-side issue's rate).
        watch_idle_s: the watch is reopened after this many seconds without events.
        clock: monotonic seconds (injected in tests).
    """

    def __init__(self, store: "StateStore", *, interval_s: float = 1.0, watch_idle_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.interval_s, self.watch_idle_s, self.clock = store, interval_s, watch_idle_s, clock
        self._job: JobInfo | None = None
        self._assigned: int | None = None
        self._window: tuple[float, Progress] | None = None  # (clock, progress) at the last measurement
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self, job: JobInfo) -> None:
        from iadeep.state import JobRecord

        self._job = job
        record = self.store.jobs().get(job.pod_uid)
        if record is None:
            record = JobRecord(job.pod_uid, job.namespace, job.name, job.family, job.batch_size, 1, job.mem_gib,
                               submitted_at=time.time())
            self.store.put_job(record)
        elif record.batch_size != job.batch_size:
            self._assigned = record.batch_size
        self._watcher = threading.Thread(target=self._follow, name=f"iadeep-watch-{job.pod_uid}", daemon=True)
        self._watcher.start()

    def _follow(self) -> None:
        from iadeep.state import JobRecord, RecordError, StoreUnavailable, from_json

        assert self._job is not None
        uid = self._job.pod_uid
        key_suffix = f"/jobs/{uid}"
        while not self._stop.is_set():
            try:
                for event in self.store.watch(f"jobs/{uid}", timeout_s=self.watch_idle_s):
                    if self._stop.is_set():
                        return
                    if event["type"] != "put" or not event["key"].endswith(key_suffix):
                        continue
                    try:
                        self._assigned = from_json(JobRecord, event["value"]).batch_size
                    except RecordError as exc:
                        log.warning("ignoring a malformed job record for %s: %s", uid, exc)
            except StoreUnavailable as exc:
                log.warning("job record watch interrupted (%s); retrying", exc)
                self._stop.wait(1.0)

    def progress(self, p: Progress) -> None:
        from iadeep.state import Measurement, StoreUnavailable

        assert self._job is not None, "start() first"
        now = self.clock()
        if self._window is None:
            self._window = (now, p)
            return
        then, prev = self._window
        if p.batch_size != prev.batch_size:  # a measurement covers one batch size only
            self._window = (now, p)
            return
        if now - then < self.interval_s or p.train_s <= prev.train_s:
            return
        rate = (p.step - prev.step) / (p.train_s - prev.train_s)
        try:
            self.store.add_measurement(Measurement(self._job.pod_uid, rate, p.batch_size, time.time()))
        except StoreUnavailable as exc:  # training goes on; the next window reports again
            log.warning("measurement not stored: %s", exc)
            return
        self._window = (now, p)

    def assigned_batch_size(self) -> int | None:
        return self._assigned

    def finish(self, outcome: Outcome) -> None:
        # The watcher (a daemon thread) leaves at its watch's next event or idle timeout; the run
        # does not wait for it.
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=0.2)
