"""The extender's arrival log, kept in the state store across restarts.

The arrival price (:meth:`iadeep.policy.iadeep.IADeep.arrival_cost_s`) reads the rate of the
last day's one-GPU arrivals from the jobs the policy has met, and a gang's price lapses once the
gang has waited twice its work since the policy first met it. Both live in the policy object. A
restarted extender would start with neither: no price until two arrivals are seen again, and a
gang held for a fresh ``2 T``.

:class:`ArrivalLog` writes each arrival the policy notes (:attr:`IADeep.on_arrival`) as an
:class:`iadeep.state.ArrivalRecord` under ``arrivals/<job>``, from a thread of its own, so the
scheduling cycle never waits on etcd; a write that fails stays queued and is tried again. At
start (or, while the store does not answer, as soon as it does) the records go back to the
policy (:meth:`IADeep.remember_arrivals`), and once an hour the records past their
``keep_until`` are deleted (:meth:`iadeep.state.StateStore.prune_arrivals`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from iadeep.podspec import MAX_DURATION_S, TypeResolver
from iadeep.policy import JobRequest
from iadeep.policy.iadeep import ARRIVAL_HOLD_AT_MOST, ARRIVAL_WINDOW_S
from iadeep.state import ArrivalRecord, StateStore, StoreUnavailable

__all__ = ["ArrivalLog"]

log = logging.getLogger("iadeep.extender")

#: arrivals waiting to be written at most; beyond it the oldest are dropped (a store down for long)
MAX_PENDING = 10_000


class ArrivalLog:
    """The policy's arrivals, written to and read back from ``store`` (module docstring).

    Args:
        store: the state store.
        types: the pods' job types (the records name a type by model family and batch size).
        clock: Unix time (s).
        interval_s: how often (s) the writer thread writes what is queued, at the latest.
        prune_every_s: how often (s) it deletes the records past their ``keep_until``.
    """

    def __init__(self, store: StateStore, types: TypeResolver, *, clock: Callable[[], float],
                 interval_s: float = 1.0, prune_every_s: float = 3600.0):
        self.store = store
        self.types = types
        self.clock = clock
        self.interval_s = interval_s
        self.prune_every_s = prune_every_s
        self.restored = False
        self.dropped = 0  # arrivals dropped unwritten (MAX_PENDING exceeded)
        self._pending: deque[ArrivalRecord] = deque()
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned_at = float("-inf")

    def record(self, at_s: float, job: JobRequest) -> None:
        """Queue the arrival of ``job`` at ``at_s`` (Unix s) for writing (the policy's
        :attr:`~iadeep.policy.iadeep.IADeep.on_arrival`; it runs inside the scheduling cycle, so
        it only queues). A job id that is no key segment is logged and not kept."""
        job_id = str(job.job_id)
        if not job_id or "/" in job_id:
            log.warning("arrival of job %r not kept: its id is no key segment", job_id)
            return
        jtype = self.types.model.types[job.type_id]
        keep = ARRIVAL_WINDOW_S if job.num_gpus == 1 else max(ARRIVAL_WINDOW_S, ARRIVAL_HOLD_AT_MOST * job.remaining_s)
        keep = min(keep, ARRIVAL_HOLD_AT_MOST * MAX_DURATION_S)  # finite: a record is JSON (remaining_s may be huge)
        milli = job.gpu_milli
        rec = ArrivalRecord(job=job_id, at=at_s, keep_until=at_s + keep, num_gpus=job.num_gpus, model=jtype.model,
                            batch_size=jtype.batch_size, mem_gib=job.mem_gib,
                            gpu_milli=None if milli != milli else float(milli))
        with self._lock:
            self._pending.append(rec)
            if len(self._pending) > MAX_PENDING:
                self._pending.popleft()
                self.dropped += 1
        self._wake.set()

    @property
    def pending(self) -> int:
        """Arrivals queued and not written yet."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Write the queued arrivals; returns how many.

        Raises:
            StoreUnavailable: the store did not answer (the arrivals stay queued).
        """
        with self._flushing:  # one write at a time (a writer thread and stop's last write)
            with self._lock:
                batch = list(self._pending)
            if not batch:
                return 0
            self.store.put_arrivals(batch)
            written = {id(r) for r in batch}
            with self._lock:
                # what is left of the batch is the queue's head (record() appends, and drops the
                # oldest past MAX_PENDING): only those records go
                while self._pending and id(self._pending[0]) in written:
                    self._pending.popleft()
            return len(batch)

    def restore(self, policy: Any, lock: Any) -> int:
        """Give the stored arrivals back to ``policy`` (:meth:`IADeep.remember_arrivals`, under
        ``lock``); returns how many it took back (those it had not met itself). A record of a
        family the interference model does not know is read as the default type.

        Raises:
            StoreUnavailable: the store did not answer (nothing restored; try again).
        """
        entries = []
        for r in self.store.arrivals():
            type_id = self.types.resolve_or_default(r.model, r.batch_size)
            milli = float("nan") if r.gpu_milli is None else r.gpu_milli
            entries.append((r.at, JobRequest(-1, r.job, type_id, r.num_gpus, r.mem_gib, 0.0, gpu_milli=milli)))
        with lock:
            taken = policy.remember_arrivals(entries)
        self.restored = True
        log.info("arrival log: %d stored arrival(s), %d taken back", len(entries), taken)
        return taken

    def prune(self) -> int:
        """Delete the stored arrivals past their ``keep_until``; returns how many.

        Raises:
            StoreUnavailable: the store did not answer.
        """
        n = self.store.prune_arrivals(self.clock())
        self._pruned_at = self.clock()
        return n

    # -- the writer thread --------------------------------------------------------------------

    def start(self, policy: Any, lock: Any) -> None:
        """Start the writer thread (it also restores, while :meth:`restore` has not succeeded).
        Each start has its own stop event, so a thread that :meth:`stop` did not wait out ends
        on its own."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(policy, lock, self._stop), name="iadeep-arrivals",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the writer thread after one last write of what is queued (best effort)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self, policy: Any, lock: Any, stop: threading.Event) -> None:
        warned = False
        while True:
            stopping = stop.is_set()
            try:
                if not self.restored:
                    self.restore(policy, lock)
                self.flush()
                if self.clock() - self._pruned_at >= self.prune_every_s:
                    self.prune()
                warned = False
            except StoreUnavailable as exc:
                if not warned:  # once per outage
                    log.warning("arrival log: state store not reachable (%d arrival(s) queued): %s", self.pending, exc)
                    warned = True
            except Exception:  # noqa: BLE001 - a bad record must not end the thread
                log.exception("arrival log: write failed")
            if stopping:
                return
            self._wake.wait(self.interval_s)
            self._wake.clear()
