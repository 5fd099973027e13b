"""The state store: every rule of :class:`iadeep.state.StateStore`, once, over a key-value backend.

:class:`KVStateStore` keeps the records of :mod:`iadeep.state._records` as JSON under the keys of
:class:`iadeep.state._keys.Keys` in a :class:`iadeep.state._kv.KVBackend`; the allocation
transactions (reserve, gang, release, resize) are :class:`iadeep.state._alloc.Allocations`. The
public stores are this class over a backend: :class:`iadeep.state.EtcdStateStore` (etcd's
gateway) and :class:`iadeep.state.MemoryStateStore` (in process), so both decide, write and
report alike: same keys, same errors, same watch events.

How the protocol's guarantees are met:

* **Atomic allocation**: compare-and-swap transactions on mod revisions (:mod:`iadeep.state._alloc`).
* **Idempotent retries**: a transaction the backend sent twice (``TxnResult.retried``) is checked
  for its own effect (a nonce, a value, a key's absence) before it counts as failed; appended
  records get their keys before the first try.
* **Liveness**: ``put_inventory(..., lease_ttl_s=)`` attaches the record to a backend lease;
  :meth:`~KVStateStore.keepalive` renews the lease found on the record (from any process).
* **Watches** start at the revision after the ``watch()`` call, so nothing after the call is
  missed; :meth:`~KVStateStore.changes` raises :class:`HistoryCompacted` for a revision the
  backend no longer keeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from iadeep.state._alloc import Allocations
from iadeep.state._keys import Keys, check_name, new_seqs
from iadeep.state._kv import KV, Compare, Delete, KVBackend, Put, Range, WatchBatch, first, holds, unchanged
from iadeep.state._protocol import ChangeBatch, NodeRecords, StateListing, StoreUnavailable
from iadeep.state._records import (
    Assignment, BatchSizeAssignment, GpuState, InterferenceSampleRecord, JobCheckpoint, JobRecord, Measurement,
    NodeInventory, PlacementPolicy, RecordError, TuningRequest, UndoRecord, WorkloadStatus, ArrivalRecord, from_json,
    to_json,
)
from iadeep.state._rules import GangMember, checked_undo, settled_undo

__all__ = ["KVStateStore"]

log = logging.getLogger(__name__)

R = TypeVar("R")

_FOLLOWED = ("nodes/", "gpus/", "jobs/", "samples/", "undos/")


def _oldest_first(kvs: list[KV]) -> list[KV]:
    return sorted(kvs, key=lambda kv: (kv.create_revision, kv.key))


#: transactions put_arrivals tries for one record before leaving the stored one as it is
_ARRIVAL_ATTEMPTS = 5


def _arrival(kv: KV) -> ArrivalRecord | None:
    """The arrival record ``kv`` holds; ``None`` (logged) when it is malformed."""
    try:
        return from_json(ArrivalRecord, kv.value)
    except RecordError as exc:
        log.warning("malformed arrival record %s: %s", kv.key, exc)
        return None


class KVStateStore:
    """:class:`iadeep.state.StateStore` over ``backend`` (thread-safe as the backend is).

    Args:
        backend: where the records live.
        keys: the key schema (its prefix).
        conflict_attempts: allocation transactions tried before giving up on lost races.
    """

    def __init__(self, backend: KVBackend, keys: Keys, *, conflict_attempts: int) -> None:
        self.backend = backend
        self.keys = keys
        self._alloc = Allocations(backend, keys, conflict_attempts)
        self.max_reservation_gpus = self._alloc.max_reservation_gpus
        self._lock = threading.Lock()
        self._leases: dict[str, int] = {}  # node -> the lease this store put its inventory on

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def max_txn_ops(self) -> int:
        """The most operations of one transaction (the backend's, etcd's ``--max-txn-ops``)."""
        return self.backend.max_txn_ops

    def _get(self, key: str) -> KV | None:
        return first(self.backend.range(key)[0])

    def _scan(self, folder: str) -> list[KV]:
        return self.backend.range(self.keys.folder(folder), prefix=True)[0]

    def _parsed(self, cls: type[R], folder: str) -> list[R]:
        return [from_json(cls, kv.value) for kv in self._scan(folder)]

    @staticmethod
    def _well_formed(record_type: type[R], kvs: Sequence[KV]) -> list[R]:
        """The records of ``kvs`` that parse as ``record_type``; a malformed one is logged and left
        out (a list of many writers' records: one bad record must not hide the others from a reader)."""
        out = []
        for kv in kvs:
            try:
                out.append(from_json(record_type, kv.value))
            except RecordError as exc:
                log.warning("malformed record %s left out: %s", kv.key, exc)
        return out

    def _put(self, key: str, text: str, lease: int = 0) -> None:
        self.backend.txn([], [Put(key, text, lease)])

    def _get_record(self, cls: type[R], key: str) -> R | None:
        kv = self._get(key)
        return from_json(cls, kv.value) if kv else None

    def _delete(self, key: str) -> bool:
        return bool(self.backend.txn([], [Delete(key)]).responses[0])

    # -- lifecycle --------------------------------------------------------------------------

    def healthy(self, timeout_s: float = 2.0) -> bool:
        return self.backend.healthy(timeout_s)

    def deadline(self, seconds: float) -> AbstractContextManager[None]:
        """See :meth:`StateStore.deadline` (the backend's; the in-memory one bounds nothing)."""
        return self.backend.deadline(seconds)

    def close(self) -> None:
        """Close the backend (etcd: later calls raise :class:`StoreUnavailable`; memory:
        ``healthy()`` turns False and the data stays readable). Idempotent."""
        self.backend.close()

    def __enter__(self) -> KVStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Counters since creation: ``requests`` sent and ``retries`` after transient errors (the
        backend's; 0 in memory), ``txn_conflicts`` (allocation transactions that lost a race and
        were redone)."""
        return {**self.backend.stats(), "txn_conflicts": self._alloc.conflicts}

    # -- inventory --------------------------------------------------------------------------

    def put_inventory(self, inventory: NodeInventory, *, lease_ttl_s: int | None = None) -> None:
        """See :meth:`StateStore.put_inventory`; the lease this store gave the node before is
        revoked once the record is on the new one.

        Raises:
            ValueError: ``lease_ttl_s < 1``.
            StoreUnavailable: the backend cannot be reached.
        """
        node = check_name("NodeInventory.node", inventory.node)
        if lease_ttl_s is not None and lease_ttl_s < 1:
            raise ValueError(f"lease_ttl_s must be >= 1, got {lease_ttl_s}")
        lease = self.backend.grant(int(lease_ttl_s)) if lease_ttl_s is not None else 0
        try:
            self._put(self.keys.node(node), to_json(inventory), lease)
        except StoreUnavailable:
            if lease:
                self.backend.revoke(lease)
            raise
        with self._lock:
            old = self._leases.pop(node, 0)
            if lease:
                self._leases[node] = lease
        if old and old != lease:
            self.backend.revoke(old)  # the record moved to the new lease; the old one holds nothing now

    def keepalive(self, node: str) -> bool:
        """Renew the lease of ``node``'s inventory (works from any process: the lease is read from
        the record). True when the record is still there (leased or not); False when it is gone —
        expired or never published: call :meth:`put_inventory` again.

        Raises:
            StoreUnavailable: the backend cannot be reached.
        """
        kv = self._get(self.keys.node(check_name("node", node)))
        if kv is None:
            return False
        return True if not kv.lease else self.backend.keepalive(kv.lease)

    def inventories(self) -> dict[str, NodeInventory]:
        return {inv.node: inv for inv in self._parsed(NodeInventory, "nodes/")}

    # -- placement, jobs and allocation -----------------------------------------------------

    def put_placement(self, placement: PlacementPolicy) -> None:
        if placement.colocation_limit < 1:
            raise RecordError(f"PlacementPolicy: $.colocation_limit: must be >= 1, got {placement.colocation_limit}")
        self._put(self.keys.placement(), to_json(placement))

    def placement(self) -> PlacementPolicy | None:
        return self._get_record(PlacementPolicy, self.keys.placement())

    def put_job(self, job: JobRecord) -> None:
        self._put(self.keys.job(check_name("JobRecord.pod_uid", job.pod_uid)), to_json(job))

    def delete_job(self, pod_uid: str) -> bool:
        """Forget a job record, its measurements, batch size and workload status (not its
        reservation: :meth:`release` that). True when a job record was there."""
        check_name("pod_uid", pod_uid)
        result = self.backend.txn([], [
            Delete(self.keys.job(pod_uid)), Delete(self.keys.measurement(pod_uid, ""), prefix=True),
            Delete(self.keys.batch_size(pod_uid)), Delete(self.keys.workload(pod_uid)),
        ])
        return bool(result.responses[0])

    def jobs(self) -> dict[str, JobRecord]:
        return {job.pod_uid: job for job in self._parsed(JobRecord, "jobs/")}

    def gpu_states(self) -> dict[tuple[str, int], GpuState]:
        return dict(sorted(((st.node, st.gpu), st) for st in self._parsed(GpuState, "gpus/")))

    def reserve(self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
                known: NodeRecords | None = None, supersede: bool = False) -> list[Assignment]:
        """See :meth:`StateStore.reserve` and :meth:`Allocations.reserve`."""
        return self._alloc.reserve(job, node, gpus, colocation_limit=colocation_limit, now_s=now_s, known=known,
                                   supersede=supersede)

    def reserve_gang(self, members: Sequence[GangMember], *, colocation_limit: int,
                     now_s: float) -> list[list[Assignment]]:
        """See :meth:`StateStore.reserve_gang` and :meth:`Allocations.reserve_gang`."""
        return self._alloc.reserve_gang(members, colocation_limit=colocation_limit, now_s=now_s)

    def release(self, pod_uid: str, *, now_s: float, end_of_life: bool = True) -> list[Assignment]:
        """See :meth:`StateStore.release`; ``end_of_life=False`` keeps the job record and its
        measurements (a superseded reservation of a pod that is being placed again)."""
        return self._alloc.release(pod_uid, now_s=now_s, end_of_life=end_of_life)

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """See :meth:`StateStore.resize` and :meth:`Allocations.resize`."""
        return self._alloc.resize(node, gpu, sizes)

    def assignments(self, node: str | None = None) -> list[Assignment]:
        folder = "assignments/" if node is None else f"assignments/{check_name('node', node)}/"
        return sorted(self._parsed(Assignment, folder), key=lambda a: (a.node, a.gpu, a.pod_uid))

    # -- measurements, tuning, learning ----------------------------------------------------

    def add_measurement(self, m: Measurement) -> None:
        check_name("Measurement.pod_uid", m.pod_uid)
        (seq,) = new_seqs(1)
        self._put(self.keys.measurement(m.pod_uid, seq), to_json(m))

    def measurements(self, pod_uid: str) -> list[Measurement]:
        prefix = self.keys.measurement(check_name("pod_uid", pod_uid), "")
        return self._well_formed(Measurement, _oldest_first(self.backend.range(prefix, prefix=True)[0]))

    def tuning_requests(self) -> list[TuningRequest]:
        return sorted(self._well_formed(TuningRequest, self._scan("tuning/")), key=lambda t: (t.node, t.gpu))

    def complete_tuning(self, request: TuningRequest) -> bool:
        """Clear a tuning request if it is still the one given (same pods and time): the
        coordinator's acknowledgement. False when it changed meanwhile (tune again) or is gone."""
        key = self.keys.tuning(check_name("node", request.node), request.gpu)
        kv = self._get(key)
        if kv is None or from_json(TuningRequest, kv.value) != request:
            return False
        result = self.backend.txn([unchanged(key, kv)], [Delete(key)])
        return result.succeeded or (result.retried and self._get(key) is None)

    def add_samples(self, samples: Sequence[InterferenceSampleRecord]) -> None:
        """Append samples; one transaction per ``max_txn_ops`` samples (a failure part-way leaves
        the earlier chunks, each of which is whole).

        Raises:
            RecordError: an item that is not an :class:`InterferenceSampleRecord`.
        """
        samples = list(samples)
        for s in samples:
            if not isinstance(s, InterferenceSampleRecord):
                raise RecordError(f"add_samples: expected InterferenceSampleRecord, got {type(s).__name__}")
        seqs = new_seqs(len(samples))
        ops = [Put(self.keys.sample(q), to_json(s)) for q, s in zip(seqs, samples, strict=True)]
        step = self.max_txn_ops
        for i in range(0, len(ops), step):
            self.backend.txn([], ops[i:i + step])

    def samples(self) -> list[InterferenceSampleRecord]:
        return self._well_formed(InterferenceSampleRecord, _oldest_first(self._scan("samples/")))

    # -- undone co-locations ----------------------------------------------------------------

    def put_undo(self, record: UndoRecord) -> None:
        text = checked_undo(record)
        self._put(self.keys.undo(record.pod_uid), text)

    def undos(self) -> dict[str, UndoRecord]:
        found = (self.keys.decode_or_absent(kv.key, kv.value, kv.mod_revision) for kv in self._scan("undos/"))
        return {c.name: c.record for c in found if c is not None and c.record is not None}  # type: ignore[misc]

    def settle_undo(self, record: UndoRecord, outcome: str, *, at: float) -> bool:
        new = settled_undo(record, outcome, at)
        key = self.keys.undo(check_name("UndoRecord.pod_uid", record.pod_uid))
        result = self.backend.txn([holds(key, to_json(record))], [Put(key, to_json(new))])
        if result.succeeded:
            return True
        # a retried transaction may have committed the first time: then the record is the new one
        return result.retried and self._get_record(UndoRecord, key) == new

    # -- the extender's arrival log -----------------------------------------------------------

    def put_arrivals(self, records: Sequence[ArrivalRecord]) -> None:
        for record in records:
            key = self.keys.arrival(check_name("ArrivalRecord.job", record.job))
            text = to_json(record)
            for _ in range(_ARRIVAL_ATTEMPTS):  # a lost race with another writer of the key: read again
                result = self.backend.txn([Compare(key, "create", 0)], [Put(key, text)], [Range(key)])
                if result.succeeded:
                    break
                kv = first(result.responses[0])
                if kv is None:
                    continue  # deleted since: put it if absent again
                old = _arrival(kv)
                # the earliest meeting of a job counts (workers and restarts may meet it again
                # later): a well-formed stored record no later and still of use stays
                if old is not None and old.at <= record.at <= old.keep_until:
                    break
                if self.backend.txn([unchanged(key, kv)], [Put(key, text)]).succeeded:
                    break

    def arrivals(self) -> list[ArrivalRecord]:
        found = [r for r in map(_arrival, self._scan("arrivals/")) if r is not None]
        return sorted(found, key=lambda r: (r.at, r.job))

    def prune_arrivals(self, now: float) -> int:
        pruned = 0
        for kv in self._scan("arrivals/"):
            record = _arrival(kv)  # a malformed one goes too
            if (record is None or record.keep_until < now) \
                    and self.backend.txn([unchanged(kv.key, kv)], [Delete(kv.key)]).succeeded:
                pruned += 1  # a record rewritten since the scan stays
        return pruned

    # -- jobs' own records ------------------------------------------------------------------

    def set_batch_size(self, assignment: BatchSizeAssignment) -> None:
        self._put(self.keys.batch_size(check_name("BatchSizeAssignment.pod_uid", assignment.pod_uid)),
                  to_json(assignment))

    def batch_size(self, pod_uid: str) -> BatchSizeAssignment | None:
        return self._get_record(BatchSizeAssignment, self.keys.batch_size(check_name("pod_uid", pod_uid)))

    def put_workload(self, status: WorkloadStatus) -> None:
        self._put(self.keys.workload(check_name("WorkloadStatus.pod_uid", status.pod_uid)), to_json(status))

    def workload(self, pod_uid: str) -> WorkloadStatus | None:
        return self._get_record(WorkloadStatus, self.keys.workload(check_name("pod_uid", pod_uid)))

    def put_checkpoint(self, checkpoint: JobCheckpoint) -> None:
        self._put(self.keys.checkpoint(check_name("JobCheckpoint.job_key", checkpoint.job_key)), to_json(checkpoint))

    def checkpoint(self, job_key: str) -> JobCheckpoint | None:
        return self._get_record(JobCheckpoint, self.keys.checkpoint(check_name("job_key", job_key)))

    def delete_checkpoint(self, job_key: str) -> bool:
        return self._delete(self.keys.checkpoint(check_name("job_key", job_key)))

    # -- following the state ---------------------------------------------------------------

    def revision(self) -> int:
        return self.backend.revision()

    def list_state(self) -> StateListing:
        """The followed folders read at one revision (:meth:`KVBackend.ranges`); malformed
        records are logged and left out."""
        folders, revision = self.backend.ranges([self.keys.folder(f) for f in _FOLLOWED])
        parsed: dict[str, list[Any]] = {}
        for name, kvs in zip(_FOLLOWED, folders, strict=True):
            if name == "samples/":
                kvs = _oldest_first(kvs)
            changes = (self.keys.decode_or_absent(kv.key, kv.value, kv.mod_revision) for kv in kvs)
            parsed[name] = [c for c in changes if c is not None and c.record is not None]  # malformed: absent
        return StateListing(
            revision,
            {c.name: c.record for c in parsed["nodes/"]},
            dict(sorted((c.name, c.record) for c in parsed["gpus/"])),
            {c.name: c.record for c in parsed["jobs/"]},
            [c.record for c in parsed["samples/"]],
            {c.name: c.record for c in parsed["undos/"]},
        )

    def changes(self, start_revision: int, *, idle_s: float) -> Iterator[ChangeBatch]:
        """See :meth:`StateStore.changes`: one strict watch of the whole prefix; each backend
        batch (etcd: one watch response; memory: one revision) is one :class:`ChangeBatch`.

        Raises:
            ValueError: ``idle_s <= 0``.
            HistoryCompacted: as :meth:`KVBackend.watch` (memory: at the call; etcd: when iterated).
        """
        if idle_s <= 0:
            raise ValueError(f"idle_s must be > 0, got {idle_s}")
        return self._decoded(self.backend.watch([self.keys.prefix + "/"], start_revision, idle_s=idle_s))

    def _decoded(self, batches: Iterator[WatchBatch]) -> Iterator[ChangeBatch]:
        for batch in batches:
            out = []
            for e in batch.events:
                change = self.keys.decode_or_absent(e.kv.key, e.kv.value if e.type == "put" else None,
                                                    e.kv.mod_revision)
                if change is not None:
                    out.append(change)
            yield ChangeBatch(batch.revision, tuple(out))

    def watch(self, what: str | Sequence[str], *, timeout_s: float) -> Iterator[Mapping[str, str]]:
        """Events under ``<prefix>/<what>`` (a plain string prefix: end ``what`` with ``/`` to
        keep ``nodes/a`` from matching ``nodes/ab``), each ``{"type": "put"|"delete", "key"}``
        plus ``"value"`` (the record's JSON) for puts, until ``timeout_s`` passes without one.

        Several prefixes (a sequence of ``what``) are watched on one stream, all from the same
        revision (etcd: one ``create_request`` per prefix in one ``/v3/watch`` body). Each
        prefix's events come in revision order; events of different prefixes may interleave out
        of it. Events after this call are seen even if iteration starts later; a broken stream is
        reopened from the last revision delivered (within the retry policy).

        Raises:
            StoreUnavailable: the backend cannot be reached (at the call, or when reconnecting fails).
            ValueError: ``timeout_s <= 0`` or no prefix given.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        whats = [what] if isinstance(what, str) else list(what)
        if not whats:
            raise ValueError("watch needs at least one prefix")
        start = self.backend.revision() + 1
        return self._events(self.backend.watch([self.keys.folder(w) for w in whats], start, idle_s=timeout_s,
                                               strict=False))

    @staticmethod
    def _events(batches: Iterator[WatchBatch]) -> Iterator[Mapping[str, str]]:
        for batch in batches:
            for e in batch.events:
                event = {"type": e.type, "key": e.kv.key}
                if e.type == "put":
                    event["value"] = e.kv.value.decode()
                yield event
