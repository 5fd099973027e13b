"""The extender's bind verb: from kube-scheduler's bind call to a bound pod.

A bind chooses the pod's GPUs on the node kube-scheduler picked (:meth:`Policy.place` on a view of
that node), reserves them in the state store, and binds the pod with the reservation's annotations
(:mod:`iadeep.extender._bind`), all within ``call_budget_s``. Filters of later pods wait until the
pods passed before them are reserved (:meth:`BindPipeline.await_binds`), so no two decisions see
the same free GPU.

:class:`BindPipeline` is a part of :class:`iadeep.extender.ExtenderService` (a base class of it),
over the service's state: ``settings``, ``store``, ``pod_api``, ``cache``, the policy and its lock,
the admission gate, the bind bookkeeping (``_binding``, ``_bound``) and the helpers of
:mod:`iadeep.extender._service` (``_demand``, ``_request``, ``_node_lock``, ...).
"""

from __future__ import annotations

import logging
import time

from iadeep.extender._admission import AdmissionBusy, AdmissionTurn
from iadeep.extender._bind import (
    BindFailed,
    KubeError,
    bind_annotations,
    bind_with_annotations,
    call_deadline,
    time_left,
)
from iadeep.extender._pods import ANNOTATION_BIND_PHASE, BIND_PHASE_ALLOCATING, PodDemand, PodSpecError
from iadeep.extender._preempt import with_nominations
from iadeep.extender._wire import ExtenderBindingArgs, ExtenderBindingResult
from iadeep.policy import Placement
from iadeep.state import AllocationConflict, Assignment, NodeRecords, RecordError, StoreUnavailable

__all__ = ["BindPipeline", "NO_INVENTORY"]

log = logging.getLogger("iadeep.extender")

#: The reason given for a node without the device plugin's inventory.
NO_INVENTORY = "node has no GPU inventory published by the iadeep device plugin"
_CALLS_SHARE = 0.8  # of call_budget_s, for a bind's etcd and Kubernetes API calls together


class BindPipeline:
    """The bind verb and its bookkeeping (module docstring)."""

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Choose the GPU(s) on ``args.node``, reserve, bind with the annotations (see :mod:`._bind`), all
        within ``call_budget_s``: the store's and the Kubernetes API's requests share it (see
        :class:`~iadeep.extender.ExtenderSettings`)."""
        if self.pod_api is None:
            return ExtenderBindingResult(Error="iadeep: no Kubernetes API configured")
        # the calls get 80% of the budget: the rest is for the verb's own work (placement, the
        # answer) and for a loaded machine's scheduling delays
        calls_s = self.settings.call_budget_s * _CALLS_SHARE
        with call_deadline(calls_s), self.store.deadline(calls_s):
            return self._bind(args)

    def _bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        try:
            return self._bind_pod(args)
        finally:
            self._placed(args.pod_uid)

    def _placed(self, uid: str) -> None:
        """The filters waiting for ``uid``'s bind may go on: its reservation is in the copy of the
        state (or it failed). Called once the reservation is applied, before the API's Binding
        (waiting for the previous pod's whole bind, API call included, bound 2-4 pods per second
        in the 1,000-job live benchmark on the loaded 2-core machine)."""
        if self._binding:
            with self._bound:
                if self._binding.pop(uid, None) is not None:
                    self._bound.notify_all()

    def binds_in_flight(self, uid: str) -> bool:
        """Whether pods other than ``uid`` passed a filter and wait for their bind."""
        return bool(self._binding) and (len(self._binding) > 1 or uid not in self._binding)

    def await_binds(self, uid: str) -> None:
        """Wait until the pods passed by earlier filters (other than ``uid``) are bound, or failed
        their bind, at most ``bind_wait_s`` after each was passed (a pod kube-scheduler did not
        bind after all is forgotten then)."""
        if not self._binding:
            return
        wait_s = self.settings.cache.bind_wait_s
        with self._bound:
            while True:
                now = time.monotonic()
                for k in [k for k, t in self._binding.items() if now - t >= wait_s]:
                    del self._binding[k]
                others = [t for k, t in self._binding.items() if k != uid]
                if not others:
                    return
                self._bound.wait(min(others) + wait_s - now)

    def _bind_pod(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        assert self.pod_api is not None
        ns, name, uid, node = args.pod_namespace, args.pod_name, args.pod_uid, args.node
        with self._memo_lock:
            demand = self._demands.get(uid)
        try:
            if demand is None:
                pod = self.pod_api.read_pod(ns, name)
                if pod.metadata.uid and pod.metadata.uid != uid:
                    return self._bind_result("failed", f"pod {ns}/{name} has UID {pod.metadata.uid}, not {uid}")
                demand = self._demand(pod)
            if demand is None:
                self.pod_api.bind(ns, name, uid, node)
                return self._bind_result("not_ours")
            type_id = self.types.resolve(demand.model, demand.batch_size)
        except KubeError as exc:
            return self._bind_result("failed", str(exc))
        except PodSpecError as exc:
            return self._bind_result("failed", str(exc))

        too_wide = self._too_wide(demand)
        if too_wide is not None:  # as filter said: no node can ever take it
            return self._bind_result("failed", too_wide)
        if demand.gang:  # a member binds only on its gang's reservation, once all members passed filter
            refused = self._gang_permit(demand, node)
            if refused:
                self._release_gang(demand.namespace, demand.gang, refused)
                return self._bind_result("gang_released", refused)
        inventory = self.cache.current()[0].inventories.get(node)
        if inventory is None or not inventory.allocates:
            return self._reserve_and_bind(demand, type_id, ns, name, uid, node, None)
        left = time_left()
        wait_s = self.settings.admission_wait_s if left is None else min(self.settings.admission_wait_s, left / 2)
        t_turn = time.perf_counter()
        try:
            with self.admissions.turn(node, uid, wait_s) as turn:
                self.metrics.bind_phase.labels("admission").observe(time.perf_counter() - t_turn)
                return self._reserve_and_bind(demand, type_id, ns, name, uid, node, turn)
        except AdmissionBusy as exc:
            return self._bind_result("wait", str(exc))

    def _reserve_and_bind(self, demand: PodDemand, type_id: int, ns: str, name: str, uid: str, node: str,
                          turn: AdmissionTurn | None) -> ExtenderBindingResult:
        """Reserve on ``node``, then annotate and bind (steps 1-2 of :mod:`._bind`); ``turn``: the
        node's admission turn when its device plugin serves ``Allocate`` (the bound pod is
        recorded there as allocating)."""
        assert self.pod_api is not None
        t_lock = time.perf_counter()
        with self._node_lock(node):
            self.metrics.bind_phase.labels("node_lock").observe(time.perf_counter() - t_lock)
            try:
                placed = self._reserve(demand, type_id, node)
            except StoreUnavailable as exc:
                # a reservation sent before the store stopped answering may still commit: the
                # sweep releases it unless a later bind of the pod reuses or supersedes it
                with self._memo_lock:
                    self._pending_release.add(uid)
                return self._bind_result("failed", f"state store did not answer within the bind's budget "
                                                   f"({self.settings.call_budget_s:g} s): {exc}")
            except RecordError as exc:
                return self._bind_result("failed", str(exc))
            if isinstance(placed, str):
                outcome = "wait" if placed.startswith("wait:") else "conflict"
                return self._bind_result(outcome, f"{node}: {placed.removeprefix('wait: ')}")
            assignments, reason, uuids, now = placed
        self._placed(uid)  # the copy holds the reservation: the next pods' filters see it
        annotations = bind_annotations(assignments, node=node, uuids=uuids, reason=reason, now_s=now)
        try:
            with self.metrics.phase("kube"):
                bind_with_annotations(self.store, self.pod_api, namespace=ns, name=name, uid=uid, node=node,
                                  annotations=annotations, now_s=self.clock())
        except BindFailed as exc:
            self.cache.forget(uid)
            if not getattr(exc, "released", True):
                with self._memo_lock:
                    self._pending_release.add(uid)
            self.pod_api.event(ns, name, uid, "IadeepBindFailed", str(exc), warning=True)
            if demand.gang:
                self._release_gang(demand.namespace, demand.gang, f"member {name} failed to bind: {exc}")
            return self._bind_result("released", str(exc))
        if turn is not None:
            turn.bound(uid, ns, name)
        if demand.gang:
            self._gang_bound_one(demand)
        with self._memo_lock:
            self._pending_release.discard(uid)  # bound: no earlier failed attempt's release applies
        self.nominations.drop(uid)
        if self._resumed:
            self._resumed.pop(self._job_of(demand.namespace, demand.name), None)
        return self._bind_result("bound")

    def _still_allocating(self, namespace: str, name: str, uid: str) -> bool:
        """Whether pod ``uid`` still waits for its device plugin's ``Allocate`` (the admission gate's
        poll; raises :class:`KubeError` when the API cannot tell)."""
        assert self.pod_api is not None
        try:
            pod = self.pod_api.read_pod(namespace, name)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return (pod.metadata.uid == uid and
                (pod.metadata.annotations or {}).get(ANNOTATION_BIND_PHASE) == BIND_PHASE_ALLOCATING)

    def _bind_result(self, outcome: str, error: str = "") -> ExtenderBindingResult:
        self.metrics.binds.labels(outcome).inc()
        return ExtenderBindingResult(Error=f"iadeep: {error}" if error else "")

    def _reserve(self, demand: PodDemand, type_id: int, node: str):
        """Place on ``node`` and reserve, re-placing after a conflict; returns
        ``(assignments, reason, uuids, now_s)`` or a message (``"wait: ..."`` for a policy Wait)."""
        last = ""
        for attempt in range(self.settings.bind_attempts):
            if attempt:
                self.metrics.retries.inc()
                self.cache.sync()
            snap, base = self.cache.current()
            base = with_nominations(base, snap, self.nominations.others(demand.uid), self.types, now_s=self.clock())
            existing: list[Assignment] = []
            if any(demand.uid in st.pods for st in snap.node_gpu_states(node)):
                existing = [a for a in self.store.assignments(node) if a.pod_uid == demand.uid]
            nb = base.restrict(node)
            if not nb.node_names:
                return NO_INVENTORY
            uuids = {int(nb.gpu_local_index[g]): nb.gpu_uuid[g] for g in range(nb.n_gpus)}
            if existing:  # a retried bind of a pod already reserved here: reuse the reservation
                return existing, "reservation already held", uuids, existing[0].assumed_at
            if demand.gang:  # its gang's reservation was released meanwhile: never placed alone
                return (f"gang {demand.gang!r} member {demand.gang_index} holds no reservation on {node} (its gang was "
                        "released; kube-scheduler places the gang again)")
            now = self.clock()
            job = self._job_record(demand, now)
            view, request = self._request(demand, type_id, nb, now)
            t_lock = time.perf_counter()
            with self._policy_lock:
                t_place = time.perf_counter()
                decision = self.policy.reserve(request, view)  # the reserve phase, on the node kube-scheduler chose
            self.metrics.bind_phase.labels("policy_lock").observe(t_place - t_lock)
            self.metrics.bind_phase.labels("place").observe(time.perf_counter() - t_place)
            if not isinstance(decision, Placement):
                return f"wait: {getattr(decision, 'reason', '')}"
            gpus = [int(view.gpu_local_index[g]) for g in decision.gpus]
            inv = snap.inventories.get(node)
            known = None if inv is None else NodeRecords(inv, {g.index: snap.gpu_states.get((node, g.index)) for g in inv.gpus})
            try:
                with self.metrics.phase("reserve_txn"):
                    assignments = self.store.reserve(job, node, gpus, colocation_limit=self.policy.limit, now_s=now,
                                                     known=known)
            except AllocationConflict as exc:
                held = list(exc.held) or [a for a in self.store.assignments(node) if a.pod_uid == demand.uid]
                if held and held[0].node == node:
                    return held, "reservation already held", uuids, held[0].assumed_at
                if not held or not self._unbound(demand):
                    last = str(exc)
                    continue
                # an earlier attempt of this pod's bind was interrupted after its reservation (on
                # another node) committed: the pod is unbound, so that reservation is superseded,
                # released in the same transaction that makes this one
                try:
                    assignments = self.store.reserve(job, node, gpus, colocation_limit=self.policy.limit, now_s=now,
                                                     known=known, supersede=True)
                except AllocationConflict as again:
                    last = str(again)
                    continue
                log.info("pod %s/%s: superseded its unbound reservation on %s", demand.namespace, demand.name,
                         held[0].node)
                # the copy drops the old reservation when the watch delivers this transaction; wait
                # for that (dropping the pod by hand could also drop the new one the watch brought)
                try:
                    self.cache.sync()
                except StoreUnavailable:
                    pass  # the new reservation is applied below; the watch corrects the rest
            self.cache.apply(job, type_id, assignments)
            return assignments, decision.reason, uuids, now
        return f"could not reserve GPU memory after {self.settings.bind_attempts} attempt(s): {last}"

    def _unbound(self, demand: PodDemand) -> bool:
        """Whether the pod (same UID) exists and is bound to no node (so a reservation it holds is
        an interrupted bind's, safe to supersede)."""
        if self.pod_api is None:
            return False
        try:
            pod = self.pod_api.read_pod(demand.namespace, demand.name)
        except KubeError as exc:
            log.warning("could not read pod %s/%s: %s", demand.namespace, demand.name, exc)
            return False
        return pod.metadata.uid == demand.uid and not pod.spec.nodeName
