"""A gang's reservation as one etcd transaction (:meth:`StateStore.reserve_gang`).

:class:`EtcdGangReserve` is a base class of :class:`iadeep.state.EtcdStateStore`, over its
transport (:class:`~iadeep.state._etcdwire.EtcdWire`: ``_read``, ``_txn``) and its ``keys``.
As a single pod's reservation: one read-only transaction reads, at one revision, the members'
node inventories, their reservation records and every GPU record they touch; the plan is
:func:`~iadeep.state._rules.plan_gang`; one transaction compares the mod revision of each record
read (``create_revision == 0`` for an absent one) and writes every member's job, assignments,
GPU states, tuning requests and reservation record. A lost race's failure branch returns the same
reads at the new revision. A retried commit whose first try landed is recognised by the nonce in
the members' reservation records.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Sequence
from typing import Any

from iadeep.state._etcdwire import _first, _put_op, _range_op, _same_rev
from iadeep.state._keys import reservation_from_json, reservation_json
from iadeep.state._protocol import AllocationConflict
from iadeep.state._records import Assignment, GpuState, NodeInventory, from_json, to_json
from iadeep.state._rules import GangMember, check_gpu_count, plan_gang

__all__ = ["EtcdGangReserve"]


class EtcdGangReserve:
    """:meth:`reserve_gang` of the etcd store (module docstring)."""

    def reserve_gang(self, members: Sequence[GangMember], *, colocation_limit: int,
                     now_s: float) -> list[list[Assignment]]:
        """See :meth:`StateStore.reserve_gang`."""
        for m in members:
            check_gpu_count(m.job, m.gpus, self.max_reservation_gpus, self.settings.max_txn_ops)
        nodes = sorted({m.node for m in members})
        gpus = sorted({(m.node, int(g)) for m in members for g in m.gpus})
        k_nodes = [self.keys.node(n) for n in nodes]
        k_res = [self.keys.reservation(m.job.pod_uid) for m in members]
        k_gpus = [self.keys.gpu(n, g) for n, g in gpus]
        keys = k_nodes + k_res + k_gpus
        reads = [_range_op(k) for k in keys]
        nonce = secrets.token_hex(8)
        snapshot = self._read(reads)
        maybe_committed = False
        attempts = self.settings.retry.conflict_attempts
        for attempt in range(attempts):
            kvs = [_first(r) for r in snapshot]
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
                inventories={n: from_json(NodeInventory, kv.value) if kv else None
                             for n, kv in zip(nodes, inv_kvs, strict=True)},
                states={key: from_json(GpuState, kv.value) if kv else None for key, kv in zip(gpus, gpu_kvs, strict=True)},
                held=held, colocation_limit=colocation_limit, now_s=now_s, max_txn_ops=self.settings.max_txn_ops,
            )
            compare = [_same_rev(k, kv) for k, kv in zip(keys, kvs, strict=True)]
            ops: list[dict[str, Any]] = []
            last: dict[str, dict[str, Any]] = {}  # a GPU two members share: the later member's records
            for m, plan, k in zip(members, plans, k_res, strict=True):
                ops.append(_put_op(self.keys.job(m.job.pod_uid), to_json(m.job)))
                for a, st, t in zip(plan.assignments, plan.gpu_states, plan.tuning, strict=True):
                    ops.append(_put_op(self.keys.assignment(a.node, a.gpu, a.pod_uid), to_json(a)))
                    last[self.keys.gpu(st.node, st.gpu)] = _put_op(self.keys.gpu(st.node, st.gpu), to_json(st))
                    last[self.keys.tuning(t.node, t.gpu)] = _put_op(self.keys.tuning(t.node, t.gpu), to_json(t))
                ops.append(_put_op(k, reservation_json(plan.assignments, nonce)))
            ops += list(last.values())
            ok, snapshot, tries = self._txn(compare, ops, reads)
            if ok:
                return [list(p.assignments) for p in plans]
            maybe_committed = maybe_committed or tries > 1
            with self._lock:
                self._stats["txn_conflicts"] += 1
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 8)))  # de-synchronise racers
        raise AllocationConflict(f"gang {members[0].job.gang!r}: gave up after {attempts} transactions lost to "
                                 "concurrent changes of the same GPUs")
