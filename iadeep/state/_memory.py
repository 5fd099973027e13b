"""The in-process state store.

:class:`MemoryStateStore` implements :class:`iadeep.state.StateStore` with the same semantics as
:class:`iadeep.state.EtcdStateStore` — same checks, same errors, same watch events and keys — over
plain dictionaries behind one lock. It is a real store, not a mock: the simulator-side tools and
the tests of drivers use it where no etcd runs. Its keys are :class:`iadeep.state._keys.Keys`'; its
decisions are the plans of :mod:`iadeep.state._rules`, as the etcd store's are.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from iadeep.state._protocol import (
    ChangeBatch,
    HistoryCompacted,
    NodeRecords,
    StateListing,
)
from iadeep.state._records import (
    Assignment,
    BatchSizeAssignment,
    WorkloadStatus,
    JobCheckpoint,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    RecordError,
    TuningRequest,
    UndoRecord,
    to_json,
)

from iadeep.state._keys import Keys, check_name, new_seqs, reservation_json
from iadeep.state._rules import (
    GangMember,
    check_gpu_count,
    plan_gang,
    checked_undo,
    plan_release,
    plan_reserve,
    plan_resize,
    reservation_gpu_limit,
    settled_undo,
)

log = logging.getLogger(__name__)

__all__ = ["MemoryStateStore"]


class _MemoryWatch(Iterator[Mapping[str, str]]):
    """Events of one :meth:`MemoryStateStore.watch`; registered at creation, so nothing that
    happens after the ``watch()`` call is missed."""

    def __init__(self, store: MemoryStateStore, prefix: str | tuple[str, ...], timeout_s: float, *,
                 revisions: bool = False) -> None:
        self._store = store
        self._prefix = prefix  # one prefix or several (str.startswith takes both)
        self._timeout_s = timeout_s
        self._revisions = revisions
        self._events: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._done = False

    def push(self, event: dict[str, Any]) -> None:
        if event["key"].startswith(self._prefix):
            if not self._revisions:
                event = {k: v for k, v in event.items() if k != "revision"}
            with self._cond:
                self._events.append(event)
                self._cond.notify_all()

    def __next__(self) -> Mapping[str, str]:
        deadline = time.monotonic() + self._timeout_s
        with self._cond:
            while not self._events and not self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise StopIteration
                self._cond.wait(min(left, 0.05))
                if not self._events:
                    self._cond.release()
                    try:
                        self._store._expire()  # leases expire even when nobody else calls in
                    finally:
                        self._cond.acquire()
            if not self._events:
                raise StopIteration
            return self._events.popleft()

    def close(self) -> None:
        self._done = True
        self._store._watchers.discard(self)


class MemoryStateStore:
    """:class:`iadeep.state.StateStore` in process memory (thread-safe, one lock).

    Args:
        prefix: key prefix used in watch events (as the etcd store's, default ``/iadeep``).
        clock: monotonic seconds for lease expiry; the simulator may pass a virtual clock.
        history: changes kept for :meth:`changes` (older ones are compacted, as etcd does).

    Leases expire lazily: a record whose lease ran out disappears (with a ``delete`` event) at
    the next call, or within about 50 ms while a watch waits.
    """

    def __init__(self, *, prefix: str = "/iadeep", clock: Callable[[], float] = time.monotonic,
                 history: int = 100_000, max_txn_ops: int = 128) -> None:
        self.keys = Keys("/" + prefix.strip("/"))
        self.max_txn_ops = max_txn_ops  # the same limit as etcd's, so both stores refuse alike
        self.max_reservation_gpus = reservation_gpu_limit(max_txn_ops)
        self._clock = clock
        self._lock = threading.RLock()
        self._inventories: dict[str, NodeInventory] = {}
        self._leases: dict[str, tuple[float, float]] = {}  # node -> (ttl_s, expires_at)
        self._jobs: dict[str, JobRecord] = {}
        self._gpus: dict[tuple[str, int], GpuState] = {}
        self._assignments: dict[tuple[str, int, str], Assignment] = {}
        self._reservations: dict[str, list[Assignment]] = {}
        self._measurements: dict[str, list[Measurement]] = {}
        self._tuning: dict[tuple[str, int], TuningRequest] = {}
        self._samples: list[InterferenceSampleRecord] = []
        self._batch_sizes: dict[str, BatchSizeAssignment] = {}
        self._workloads: dict[str, WorkloadStatus] = {}
        self._checkpoints: dict[str, JobCheckpoint] = {}
        self._placement: PlacementPolicy | None = None
        self._undos: dict[str, UndoRecord] = {}
        self._watchers: weakref.WeakSet[_MemoryWatch] = weakref.WeakSet()
        self._closed = False
        self._revision = 0
        self._history: deque[dict[str, Any]] = deque(maxlen=history)
        self._compacted = 0  # changes up to this revision are no longer kept

    # -- plumbing ---------------------------------------------------------------------------

    def _emit(self, kind: str, key: str, value: str | None = None) -> None:
        self._revision += 1
        event: dict[str, Any] = {"type": kind, "key": key, "revision": self._revision}
        if value is not None:
            event["value"] = value
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0]["revision"]
        self._history.append(event)
        for w in list(self._watchers):
            w.push(dict(event))

    def _expire(self) -> None:
        with self._lock:
            now = self._clock()
            for node, (_ttl, expires) in list(self._leases.items()):
                if expires <= now:
                    del self._leases[node]
                    if self._inventories.pop(node, None) is not None:
                        self._emit("delete", self.keys.node(node))

    def _put_tuning(self, t: TuningRequest) -> None:
        self._tuning[(t.node, t.gpu)] = t
        self._emit("put", self.keys.tuning(t.node, t.gpu), to_json(t))

    def _put_gpu(self, st: GpuState) -> None:
        self._gpus[(st.node, st.gpu)] = st
        self._emit("put", self.keys.gpu(st.node, st.gpu), to_json(st))

    # -- protocol ---------------------------------------------------------------------------

    def healthy(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Mark closed (``healthy()`` turns False); the data stays readable."""
        self._closed = True

    def __enter__(self) -> MemoryStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put_inventory(self, inventory: NodeInventory, *, lease_ttl_s: int | None = None) -> None:
        check_name("NodeInventory.node", inventory.node)
        if lease_ttl_s is not None and lease_ttl_s < 1:
            raise ValueError(f"lease_ttl_s must be >= 1, got {lease_ttl_s}")
        with self._lock:
            self._expire()
            self._inventories[inventory.node] = inventory
            if lease_ttl_s is None:
                self._leases.pop(inventory.node, None)
            else:
                self._leases[inventory.node] = (float(lease_ttl_s), self._clock() + lease_ttl_s)
            self._emit("put", self.keys.node(inventory.node), to_json(inventory))

    def keepalive(self, node: str) -> bool:
        """Renew the lease of ``node``'s inventory. True when the record is still there (with or
        without a lease); False when it is gone (expired or never published): publish it again."""
        with self._lock:
            self._expire()
            if node not in self._inventories:
                return False
            if node in self._leases:
                ttl, _ = self._leases[node]
                self._leases[node] = (ttl, self._clock() + ttl)
            return True

    def inventories(self) -> dict[str, NodeInventory]:
        with self._lock:
            self._expire()
            return dict(sorted(self._inventories.items()))

    def put_job(self, job: JobRecord) -> None:
        check_name("JobRecord.pod_uid", job.pod_uid)
        with self._lock:
            self._jobs[job.pod_uid] = job
            self._emit("put", self.keys.job(job.pod_uid), to_json(job))

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """See :meth:`StateStore.deadline`; nothing here waits on a network, so nothing to bound."""
        yield

    def delete_job(self, pod_uid: str) -> bool:
        """Forget a job record and its measurements (not its reservation: :meth:`release` that).
        True when a job record was there."""
        check_name("pod_uid", pod_uid)
        with self._lock:
            found = self._jobs.pop(pod_uid, None) is not None
            if found:
                self._emit("delete", self.keys.job(pod_uid))
            self._measurements.pop(pod_uid, None)
            for table, key in ((self._batch_sizes, self.keys.batch_size), (self._workloads, self.keys.workload)):
                if table.pop(pod_uid, None) is not None:
                    self._emit("delete", key(pod_uid))
            return found

    def jobs(self) -> dict[str, JobRecord]:
        with self._lock:
            return dict(sorted(self._jobs.items()))

    def gpu_states(self) -> dict[tuple[str, int], GpuState]:
        with self._lock:
            return dict(sorted(self._gpus.items()))

    def reserve(
        self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
        known: NodeRecords | None = None, supersede: bool = False,
    ) -> list[Assignment]:
        """See :meth:`StateStore.reserve`; ``known`` is not needed here (one lock, no round trips)."""
        check_gpu_count(job, gpus, self.max_reservation_gpus, self.max_txn_ops)
        with self._lock:
            self._expire()
            held = self._reservations.get(job.pod_uid)
            if held and supersede:
                if isinstance(node, str) and held[0].node == node:
                    return list(held)  # the pod's own earlier reservation on this node: reuse it
            plan = plan_reserve(
                job,
                node,
                gpus,
                inventory=self._inventories.get(node),
                states={g: self._gpus.get((node, g)) for g in gpus} if isinstance(node, str) else {},
                held=None if supersede else held,
                colocation_limit=colocation_limit,
                now_s=now_s,
            )
            if held:  # superseded: released under the same lock, as one transaction would
                self._release_locked(job.pod_uid, held, now_s=now_s, end_of_life=False)
            self._jobs[job.pod_uid] = job
            self._emit("put", self.keys.job(job.pod_uid), to_json(job))
            for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                self._assignments[(a.node, a.gpu, a.pod_uid)] = a
                self._emit("put", self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                self._put_gpu(st)
                self._put_tuning(t)
            self._reservations[job.pod_uid] = list(plan.assignments)
            self._emit(
                "put", self.keys.reservation(job.pod_uid), reservation_json(plan.assignments, secrets.token_hex(8))
            )
            return list(plan.assignments)

    def reserve_gang(self, members: Sequence[GangMember], *, colocation_limit: int,
                     now_s: float) -> list[list[Assignment]]:
        """See :meth:`StateStore.reserve_gang` (one lock: all members or none)."""
        for m in members:
            check_gpu_count(m.job, m.gpus, self.max_reservation_gpus, self.max_txn_ops)
        with self._lock:
            self._expire()
            plans = plan_gang(members, inventories={m.node: self._inventories.get(m.node) for m in members},
                              states={(m.node, int(g)): self._gpus.get((m.node, int(g))) for m in members for g in m.gpus},
                              held={m.job.pod_uid: self._reservations.get(m.job.pod_uid) for m in members},
                              colocation_limit=colocation_limit, now_s=now_s, max_txn_ops=self.max_txn_ops)
            for m, plan in zip(members, plans, strict=True):
                self._jobs[m.job.pod_uid] = m.job
                self._emit("put", self.keys.job(m.job.pod_uid), to_json(m.job))
                for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                    self._assignments[(a.node, a.gpu, a.pod_uid)] = a
                    self._emit("put", self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                    self._put_gpu(st)
                    self._put_tuning(t)
                self._reservations[m.job.pod_uid] = list(plan.assignments)
                self._emit("put", self.keys.reservation(m.job.pod_uid),
                           reservation_json(plan.assignments, secrets.token_hex(8)))
            return [list(p.assignments) for p in plans]

    def release(self, pod_uid: str, *, now_s: float) -> list[Assignment]:
        check_name("pod_uid", pod_uid)
        with self._lock:
            held = self._reservations.get(pod_uid)
            if not held:
                return []
            self._release_locked(pod_uid, held, now_s=now_s, end_of_life=True)
            return list(held)

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """See :meth:`StateStore.resize`."""
        with self._lock:
            self._expire()
            plan = plan_resize(node, gpu, sizes, inventory=self._inventories.get(node), state=self._gpus.get((node, gpu)),
                               held={p: self._reservations.get(p) for p in sizes},
                               requests={p: self._jobs.get(p) for p in sizes})
            for pod, assignments in plan.reservations.items():
                for a in assignments:
                    if (a.node, a.gpu) == (node, gpu):
                        self._assignments[(a.node, a.gpu, a.pod_uid)] = a
                        self._emit("put", self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                self._reservations[pod] = list(assignments)
                self._emit("put", self.keys.reservation(pod), reservation_json(assignments, secrets.token_hex(8)))
            self._put_gpu(plan.gpu_state)
            return plan.gpu_state

    def _release_locked(self, pod_uid: str, held: list[Assignment], *, now_s: float, end_of_life: bool) -> None:
        """Drop ``held``; with ``end_of_life`` also the pod's job record and measurements."""
        plan = plan_release(held, {(a.node, a.gpu): self._gpus.get((a.node, a.gpu)) for a in held}, now_s=now_s)
        for a in held:
            self._assignments.pop((a.node, a.gpu, a.pod_uid), None)
            self._emit("delete", self.keys.assignment(a.node, a.gpu, a.pod_uid))
        for st in plan.gpu_states:
            self._put_gpu(st)
        for key in plan.gpu_delete:
            if self._gpus.pop(key, None) is not None:
                self._emit("delete", self.keys.gpu(*key))
        for t in plan.tuning_put:
            self._put_tuning(t)
        for node, gpu in plan.tuning_delete:
            if self._tuning.pop((node, gpu), None) is not None:
                self._emit("delete", self.keys.tuning(node, gpu))
        del self._reservations[pod_uid]
        self._emit("delete", self.keys.reservation(pod_uid))
        if end_of_life:
            self.delete_job(pod_uid)

    def assignments(self, node: str | None = None) -> list[Assignment]:
        with self._lock:
            found = [a for a in self._assignments.values() if node is None or a.node == node]
        return sorted(found, key=lambda a: (a.node, a.gpu, a.pod_uid))

    def add_measurement(self, m: Measurement) -> None:
        check_name("Measurement.pod_uid", m.pod_uid)
        (seq,) = new_seqs(1)
        with self._lock:
            self._measurements.setdefault(m.pod_uid, []).append(m)
            self._emit("put", self.keys.measurement(m.pod_uid, seq), to_json(m))

    def measurements(self, pod_uid: str) -> list[Measurement]:
        with self._lock:
            return list(self._measurements.get(pod_uid, ()))

    def tuning_requests(self) -> list[TuningRequest]:
        with self._lock:
            return [t for _, t in sorted(self._tuning.items())]

    def complete_tuning(self, request: TuningRequest) -> bool:
        """Clear a tuning request if it is still the one given (same pods and time): the
        coordinator's acknowledgement. False when it changed meanwhile (tune again) or is gone."""
        with self._lock:
            key = (request.node, request.gpu)
            if self._tuning.get(key) != request:
                return False
            del self._tuning[key]
            self._emit("delete", self.keys.tuning(*key))
            return True

    def add_samples(self, samples: Sequence[InterferenceSampleRecord]) -> None:
        samples = list(samples)
        seqs = new_seqs(len(samples))
        with self._lock:
            for s, seq in zip(samples, seqs, strict=True):
                self._samples.append(s)
                self._emit("put", self.keys.sample(seq), to_json(s))

    def samples(self) -> list[InterferenceSampleRecord]:
        with self._lock:
            return list(self._samples)

    def _put_record(self, table: dict, name: str, key: str, record: Any) -> None:
        """Keep one job's record in ``table`` under ``name`` and emit its put (``key``)."""
        with self._lock:
            table[name] = record
            self._emit("put", key, to_json(record))

    def set_batch_size(self, assignment: BatchSizeAssignment) -> None:
        pod = check_name("BatchSizeAssignment.pod_uid", assignment.pod_uid)
        self._put_record(self._batch_sizes, pod, self.keys.batch_size(pod), assignment)

    def batch_size(self, pod_uid: str) -> BatchSizeAssignment | None:
        with self._lock:
            return self._batch_sizes.get(pod_uid)

    def put_workload(self, status: WorkloadStatus) -> None:
        pod = check_name("WorkloadStatus.pod_uid", status.pod_uid)
        self._put_record(self._workloads, pod, self.keys.workload(pod), status)

    def workload(self, pod_uid: str) -> WorkloadStatus | None:
        with self._lock:
            return self._workloads.get(pod_uid)

    def put_checkpoint(self, checkpoint: JobCheckpoint) -> None:
        key = check_name("JobCheckpoint.job_key", checkpoint.job_key)
        self._put_record(self._checkpoints, key, self.keys.checkpoint(key), checkpoint)

    def checkpoint(self, job_key: str) -> JobCheckpoint | None:
        with self._lock:
            return self._checkpoints.get(check_name("job_key", job_key))

    def delete_checkpoint(self, job_key: str) -> bool:
        with self._lock:
            found = self._checkpoints.pop(check_name("job_key", job_key), None) is not None
            if found:
                self._emit("delete", self.keys.checkpoint(job_key))
            return found

    def put_placement(self, placement: PlacementPolicy) -> None:
        if placement.colocation_limit < 1:
            raise RecordError(f"PlacementPolicy: $.colocation_limit: must be >= 1, got {placement.colocation_limit}")
        with self._lock:
            self._placement = placement
            self._emit("put", self.keys.placement(), to_json(placement))

    def placement(self) -> PlacementPolicy | None:
        with self._lock:
            return self._placement

    def put_undo(self, record: UndoRecord) -> None:
        text = checked_undo(record)
        with self._lock:
            self._undos[record.pod_uid] = record
            self._emit("put", self.keys.undo(record.pod_uid), text)

    def undos(self) -> dict[str, UndoRecord]:
        with self._lock:
            return dict(self._undos)

    def settle_undo(self, record: UndoRecord, outcome: str, *, at: float) -> bool:
        new = settled_undo(record, outcome, at)
        with self._lock:
            if self._undos.get(record.pod_uid) != record:
                return False
            self._undos[record.pod_uid] = new
            self._emit("put", self.keys.undo(record.pod_uid), to_json(new))
            return True

    def revision(self) -> int:
        with self._lock:
            self._expire()
            return self._revision

    def list_state(self) -> StateListing:
        with self._lock:
            self._expire()
            return StateListing(self._revision, dict(self._inventories), dict(sorted(self._gpus.items())),
                                dict(self._jobs), list(self._samples), dict(self._undos))

    def changes(self, start_revision: int, *, idle_s: float) -> Iterator[ChangeBatch]:
        """See :meth:`StateStore.changes`; the history holds the last ``history`` changes."""
        if idle_s <= 0:
            raise ValueError(f"idle_s must be > 0, got {idle_s}")
        with self._lock:
            if start_revision <= self._compacted:
                raise HistoryCompacted(f"revision {start_revision} is compacted (kept from {self._compacted + 1})")
            w = _MemoryWatch(self, self.keys.prefix + "/", idle_s, revisions=True)
            for event in self._history:
                if event["revision"] >= start_revision:
                    w.push(dict(event))
            self._watchers.add(w)
        return self._follow(w)

    def _follow(self, w: _MemoryWatch) -> Iterator[ChangeBatch]:
        for event in w:
            rev = int(event["revision"])
            change = self.keys.decode_or_absent(event["key"], event.get("value") if event["type"] == "put" else None, rev)
            yield ChangeBatch(rev, (change,) if change is not None else ())

    def watch(self, what: str | Sequence[str], *, timeout_s: float) -> Iterator[Mapping[str, str]]:
        """Events under ``<prefix>/<what>`` (a plain string prefix: end ``what`` with ``/`` to
        keep ``nodes/a`` from matching ``nodes/ab``; a sequence of them watches each), each
        ``{"type", "key"}`` plus ``"value"`` (the record's JSON) for puts, until ``timeout_s``
        passes without one. Events after this call are seen even if iteration starts later.

        Raises:
            ValueError: no prefix given.
        """
        whats = [what] if isinstance(what, str) else list(what)
        if not whats:
            raise ValueError("watch needs at least one prefix")
        w = _MemoryWatch(self, tuple(self.keys.folder(x) for x in whats), timeout_s)
        with self._lock:
            self._watchers.add(w)
        return w

    def stats(self) -> dict[str, int]:
        """Counters (the etcd store's names; always 0 here)."""
        return {"requests": 0, "retries": 0, "txn_conflicts": 0}
