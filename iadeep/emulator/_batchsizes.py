"""The GPU emulator's side of tuning: the batch sizes the node coordinator assigns.

A tuning session's trials and its final choice arrive as ``batchsizes/<pod_uid>`` records
(:class:`iadeep.state.BatchSizeAssignment`); the emulator changes the job's type to the model
family's type at that batch size (its GPU's rates with it, :class:`iadeep.emulator._gpus.EmulatedGpus`)
and reports a measurement at once and every ``report_interval_s`` while the session runs, as the
training SDK does (``follow_batch_sizes``, ``report_measurements``).

:class:`BatchSizeFollower` is a part of :class:`iadeep.emulator.EmulatorService` (a base class of
it), over the service's ``store``, ``model``, ``gpus``, ``pods``, its lock and its counters.
"""

from __future__ import annotations

import logging

from iadeep.jobtypes import JobType
from iadeep.interference import UnknownJobType
from iadeep.state import BatchSizeAssignment, Measurement, RecordError, StoreUnavailable, from_json

__all__ = ["BatchSizeFollower"]

log = logging.getLogger("iadeep.emulator")


class BatchSizeFollower:
    """Applies the coordinator's batch sizes to the emulated jobs (module docstring)."""

    def _type_at(self, type_id: int, batch_size: int) -> int | None:
        """The type of ``type_id``'s model family at ``batch_size``; ``None`` if not measured."""
        try:
            return self.model.type_id(JobType(self.model.types[type_id].model, int(batch_size)))
        except UnknownJobType:
            return None

    def apply_batch_size(self, a: BatchSizeAssignment) -> None:
        """A batch size the coordinator assigned: the job's type changes (its GPU's rates with it)
        and, being a new size, it reports a measurement at once, as the SDK does after a switch."""
        now = self.clock()
        with self._lock:
            job = self.gpus.jobs.get(a.pod_uid)
            if a.trial >= 0 and a != self._assigned.get(a.pod_uid) and a.pod_uid in self.pods:
                self.pods[a.pod_uid].trials += 1
            self._assigned[a.pod_uid] = a
            if job is None:
                return  # applied when the pod starts (or forgotten when it ends)
            tid = self._type_at(job.base_type_id, a.batch_size)
            if tid is None:
                log.warning("pod %s: batch size %d of %s was not measured; keeping %d", a.pod_uid, a.batch_size,
                            self.model.types[job.base_type_id].model, self.model.types[job.type_id].batch_size)
                self.errors += 1
                return
            changes = self.gpus.set_type(a.pod_uid, tid, now_s=now)
            if changes:
                self.resized += 1
                self._lock.notify_all()  # completion times moved
        self._report(changes, now)

    def _batch_size_loop(self) -> None:
        """Follow ``batchsizes/``: open the watch, then read the running jobs' assignments once (so
        nothing set between two watches is missed), then apply each put."""
        if not self.settings.follow_batch_sizes:
            return
        backoff = 0.5
        while not self._stop.is_set():
            try:
                events = self.store.watch("batchsizes/", timeout_s=self.settings.kube.watch_timeout_s)
                with self._lock:
                    uids = list(self.gpus.jobs)
                for uid in uids:
                    a = self.store.batch_size(uid)
                    if a is not None and a != self._assigned.get(uid):
                        self.apply_batch_size(a)
                for ev in events:
                    if ev.get("type") == "put":
                        try:
                            self.apply_batch_size(from_json(BatchSizeAssignment, ev["value"]))
                        except RecordError as exc:
                            log.warning("unreadable batch-size record %s: %s", ev.get("key"), exc)
                    if self._stop.is_set():
                        break
                if hasattr(events, "close"):
                    events.close()  # type: ignore[union-attr]
                backoff = 0.5
            except StoreUnavailable as exc:
                log.warning("batch-size watch failed, retrying in %.1f s: %s", backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _session_report_loop(self) -> None:
        """Every ``report_interval_s``, a measurement of every job in a tuning session."""
        if not (self.settings.follow_batch_sizes and self.settings.report_measurements):
            return
        while not self._stop.wait(self.settings.report_interval_s):
            now = self.clock()
            with self._lock:
                measured = [Measurement(uid, self.gpus.measure(uid), self.model.types[self.gpus.jobs[uid].type_id].batch_size, now)
                            for uid, a in self._assigned.items() if a.trial >= 0 and uid in self.gpus.jobs]
            try:
                for m in measured:
                    self.store.add_measurement(m)
                    self.measurements += 1
            except StoreUnavailable as exc:
                log.warning("could not report throughput: %s", exc)
