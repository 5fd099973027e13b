"""Allocation transactions: the plans of :mod:`iadeep.state._rules` applied as compare-and-swap
transactions over a :class:`~iadeep.state._kv.KVBackend`.

Each operation reads the records it decides on at one revision (a read-only transaction), decides
with its plan, then commits one transaction that compares the mod revision of each record read
(``create_revision == 0`` for an absent one) and writes what the plan says. When a compare fails,
the transaction's failure branch returns the same reads at the new revision, so the retry needs
no extra round trip; after ``conflict_attempts`` lost races the operation gives up. A retried
commit whose first try did land (``TxnResult.retried``) is recognised by the nonce in the
reservation record (reserve, gang) or by the record's disappearance (release).

=========================  ===================================================================
operation                  reads (compared)                        writes
=========================  ===================================================================
reserve                    node, pod's reservation, its GPUs       job, per GPU: assignment,
                           (+ a superseded reservation's GPUs)     state, tuning; reservation
reserve_gang               members' nodes, reservations, GPUs      the same for every member
release                    reservation, its GPUs                   assignment deletes, states,
                                                                   tuning; pod's records deleted
resize                     node, GPU, pods' reservations, jobs     GPU state, assignments,
                                                                   reservations
=========================  ===================================================================
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TypeVar

from iadeep.state._keys import Keys, check_name, reservation_from_json, reservation_json
from iadeep.state._kv import KV, Compare, Delete, KVBackend, Op, Put, Range, TxnResult, first, holds, unchanged
from iadeep.state._protocol import AllocationConflict, NodeRecords, StoreUnavailable
from iadeep.state._records import Assignment, GpuState, JobRecord, NodeInventory, from_json, to_json
from iadeep.state._rules import (
    GangMember, ReleasePlan, check_gpu_count, check_resize, plan_gang, plan_release, plan_reserve, plan_resize,
    reservation_gpu_limit,
)

__all__ = ["Allocations"]


R = TypeVar("R")


def _parse_or_none(cls: type[R], kv: KV | None) -> R | None:
    """The record ``kv`` holds (``None``: absent).

    Raises:
        RecordError: malformed.
    """
    return from_json(cls, kv.value) if kv is not None else None


class Allocations:
    """reserve, reserve_gang, release and resize over ``backend`` (module docstring).

    Args:
        backend: the key-value backend.
        keys: the key schema.
        conflict_attempts: transactions tried per operation before giving up (>= 1).
    """

    def __init__(self, backend: KVBackend, keys: Keys, conflict_attempts: int) -> None:
        self.backend = backend
        self.keys = keys
        self.attempts = conflict_attempts
        self.max_reservation_gpus = reservation_gpu_limit(backend.max_txn_ops)
        self.conflicts = 0  # transactions that lost a race and were redone
        self._lock = threading.Lock()

    def _lost(self, attempt: int) -> None:
        with self._lock:
            self.conflicts += 1
        time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 8)))  # de-synchronise racers

    def _read(self, keys: Sequence[str]) -> list[KV | None]:
        return [first(r) for r in self.backend.txn([], [Range(k) for k in keys]).responses]

    def _commit(self, compares: list[Compare], ops: list[Op], keys: Sequence[str]) -> tuple[TxnResult, list[KV | None]]:
        """Commit; on a failed compare, the same ``keys`` read at the new revision."""
        result = self.backend.txn(compares, ops, [Range(k) for k in keys])
        return result, [] if result.succeeded else [first(r) for r in result.responses]

    def reserve(self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
                known: NodeRecords | None = None, supersede: bool = False) -> list[Assignment]:
        """See :meth:`StateStore.reserve`. Without ``known`` (or after it proved wrong) the node's
        records are read first and compared by mod revision; with it, the one transaction
        compares their values with ``known`` (a mismatch returns the current records, as a lost
        race does). A superseded reservation's GPU records join the reads and compares, and its
        release joins the same transaction."""
        check_name("JobRecord.pod_uid", job.pod_uid)
        check_name("node", node)
        gpus = [int(g) for g in gpus]
        check_gpu_count(job, gpus, self.max_reservation_gpus, self.backend.max_txn_ops)
        unique = sorted(set(gpus))
        k_node, k_res = self.keys.node(node), self.keys.reservation(job.pod_uid)
        k_gpus = [self.keys.gpu(node, g) for g in unique]
        base = [k_node, k_res, *k_gpus]
        old_keys: list[str] = []  # GPU records of a reservation being superseded (other node)
        reads = base
        nonce = secrets.token_hex(8)
        snapshot = None if known is not None else self._read(reads)
        maybe_committed = False  # a commit was retried on the wire: it may have landed
        for attempt in range(self.attempts):
            plan = None
            release_ops: list[Op] = []
            if snapshot is None:  # decide from the caller's records; the compares check them
                assert known is not None
                states = {g: known.gpu_states.get(g) for g in unique}
                compare = [holds(k_node, to_json(known.inventory) if known.inventory else None), unchanged(k_res, None)]
                compare += [holds(k, to_json(states[g]) if states[g] else None) for k, g in zip(k_gpus, unique, strict=True)]
                try:
                    plan = plan_reserve(job, node, gpus, inventory=known.inventory, states=states, held=None,
                                        colocation_limit=colocation_limit, now_s=now_s)
                except AllocationConflict:
                    snapshot = self._read(reads)  # the caller's records refuse it: judge the real ones
            if plan is None:
                assert snapshot is not None
                inv_kv, res_kv, gpu_kvs = snapshot[0], snapshot[1], snapshot[2:len(base)]
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
                        old_keys, reads = want, base + want
                        snapshot = self._read(reads)
                        continue
                plan = plan_reserve(
                    job, node, gpus,
                    inventory=_parse_or_none(NodeInventory, inv_kv),
                    states={g: _parse_or_none(GpuState, kv) for g, kv in zip(unique, gpu_kvs, strict=True)},
                    held=None if superseded else (held[0] if held else None),
                    colocation_limit=colocation_limit, now_s=now_s,
                )
                compare = [unchanged(k_node, inv_kv), unchanged(k_res, res_kv if superseded else None)]
                compare += [unchanged(k, kv) for k, kv in zip(k_gpus, gpu_kvs, strict=True)]
                if superseded:
                    old_kvs = snapshot[len(base):]
                    compare += [unchanged(k, kv) for k, kv in zip(old_keys, old_kvs, strict=True)]
                    release = plan_release(
                        superseded,
                        {(a.node, a.gpu): _parse_or_none(GpuState, kv) for a, kv in zip(superseded, old_kvs, strict=True)},
                        now_s=now_s,
                    )
                    release_ops = self._release_ops(release)
                    if len(release_ops) + 3 * len(plan.assignments) + 2 > self.backend.max_txn_ops:
                        # together too large for one transaction: release first, then decide again
                        self.release(job.pod_uid, now_s=now_s, end_of_life=False)
                        old_keys, reads = [], base
                        snapshot = self._read(reads)
                        continue
            ops = [*release_ops, Put(self.keys.job(job.pod_uid), to_json(job))]
            for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                ops.append(Put(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a)))
                ops.append(Put(self.keys.gpu(st.node, st.gpu), to_json(st)))
                ops.append(Put(self.keys.tuning(t.node, t.gpu), to_json(t)))
            ops.append(Put(k_res, reservation_json(plan.assignments, nonce)))
            result, snapshot = self._commit(compare, ops, reads)
            if result.succeeded:
                return plan.assignments
            maybe_committed = maybe_committed or result.retried
            self._lost(attempt)
        raise AllocationConflict(
            f"{node}/{gpus}: gave up after {self.attempts} transactions lost to concurrent changes of the same GPUs"
        )

    def _release_ops(self, plan: ReleasePlan) -> list[Op]:
        """The writes of a release plan (assignments, GPU states, tuning requests)."""
        ops: list[Op] = [Delete(self.keys.assignment(a.node, a.gpu, a.pod_uid)) for a in plan.released]
        ops += [Put(self.keys.gpu(st.node, st.gpu), to_json(st)) for st in plan.gpu_states]
        ops += [Delete(self.keys.gpu(n, g)) for n, g in plan.gpu_delete]
        ops += [Put(self.keys.tuning(t.node, t.gpu), to_json(t)) for t in plan.tuning_put]
        ops += [Delete(self.keys.tuning(n, g)) for n, g in plan.tuning_delete]
        return ops

    def release(self, pod_uid: str, *, now_s: float, end_of_life: bool = True) -> list[Assignment]:
        """See :meth:`StateStore.release`; ``end_of_life=False`` keeps the job record and its
        measurements (a superseded reservation of a pod that is being placed again).

        Raises:
            StoreUnavailable: ``conflict_attempts`` transactions lost to concurrent changes.
        """
        k_res = self.keys.reservation(check_name("pod_uid", pod_uid))
        maybe_committed = False
        planned: list[Assignment] = []
        conflicts = 0
        snapshot: list[KV | None] | None = None
        read_keys: list[str] | None = None
        reads: list[str] = []
        while conflicts < self.attempts:
            res_kv = first(self.backend.range(k_res)[0]) if snapshot is None else snapshot[0]
            if res_kv is None:
                return planned if maybe_committed else []
            held, _ = reservation_from_json(res_kv.value)
            keys = [self.keys.gpu(a.node, a.gpu) for a in held]
            if keys != read_keys:  # (re)read the reservation with the GPU records it names
                read_keys, reads = keys, [k_res, *keys]
                snapshot = self._read(reads)
                continue
            assert snapshot is not None
            gpu_kvs = snapshot[1:]
            plan = plan_release(
                held, {(a.node, a.gpu): _parse_or_none(GpuState, kv) for a, kv in zip(held, gpu_kvs, strict=True)},
                now_s=now_s,
            )
            compare = [unchanged(k_res, res_kv)] + [unchanged(k, kv) for k, kv in zip(keys, gpu_kvs, strict=True)]
            ops = self._release_ops(plan)
            ops.append(Delete(k_res))
            if end_of_life:  # the pod's records end with its reservation
                ops += [Delete(self.keys.job(pod_uid)), Delete(self.keys.measurement(pod_uid, ""), prefix=True),
                        Delete(self.keys.batch_size(pod_uid)), Delete(self.keys.workload(pod_uid))]
            result, snapshot = self._commit(compare, ops, reads)
            if result.succeeded:
                return held
            planned = held
            maybe_committed = maybe_committed or result.retried
            self._lost(conflicts)
            conflicts += 1
        raise StoreUnavailable(
            f"{self.backend.name}: release of {pod_uid} lost {self.attempts} races to concurrent changes"
        )

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """See :meth:`StateStore.resize`: the node's inventory, the GPU's state and each pod's
        reservation and job record are read at one revision, decided by
        :func:`~iadeep.state._rules.plan_resize` and written in one transaction that compares
        their mod revisions (a lost race reads and decides again)."""
        check_resize(node, gpu, sizes)
        pods = list(sizes)
        k_gpu = self.keys.gpu(node, gpu)
        k_res = [self.keys.reservation(p) for p in pods]
        keys = [self.keys.node(node), k_gpu, *k_res, *(self.keys.job(p) for p in pods)]
        kvs = self._read(keys)
        for attempt in range(self.attempts):
            res_kvs, job_kvs = kvs[2:2 + len(pods)], kvs[2 + len(pods):]
            plan = plan_resize(
                node, gpu, sizes,
                inventory=_parse_or_none(NodeInventory, kvs[0]),
                state=_parse_or_none(GpuState, kvs[1]),
                held={p: reservation_from_json(kv.value)[0] if kv else None for p, kv in zip(pods, res_kvs, strict=True)},
                requests={p: _parse_or_none(JobRecord, kv) for p, kv in zip(pods, job_kvs, strict=True)},
            )
            ops: list[Op] = [Put(k_gpu, to_json(plan.gpu_state))]
            for p, k in zip(pods, k_res, strict=True):
                assignments = plan.reservations[p]
                ops += [Put(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a))
                        for a in assignments if (a.node, a.gpu) == (node, gpu)]
                ops.append(Put(k, reservation_json(assignments, secrets.token_hex(8))))
            result, kvs = self._commit([unchanged(k, kv) for k, kv in zip(keys, kvs, strict=True)], ops, keys)
            if result.succeeded:
                return plan.gpu_state
            self._lost(attempt)
        raise AllocationConflict(f"{node}/gpu{gpu}: resize gave up after {self.attempts} transactions lost to "
                                 "concurrent changes")

    def reserve_gang(self, members: Sequence[GangMember], *, colocation_limit: int,
                     now_s: float) -> list[list[Assignment]]:
        """See :meth:`StateStore.reserve_gang`: the members' node inventories, reservation
        records and every GPU record they touch, read at one revision; one transaction for all."""
        for m in members:
            check_gpu_count(m.job, m.gpus, self.max_reservation_gpus, self.backend.max_txn_ops)
        nodes = sorted({m.node for m in members})
        gpus = sorted({(m.node, int(g)) for m in members for g in m.gpus})
        k_res = [self.keys.reservation(m.job.pod_uid) for m in members]
        keys = [*(self.keys.node(n) for n in nodes), *k_res, *(self.keys.gpu(n, g) for n, g in gpus)]
        nonce = secrets.token_hex(8)
        kvs = self._read(keys)
        maybe_committed = False
        for attempt in range(self.attempts):
            inv_kvs = kvs[:len(nodes)]
            res_kvs = kvs[len(nodes):len(nodes) + len(members)]
            gpu_kvs = kvs[len(nodes) + len(members):]
            held = {}
            for m, kv in zip(members, res_kvs, strict=True):
                if kv is not None:
                    assignments, stored_nonce = reservation_from_json(kv.value)
                    if maybe_committed and stored_nonce == nonce:
                        return [reservation_from_json(r.value)[0] for r in res_kvs if r is not None]  # ours landed
                    held[m.job.pod_uid] = assignments
            plans = plan_gang(
                members,
                inventories={n: _parse_or_none(NodeInventory, kv) for n, kv in zip(nodes, inv_kvs, strict=True)},
                states={key: _parse_or_none(GpuState, kv) for key, kv in zip(gpus, gpu_kvs, strict=True)},
                held=held, colocation_limit=colocation_limit, now_s=now_s, max_txn_ops=self.backend.max_txn_ops,
            )
            ops: list[Op] = []
            last: dict[str, Op] = {}  # a GPU two members share: the later member's records
            for m, plan, k in zip(members, plans, k_res, strict=True):
                ops.append(Put(self.keys.job(m.job.pod_uid), to_json(m.job)))
                for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                    ops.append(Put(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a)))
                    last[self.keys.gpu(st.node, st.gpu)] = Put(self.keys.gpu(st.node, st.gpu), to_json(st))
                    last[self.keys.tuning(t.node, t.gpu)] = Put(self.keys.tuning(t.node, t.gpu), to_json(t))
                ops.append(Put(k, reservation_json(plan.assignments, nonce)))
            ops += list(last.values())
            result, kvs = self._commit([unchanged(k, kv) for k, kv in zip(keys, kvs, strict=True)], ops, keys)
            if result.succeeded:
                return [list(p.assignments) for p in plans]
            maybe_committed = maybe_committed or result.retried
            self._lost(attempt)
        raise AllocationConflict(f"gang {members[0].job.gang!r}: gave up after {self.attempts} transactions lost to "
                                 "concurrent changes of the same GPUs")
