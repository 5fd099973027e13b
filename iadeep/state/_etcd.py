"""The etcd state store: the only code in iadeep that talks to etcd.

:class:`EtcdStateStore` implements :class:`iadeep.state.StateStore` over etcd's v3 JSON gateway
(``/v3/kv/txn`` and friends) with ``etcd3gw``'s client; see :mod:`iadeep.state._records` for the
key schema, :mod:`iadeep.state._keys` for its extra ``<p>/reservations/<pod_uid>`` key, and
:mod:`iadeep.state._rules` for the allocation rules.

How the guarantees of the protocol are met:

* **Atomic allocation.** :meth:`~EtcdStateStore.reserve` reads the node's inventory, the pod's
  reservation record and the GPU records it touches in one read-only transaction (one revision),
  decides with :func:`~iadeep.state._rules.plan_reserve`, then commits one transaction that
  compares the mod revision of each record it read (``create_revision == 0`` for an absent one)
  and puts the job, the assignments, the GPU states, the tuning requests and the reservation
  record. When a compare fails, the transaction's failure branch returns the same reads at the
  new revision, so the retry needs no extra round trip; it gives up with
  :class:`AllocationConflict` when the reservation no longer fits, or after
  ``retry.conflict_attempts`` lost races. :meth:`~EtcdStateStore.release` works the same way.
* **Idempotent retries.** A request that fails on the wire is retried (tenacity, exponential
  backoff with jitter, failover to the next endpoint) and the error becomes
  :class:`StoreUnavailable` naming the endpoints when retries run out. A retried commit whose
  first try did land is recognised by the nonce in the reservation record (reserve) or by the
  record's disappearance (release); appended records get their keys before the first try.
* **Thread safety.** Each thread gets its own HTTP session (``requests.Session`` is not
  documented thread-safe); shared state (auth token, endpoint choice, counters) sits behind locks.
* **Liveness.** ``put_inventory(..., lease_ttl_s=)`` attaches the record to an etcd lease;
  :meth:`~EtcdStateStore.keepalive` renews it; when the agent stops, etcd deletes the record.
* **Watches** stream ``/v3/watch`` from the revision of the ``watch()`` call (so nothing after
  the call is missed), reconnect after a broken stream from the last revision seen, and end after
  ``timeout_s`` without an event.

The transport (HTTP sessions, retries, failover, auth, watch streams) is
:class:`iadeep.state._etcdwire.EtcdWire`, this store's base class; a gang's reservation
(:meth:`~EtcdStateStore.reserve_gang`, one transaction for all members) is
:class:`iadeep.state._etcdgang.EtcdGangReserve`, the other.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from iadeep.state._etcdwire import (
    _KV, EtcdWire, _b64, _delete_op, _delete_prefix_op, _first, _put_op, _range_end, _range_op, _same_rev,
    _same_value,
)
from iadeep.state._etcdgang import EtcdGangReserve
from iadeep.state._keys import Keys, check_name, new_seqs, reservation_from_json, reservation_json
from iadeep.state._rules import (
    ReleasePlan, check_gpu_count, check_resize, checked_undo, plan_release, plan_reserve, plan_resize,
    reservation_gpu_limit, settled_undo,
)
from iadeep.state._protocol import AllocationConflict, ChangeBatch, NodeRecords, StateListing, StoreUnavailable
from iadeep.state._records import (
    Assignment, BatchSizeAssignment, WorkloadStatus, JobCheckpoint, GpuState, InterferenceSampleRecord, JobRecord,
    Measurement, NodeInventory, PlacementPolicy, RecordError, TuningRequest, UndoRecord, from_json, to_json,
)
from iadeep.state._settings import StateSettings

__all__ = ["EtcdStateStore"]

R = TypeVar("R")

log = logging.getLogger(__name__)

def _parse(cls: type[R], kv: _KV) -> R:
    return from_json(cls, kv.value)


class EtcdStateStore(EtcdGangReserve, EtcdWire):
    """:class:`iadeep.state.StateStore` backed by etcd (thread-safe).

    Args:
        settings: endpoints, prefix, TLS, auth, timeouts and retries; ``None`` reads them from
            the environment (``IADEEP_ETCD_*``). Without endpoints, the local etcd of
            ``iadeep etcd start`` is used if it runs.
        endpoints: shorthand overriding ``settings.endpoints``.

    Raises:
        StoreUnavailable: no endpoint configured and no local etcd running.

    Example::

        store = EtcdStateStore(endpoints=["http://127.0.0.1:2379"])
        store.put_inventory(NodeInventory("n1", (GpuInfo(0, 32.0),)), lease_ttl_s=10)
        store.reserve(job, "n1", [0], colocation_limit=2, now_s=time.time())
    """

    def __init__(self, settings: StateSettings | None = None, *, endpoints: Sequence[str] | None = None) -> None:
        settings = settings if settings is not None else StateSettings()
        if endpoints is not None:
            settings = StateSettings.model_validate({**settings.model_dump(), "endpoints": list(endpoints)})
        if not settings.endpoints:
            from iadeep.state._local import require_endpoints

            settings = StateSettings.model_validate({**settings.model_dump(), "endpoints": require_endpoints(settings)})
        super().__init__(settings)
        self.keys = Keys(settings.prefix)
        self.max_reservation_gpus = reservation_gpu_limit(settings.max_txn_ops)
        self._leases: dict[str, int] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> EtcdStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inventory --------------------------------------------------------------------------

    def put_inventory(self, inventory: NodeInventory, *, lease_ttl_s: int | None = None) -> None:
        node = check_name("NodeInventory.node", inventory.node)
        if lease_ttl_s is not None and lease_ttl_s < 1:
            raise ValueError(f"lease_ttl_s must be >= 1, got {lease_ttl_s}")
        lease = 0
        if lease_ttl_s is not None:
            granted, _ = self._post("/lease/grant", {"TTL": int(lease_ttl_s), "ID": 0})
            lease = int(granted["ID"])
        try:
            self._post("/kv/put", _put_op(self.keys.node(node), to_json(inventory), lease)["request_put"])
        except StoreUnavailable:
            if lease:
                self._revoke(lease)
            raise
        with self._lock:
            old = self._leases.pop(node, 0)
            if lease:
                self._leases[node] = lease
        if old and old != lease:
            self._revoke(old)  # the record moved to the new lease; the old one holds nothing now

    def _revoke(self, lease: int) -> None:
        with contextlib.suppress(StoreUnavailable):
            self._post("/lease/revoke", {"ID": lease})

    def keepalive(self, node: str) -> bool:
        """Renew the lease of ``node``'s inventory (works from any process: the lease is read from
        the record). True when the record is still there (leased or not); False when it is gone —
        expired or never published: call :meth:`put_inventory` again.

        Raises:
            StoreUnavailable: etcd unreachable after retries.
        """
        kv = self._get(self.keys.node(check_name("node", node)))
        if kv is None:
            return False
        if not kv.lease:
            return True
        result, _ = self._post("/lease/keepalive", {"ID": kv.lease})
        return int(result.get("result", {}).get("TTL", -1)) > 0

    def inventories(self) -> dict[str, NodeInventory]:
        out = {}
        for kv in self._scan(self.keys.folder("nodes/")):
            inv = _parse(NodeInventory, kv)
            out[inv.node] = inv
        return out

    # -- jobs and allocation ----------------------------------------------------------------

    def put_job(self, job: JobRecord) -> None:
        check_name("JobRecord.pod_uid", job.pod_uid)
        self._post("/kv/put", _put_op(self.keys.job(job.pod_uid), to_json(job))["request_put"])

    def delete_job(self, pod_uid: str) -> bool:
        """Forget a job record and its measurements (not its reservation: :meth:`release` that).
        True when a job record was there."""
        check_name("pod_uid", pod_uid)
        ok, responses, _ = self._txn(
            [],
            [
                {"request_delete_range": {"key": _b64(self.keys.job(pod_uid))}},
                {
                    "request_delete_range": {
                        "key": _b64(self.keys.measurement(pod_uid, "")),
                        "range_end": _range_end(self.keys.measurement(pod_uid, "")),
                    }
                },
                _delete_op(self.keys.batch_size(pod_uid)),
                _delete_op(self.keys.workload(pod_uid)),
            ],
        )
        return int(responses[0].get("response_delete_range", {}).get("deleted", 0)) > 0

    def jobs(self) -> dict[str, JobRecord]:
        out = {}
        for kv in self._scan(self.keys.folder("jobs/")):
            job = _parse(JobRecord, kv)
            out[job.pod_uid] = job
        return out

    def gpu_states(self) -> dict[tuple[str, int], GpuState]:
        out = {}
        for kv in self._scan(self.keys.folder("gpus/")):
            st = _parse(GpuState, kv)
            out[(st.node, st.gpu)] = st
        return dict(sorted(out.items()))

    def reserve(
        self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
        known: NodeRecords | None = None, supersede: bool = False,
    ) -> list[Assignment]:
        """See :meth:`StateStore.reserve`. Without ``known`` (or after it proved wrong) the node's
        records are read first and compared by mod revision; with it, the one transaction
        compares their values with ``known`` (a mismatch returns the current records, as a lost
        race does). A superseded reservation's GPU records join the reads and compares, and its
        release joins the same transaction."""
        check_name("JobRecord.pod_uid", job.pod_uid)
        check_name("node", node)
        gpus = [int(g) for g in gpus]
        check_gpu_count(job, gpus, self.max_reservation_gpus, self.settings.max_txn_ops)
        unique = sorted(set(gpus))
        k_node, k_res = self.keys.node(node), self.keys.reservation(job.pod_uid)
        k_gpus = [self.keys.gpu(node, g) for g in unique]
        base_reads = [_range_op(k_node), _range_op(k_res)] + [_range_op(k) for k in k_gpus]
        old_keys: list[str] = []  # GPU records of a reservation being superseded (other node)
        reads = base_reads
        nonce = secrets.token_hex(8)
        snapshot = None if known is not None else self._read(reads)
        maybe_committed = False  # a commit failed on the wire: it may have landed
        attempts = self.settings.retry.conflict_attempts
        for attempt in range(attempts):
            plan = None
            release_ops: list[dict[str, Any]] = []
            if snapshot is None:  # decide from the caller's records; the compares check them
                assert known is not None
                states = {g: known.gpu_states.get(g) for g in unique}
                compare = [_same_value(k_node, known.inventory), _same_rev(k_res, None)]
                compare += [_same_value(k, states[g]) for k, g in zip(k_gpus, unique, strict=True)]
                try:
                    plan = plan_reserve(job, node, gpus, inventory=known.inventory, states=states, held=None,
                                        colocation_limit=colocation_limit, now_s=now_s)
                except AllocationConflict:
                    snapshot = self._read(reads)  # the caller's records refuse it: judge the real ones
            if plan is None:
                assert snapshot is not None
                n_base = len(base_reads)
                inv_kv, res_kv = _first(snapshot[0]), _first(snapshot[1])
                gpu_kvs = [_first(r) for r in snapshot[2:n_base]]
                held = reservation_from_json(res_kv.value) if res_kv else None
                if held and maybe_committed and held[1] == nonce:
                    return held[0]  # our own earlier try landed
                superseded: list[Assignment] = []
                if held and supersede:
                    if held[0] and held[0][0].node == node:
                        return held[0]  # the pod's own earlier reservation on this node: reuse it
                    superseded = held[0]
                    want = [self.keys.gpu(a.node, a.gpu) for a in superseded]
                    if want != old_keys:  # read the superseded GPUs with the rest, at one revision
                        old_keys = want
                        reads = base_reads + [_range_op(k) for k in old_keys]
                        snapshot = self._read(reads)
                        continue
                plan = plan_reserve(
                    job,
                    node,
                    gpus,
                    inventory=_parse(NodeInventory, inv_kv) if inv_kv else None,
                    states={g: _parse(GpuState, kv) if kv else None for g, kv in zip(unique, gpu_kvs, strict=True)},
                    held=None if superseded else (held[0] if held else None),
                    colocation_limit=colocation_limit,
                    now_s=now_s,
                )
                compare = [_same_rev(k_node, inv_kv), _same_rev(k_res, res_kv if superseded else None)]
                compare += [_same_rev(k, kv) for k, kv in zip(k_gpus, gpu_kvs, strict=True)]
                if superseded:
                    old_kvs = [_first(r) for r in snapshot[n_base:]]
                    compare += [_same_rev(k, kv) for k, kv in zip(old_keys, old_kvs, strict=True)]
                    release = plan_release(
                        superseded,
                        {(a.node, a.gpu): _parse(GpuState, kv) if kv else None
                         for a, kv in zip(superseded, old_kvs, strict=True)},
                        now_s=now_s,
                    )
                    release_ops = self._release_ops(release)
                    if len(release_ops) + 3 * len(plan.assignments) + 2 > self.settings.max_txn_ops:
                        # together too large for one transaction: release first, then decide again
                        self.release(job.pod_uid, now_s=now_s, end_of_life=False)
                        old_keys, reads = [], base_reads
                        snapshot = self._read(reads)
                        continue
            ops = release_ops + [_put_op(self.keys.job(job.pod_uid), to_json(job))]
            for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                ops.append(_put_op(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a)))
                ops.append(_put_op(self.keys.gpu(st.node, st.gpu), to_json(st)))
                ops.append(_put_op(self.keys.tuning(t.node, t.gpu), to_json(t)))
            ops.append(_put_op(k_res, reservation_json(plan.assignments, nonce)))
            ok, snapshot, tries = self._txn(compare, ops, reads)
            if ok:
                return plan.assignments
            maybe_committed = maybe_committed or tries > 1
            with self._lock:
                self._stats["txn_conflicts"] += 1
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 8)))  # de-synchronise racers
        raise AllocationConflict(
            f"{node}/{gpus}: gave up after {attempts} transactions lost to concurrent changes of the same GPUs"
        )

    def _release_ops(self, plan: ReleasePlan) -> list[dict[str, Any]]:
        """The writes of a release plan (assignments, GPU states, tuning requests)."""
        ops = [_delete_op(self.keys.assignment(a.node, a.gpu, a.pod_uid)) for a in plan.released]
        ops += [_put_op(self.keys.gpu(st.node, st.gpu), to_json(st)) for st in plan.gpu_states]
        ops += [_delete_op(self.keys.gpu(n, g)) for n, g in plan.gpu_delete]
        ops += [_put_op(self.keys.tuning(t.node, t.gpu), to_json(t)) for t in plan.tuning_put]
        ops += [_delete_op(self.keys.tuning(n, g)) for n, g in plan.tuning_delete]
        return ops

    def release(self, pod_uid: str, *, now_s: float, end_of_life: bool = True) -> list[Assignment]:
        """See :meth:`StateStore.release`; ``end_of_life=False`` keeps the job record and its
        measurements (a superseded reservation of a pod that is being placed again)."""
        k_res = self.keys.reservation(check_name("pod_uid", pod_uid))
        maybe_committed = False
        planned: list[Assignment] = []
        attempts = self.settings.retry.conflict_attempts
        conflicts = 0
        snapshot: list[dict[str, Any]] | None = None
        read_keys: list[str] | None = None
        reads: list[dict[str, Any]] = []
        while conflicts < attempts:
            res_kv = self._get(k_res) if snapshot is None else _first(snapshot[0])
            if res_kv is None:
                return planned if maybe_committed else []
            held, _ = reservation_from_json(res_kv.value)
            keys = [self.keys.gpu(a.node, a.gpu) for a in held]
            if keys != read_keys:  # (re)read the reservation with the GPU records it names
                read_keys = keys
                reads = [_range_op(k_res)] + [_range_op(k) for k in keys]
                snapshot = self._read(reads)
                continue
            assert snapshot is not None
            gpu_kvs = [_first(r) for r in snapshot[1:]]
            plan = plan_release(
                held,
                {(a.node, a.gpu): _parse(GpuState, kv) if kv else None for a, kv in zip(held, gpu_kvs, strict=True)},
                now_s=now_s,
            )
            compare = [_same_rev(k_res, res_kv)] + [_same_rev(k, kv) for k, kv in zip(keys, gpu_kvs, strict=True)]
            ops = self._release_ops(plan)
            ops.append(_delete_op(k_res))
            if end_of_life:  # the pod's records end with its reservation
                ops.append(_delete_op(self.keys.job(pod_uid)))
                ops.append(_delete_prefix_op(self.keys.measurement(pod_uid, "")))
                ops.append(_delete_op(self.keys.batch_size(pod_uid)))
                ops.append(_delete_op(self.keys.workload(pod_uid)))
            ok, snapshot, tries = self._txn(compare, ops, reads)
            if ok:
                return held
            planned = held
            maybe_committed = maybe_committed or tries > 1
            conflicts += 1
            with self._lock:
                self._stats["txn_conflicts"] += 1
            time.sleep(random.uniform(0, 0.001 * min(conflicts, 8)))
        raise StoreUnavailable(
            f"etcd at {self._where()}: release of {pod_uid} lost {attempts} races to concurrent changes"
        )

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """See :meth:`StateStore.resize`: the node's inventory, the GPU's state and each pod's
        reservation and job record are read at one revision, decided by
        :func:`~iadeep.state._rules.plan_resize` and written in one transaction that compares
        their mod revisions (a lost race reads and decides again)."""
        check_resize(node, gpu, sizes)
        pods = list(sizes)
        k_node, k_gpu = self.keys.node(node), self.keys.gpu(node, gpu)
        k_res = [self.keys.reservation(p) for p in pods]
        k_job = [self.keys.job(p) for p in pods]
        keys = [k_node, k_gpu, *k_res, *k_job]
        reads = [_range_op(k) for k in keys]
        attempts = self.settings.retry.conflict_attempts
        snapshot = self._read(reads)
        for attempt in range(attempts):
            kvs = [_first(r) for r in snapshot]
            inv_kv, gpu_kv = kvs[0], kvs[1]
            res_kvs, job_kvs = kvs[2:2 + len(pods)], kvs[2 + len(pods):]
            plan = plan_resize(
                node, gpu, sizes,
                inventory=_parse(NodeInventory, inv_kv) if inv_kv else None,
                state=_parse(GpuState, gpu_kv) if gpu_kv else None,
                held={p: reservation_from_json(kv.value)[0] if kv else None for p, kv in zip(pods, res_kvs, strict=True)},
                requests={p: _parse(JobRecord, kv) if kv else None for p, kv in zip(pods, job_kvs, strict=True)},
            )
            compare = [_same_rev(k, kv) for k, kv in zip(keys, kvs, strict=True)]
            ops = [_put_op(k_gpu, to_json(plan.gpu_state))]
            for p, k in zip(pods, k_res, strict=True):
                assignments = plan.reservations[p]
                ops += [_put_op(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                        for a in assignments if (a.node, a.gpu) == (node, gpu)]
                ops.append(_put_op(k, reservation_json(assignments, secrets.token_hex(8))))
            ok, responses, _ = self._txn(compare, ops, reads)
            if ok:
                return plan.gpu_state
            snapshot = responses
            with self._lock:
                self._stats["txn_conflicts"] += 1
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 8)))
        raise AllocationConflict(f"{node}/gpu{gpu}: resize gave up after {attempts} transactions lost to concurrent changes")

    def assignments(self, node: str | None = None) -> list[Assignment]:
        folder = "assignments/" if node is None else f"assignments/{check_name('node', node)}/"
        found = [_parse(Assignment, kv) for kv in self._scan(self.keys.folder(folder))]
        return sorted(found, key=lambda a: (a.node, a.gpu, a.pod_uid))

    # -- measurements, tuning, learning ----------------------------------------------------

    def add_measurement(self, m: Measurement) -> None:
        check_name("Measurement.pod_uid", m.pod_uid)
        (seq,) = new_seqs(1)
        self._post("/kv/put", _put_op(self.keys.measurement(m.pod_uid, seq), to_json(m))["request_put"])

    def measurements(self, pod_uid: str) -> list[Measurement]:
        prefix = self.keys.measurement(check_name("pod_uid", pod_uid), "")
        return [_parse(Measurement, kv) for kv in self._scan_ordered(prefix)]

    def tuning_requests(self) -> list[TuningRequest]:
        found = [_parse(TuningRequest, kv) for kv in self._scan(self.keys.folder("tuning/"))]
        return sorted(found, key=lambda t: (t.node, t.gpu))

    def complete_tuning(self, request: TuningRequest) -> bool:
        """Clear a tuning request if it is still the one given (same pods and time): the
        coordinator's acknowledgement. False when it changed meanwhile (tune again) or is gone."""
        key = self.keys.tuning(check_name("node", request.node), request.gpu)
        kv = self._get(key)
        if kv is None or _parse(TuningRequest, kv) != request:
            return False
        ok, _, tries = self._txn([_same_rev(key, kv)], [_delete_op(key)])
        return ok or (tries > 1 and self._get(key) is None)

    def add_samples(self, samples: Sequence[InterferenceSampleRecord]) -> None:
        """Append samples; one transaction per ``max_txn_ops`` samples (a failure part-way leaves
        the earlier chunks, each of which is whole)."""
        samples = list(samples)
        for s in samples:
            if not isinstance(s, InterferenceSampleRecord):
                raise RecordError(f"add_samples: expected InterferenceSampleRecord, got {type(s).__name__}")
        seqs = new_seqs(len(samples))
        ops = [_put_op(self.keys.sample(q), to_json(s)) for q, s in zip(seqs, samples, strict=True)]
        step = self.settings.max_txn_ops
        for i in range(0, len(ops), step):
            self._txn([], ops[i : i + step])

    def samples(self) -> list[InterferenceSampleRecord]:
        return [_parse(InterferenceSampleRecord, kv) for kv in self._scan_ordered(self.keys.folder("samples/"))]

    # -- jobs' own records -------------------------------------------------------------------

    def _put_record(self, key: str, record: Any) -> None:
        """Write one JSON record (a job's own record: one put, no transaction)."""
        self._post("/kv/put", _put_op(key, to_json(record))["request_put"])

    def _get_record(self, cls: type[R], key: str) -> R | None:
        kv = self._get(key)
        return _parse(cls, kv) if kv else None

    def set_batch_size(self, assignment: BatchSizeAssignment) -> None:
        self._put_record(self.keys.batch_size(check_name("BatchSizeAssignment.pod_uid", assignment.pod_uid)), assignment)

    def batch_size(self, pod_uid: str) -> BatchSizeAssignment | None:
        return self._get_record(BatchSizeAssignment, self.keys.batch_size(check_name("pod_uid", pod_uid)))

    def put_workload(self, status: WorkloadStatus) -> None:
        self._put_record(self.keys.workload(check_name("WorkloadStatus.pod_uid", status.pod_uid)), status)

    def workload(self, pod_uid: str) -> WorkloadStatus | None:
        return self._get_record(WorkloadStatus, self.keys.workload(check_name("pod_uid", pod_uid)))

    def put_checkpoint(self, checkpoint: JobCheckpoint) -> None:
        self._put_record(self.keys.checkpoint(check_name("JobCheckpoint.job_key", checkpoint.job_key)), checkpoint)

    def checkpoint(self, job_key: str) -> JobCheckpoint | None:
        return self._get_record(JobCheckpoint, self.keys.checkpoint(check_name("job_key", job_key)))

    def delete_checkpoint(self, job_key: str) -> bool:
        ok, responses, _ = self._txn([], [_delete_op(self.keys.checkpoint(check_name("job_key", job_key)))])
        return int(responses[0].get("response_delete_range", {}).get("deleted", 0)) > 0

    def put_placement(self, placement: PlacementPolicy) -> None:
        if placement.colocation_limit < 1:
            raise RecordError(f"PlacementPolicy: $.colocation_limit: must be >= 1, got {placement.colocation_limit}")
        self._post("/kv/put", _put_op(self.keys.placement(), to_json(placement))["request_put"])

    def placement(self) -> PlacementPolicy | None:
        kv = self._get(self.keys.placement())
        return _parse(PlacementPolicy, kv) if kv else None

    # -- undone co-locations ----------------------------------------------------------------

    def put_undo(self, record: UndoRecord) -> None:
        text = checked_undo(record)
        self._post("/kv/put", _put_op(self.keys.undo(record.pod_uid), text)["request_put"])

    def undos(self) -> dict[str, UndoRecord]:
        found = (self.keys.decode_or_absent(kv.key, kv.value, kv.mod_revision) for kv in self._scan(self.keys.folder("undos/")))
        return {c.name: c.record for c in found if c is not None and c.record is not None}  # type: ignore[misc]

    def settle_undo(self, record: UndoRecord, outcome: str, *, at: float) -> bool:
        new = settled_undo(record, outcome, at)
        key = self.keys.undo(check_name("UndoRecord.pod_uid", record.pod_uid))
        ok, _, tries = self._txn([_same_value(key, record)], [_put_op(key, to_json(new))])
        if ok:
            return True
        # a retried transaction may have committed the first time: then the record is the new one
        return tries > 1 and self._get_record(UndoRecord, key) == new

    # -- following the state ---------------------------------------------------------------

    def list_state(self) -> StateListing:
        """One paged range read per folder, all at the revision of the first."""
        revision = None
        parsed: dict[str, list[Any]] = {}
        for folder in ("nodes/", "gpus/", "jobs/", "samples/", "undos/"):
            kvs, revision = self._scan_at(self.keys.folder(folder), revision)
            if folder == "samples/":
                kvs.sort(key=lambda kv: (kv.create_revision, kv.key))
            changes = (self.keys.decode_or_absent(kv.key, kv.value, kv.mod_revision) for kv in kvs)
            parsed[folder] = [c for c in changes if c is not None and c.record is not None]  # malformed: absent
        assert revision is not None
        return StateListing(
            revision,
            {c.name: c.record for c in parsed["nodes/"]},  # type: ignore[misc]
            dict(sorted((c.name, c.record) for c in parsed["gpus/"])),  # type: ignore[arg-type,misc]
            {c.name: c.record for c in parsed["jobs/"]},  # type: ignore[misc]
            [c.record for c in parsed["samples/"]],  # type: ignore[misc]
            {c.name: c.record for c in parsed["undos/"]},  # type: ignore[misc]
        )

    def changes(self, start_revision: int, *, idle_s: float) -> Iterator[ChangeBatch]:
        """See :meth:`StateStore.changes`: one watch of the whole prefix (kept open across
        reconnects from the last revision seen); each watch response is one batch."""
        if idle_s <= 0:
            raise ValueError(f"idle_s must be > 0, got {idle_s}")
        for revision, events in self._watch_batches([self.keys.prefix + "/"], start_revision, idle_s, strict=True):
            out = []
            for deleted, kv in events:
                change = self.keys.decode_or_absent(kv.key, None if deleted else kv.value, kv.mod_revision)
                if change is not None:
                    out.append(change)
            yield ChangeBatch(revision, tuple(out))

    # -- watch ------------------------------------------------------------------------------

    def watch(self, what: str | Sequence[str], *, timeout_s: float) -> Iterator[Mapping[str, str]]:
        """Events under ``<prefix>/<what>`` (a plain string prefix: end ``what`` with ``/`` to
        keep ``nodes/a`` from matching ``nodes/ab``), each ``{"type": "put"|"delete", "key"}``
        plus ``"value"`` (the record's JSON) for puts, until ``timeout_s`` passes without one.

        Several prefixes (a sequence of ``what``) are watched on one stream: one etcd watch per
        prefix, all from the same revision, created by one ``/v3/watch`` request whose body
        holds one ``create_request`` per prefix (the gateway reads successive ``WatchRequest``
        messages from the body of this bidirectional stream; etcd API v3, ``Watch`` RPC).
        Nothing outside the prefixes is sent by etcd. Each prefix's events come in revision
        order; events of different prefixes may interleave out of it (a watch that catches up
        with history sends its own backlog).

        Events after this call are seen even if iteration starts later. A broken stream is
        reopened with each prefix's watch from the last revision it delivered (within the retry
        policy).

        Raises:
            StoreUnavailable: etcd unreachable (at the call, or when reconnecting fails).
            ValueError: ``timeout_s <= 0`` or no prefix given.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        whats = [what] if isinstance(what, str) else list(what)
        if not whats:
            raise ValueError("watch needs at least one prefix")
        start = self._revision() + 1
        return self._watch([self.keys.folder(w) for w in whats], start, timeout_s)
