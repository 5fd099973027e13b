"""The job side of IADeep's loop: :class:`Job` (see the package docstring for the usage).

Requests to the state store per job (the issue's target: at most one per second):
registration (one put), one progress report per ``report_interval_s`` (one put each), the
batch-size watch (one stream, reopened after ``watch_idle_s`` of silence with one read of the
assigned size), completion (one put). Nothing is read per step: :meth:`Job.step` only counts and
compares with what the watch thread last delivered.

Threads: the watch and the reports run on two daemon threads, so a slow or unreachable etcd
never stalls training; a failed report is logged and dropped (the next one carries the
cumulative sample count), a broken watch is reopened with back-off.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from iadeep.state import (
    BatchSizeAssignment,
    EtcdStateStore,
    Measurement,
    RecordError,
    StateSettings,
    StateStore,
    StoreUnavailable,
    WorkloadStatus,
    from_json,
)
from iadeep.workload._settings import WorkloadSettings

__all__ = ["Job", "JobStats"]

log = logging.getLogger(__name__)

#: How far ahead of this job's clock an assignment's ``at`` may be and still order later ones (s).
#: The node's coordinator writes them with the same node's clock; an assignment dated further
#: ahead (a writer with a wrong clock) is applied, but orders later ones as if written now: dated
#: a year ahead, it would otherwise make every later assignment look older and be ignored.
FUTURE_AT_MOST_S = 60.0


@dataclass(frozen=True)
class JobStats:
    """Counters of one job (for logs, tests and the SDK benchmark).

    Attributes:
        steps / samples: done so far.
        reports: progress reports handed to the store (or to the log without one).
        failed_reports: reports the store refused or could not take.
        batch_size_changes: switches applied at a step boundary.
        batch_size: the current batch size.
    """

    steps: int
    samples: int
    reports: int
    failed_reports: int
    batch_size_changes: int
    batch_size: int


class Job:
    """One training job's link to the node coordinator.

    Args:
        pod_uid: the job's pod UID (key of its records); ``""`` for a local run.
        batch_size: the batch size it starts at (samples per step).
        store: the state store; ``None``: log only.
        settings: reporting interval and watch timing (default: from the environment).
        clock: wall-clock seconds for record timestamps; monotonic: for rates. Injected for tests.

    Raises:
        ValueError: ``batch_size < 1``.
    """

    def __init__(self, pod_uid: str, batch_size: int, *, store: StateStore | None = None,
                 settings: WorkloadSettings | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.pod_uid = pod_uid
        self.settings = settings or WorkloadSettings()
        self.store = store
        self._clock, self._mono = clock, monotonic
        self._batch = batch_size
        self._pending: BatchSizeAssignment | None = None
        self._applied_at = 0.0  # ``at`` of the last assignment applied (older ones are ignored)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._outbox: Measurement | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._steps = self._samples = self._reports = self._failed = self._changes = 0
        self._window_start = self._last_report = 0.0
        self._window_steps = 0
        self._started_at = 0.0
        self._finished = False

    @classmethod
    def from_env(cls, batch_size: int, *, store: StateStore | None = None) -> Job:
        """A job configured from ``IADEEP_WORKLOAD_*`` (and ``IADEEP_ETCD_*`` when reporting to etcd).

        Raises:
            StoreUnavailable: etcd is configured but no endpoint can be used.
        """
        settings = WorkloadSettings()
        if store is None and settings.etcd_enabled():
            store = EtcdStateStore(StateSettings())
        return cls(settings.pod_uid, batch_size, store=store, settings=settings)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> Job:
        """Register (status ``running``) and start following the assigned batch size.

        SIGTERM (what the kubelet sends a pod it stops: deletion, eviction, preemption) becomes
        ``SystemExit(143)`` when the process left it at Python's default (which ends the process
        at once, without unwinding): a ``with`` block (or ``try``/``finally``) around the training
        loop then records the job ``failed`` instead of leaving it ``running``. Only from the main
        thread, and never over a handler the script installed itself.
        """
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        now = self._mono()
        self._window_start = self._last_report = now
        self._started_at = self._clock()
        if self.store is None:
            log.info("job %s: local run (no etcd), batch size %d", self.pod_uid or "-", self._batch)
            return self
        self._put_status("running")
        for target, name in ((self._follow, "watch"), (self._send, "report")):
            t = threading.Thread(target=target, name=f"iadeep-workload-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def complete(self) -> None:
        """Report completion (status ``completed``) and stop the threads; idempotent."""
        self._finish("completed")

    def fail(self) -> None:
        """Report a failure (status ``failed``) and stop the threads; idempotent."""
        self._finish("failed")

    def __enter__(self) -> Job:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._finish("failed" if exc_type is not None else "completed")

    # -- the training loop's side ---------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        """The batch size to use for the next step."""
        return self._batch

    def step(self, samples: int | None = None) -> int:
        """Count one finished step (``samples`` defaults to the batch size it ran at); report
        when one is due; apply a newly assigned batch size (this is the step boundary).

        Returns:
            The batch size for the next step.

        Raises:
            ValueError: ``samples`` is negative (the store's records count samples from 0 up).
        """
        if samples is not None and samples < 0:
            raise ValueError(f"Job.step: samples must be >= 0, got {samples}")
        now = self._mono()
        with self._lock:
            self._steps += 1
            self._samples += self._batch if samples is None else samples
            self._window_steps += 1
            if now - self._last_report >= self.settings.report_interval_s and now > self._window_start:
                m = Measurement(self.pod_uid or "local", self._window_steps / (now - self._window_start),
                                self._batch, self._clock(), self._samples)
                self._window_start = self._last_report = now
                self._window_steps = 0
                self._reports += 1
                if self.store is None:
                    log.info("job %s: %.2f steps/s at batch size %d, %d samples",
                             self.pod_uid or "-", m.steps_per_s, m.batch_size, m.samples)
                else:
                    self._outbox = m  # the newest report wins if the sender lags
                    self._wake.notify()
            pending, self._pending = self._pending, None
            if pending is not None and pending.batch_size != self._batch:
                log.info("job %s: batch size %d -> %d (session %s, trial %d)", self.pod_uid,
                         self._batch, pending.batch_size, pending.session or "-", pending.trial)
                self._batch = pending.batch_size
                self._changes += 1
                self._window_start = now  # the next report measures the new size only
                self._window_steps = 0
            return self._batch

    def stats(self) -> JobStats:
        """Counters so far."""
        with self._lock:
            return JobStats(self._steps, self._samples, self._reports, self._failed, self._changes, self._batch)

    # -- internals ------------------------------------------------------------------------------

    def _finish(self, state: str) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._wake.notify_all()
        self._stop.set()
        for t in self._threads:
            if t.name.endswith("report"):
                t.join(timeout=self.settings.report_interval_s + 5)  # flush the last report
        if self.store is not None:
            self._put_status(state)
        log.info("job %s: %s after %d steps, %d samples", self.pod_uid or "-", state, self._steps, self._samples)

    def _put_status(self, state: str) -> None:
        assert self.store is not None
        status = WorkloadStatus(self.pod_uid, state, self._batch, self._samples, self._started_at, self._clock())
        try:
            self.store.put_workload(status)
        except StoreUnavailable as exc:
            log.warning("job %s: could not record status %s: %s", self.pod_uid, state, exc)

    def _offer(self, a: BatchSizeAssignment) -> None:
        if a.pod_uid != self.pod_uid:
            return
        now = self._clock()
        with self._lock:
            if a.at < self._applied_at:
                return  # an older assignment delivered late (the read after a reopen)
            ahead = a.at > now + FUTURE_AT_MOST_S
            if ahead:
                log.warning("job %s: batch size %d assigned at %.0f, %.0f s ahead of this job's clock: applied, "
                            "ordered as if assigned now", self.pod_uid, a.batch_size, a.at, a.at - now)
            self._applied_at = now if ahead else a.at
            self._pending = a

    def _follow(self) -> None:
        """Watch ``batchsizes/<pod_uid>``: open the watch first, then read once (so that no
        change between the two is missed), then apply every put."""
        assert self.store is not None
        backoff = 0.1
        while not self._stop.is_set():
            try:
                events = self.store.watch(f"batchsizes/{self.pod_uid}", timeout_s=self.settings.watch_idle_s)
                current = self.store.batch_size(self.pod_uid)
                if current is not None:
                    self._offer(current)
                for ev in events:
                    if self._stop.is_set():
                        return
                    if ev.get("type") == "put":
                        try:
                            self._offer(from_json(BatchSizeAssignment, ev["value"]))
                        except RecordError as exc:
                            log.warning("job %s: ignoring a malformed batch size: %s", self.pod_uid, exc)
                backoff = 0.1
            except (StoreUnavailable, RecordError) as exc:
                if self._stop.is_set():
                    return  # finished: the store may be closed already
                log.warning("job %s: batch-size watch failed, retrying in %.1f s: %s", self.pod_uid, backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _send(self) -> None:
        assert self.store is not None
        while True:
            with self._lock:
                while self._outbox is None and not self._finished:
                    self._wake.wait()
                m, self._outbox = self._outbox, None
            if m is None:
                return
            try:
                self.store.add_measurement(m)
            except (StoreUnavailable, RecordError) as exc:
                with self._lock:
                    self._failed += 1
                log.warning("job %s: progress report dropped: %s", self.pod_uid, exc)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM as ``SystemExit(128 + 15)``: the exit status the default action gives, after unwinding.

    Only raises: taking the job's lock here could deadlock with the training loop it interrupted."""
    raise SystemExit(128 + signum)
