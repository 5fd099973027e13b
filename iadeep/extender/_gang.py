"""Gangs: a job of more GPUs than one node has runs as ``n`` pods of ``p`` GPUs, placed all or nothing.

A gang's members are the pods labelled :data:`~iadeep.podspec.GANG_LABEL` ``= <gang>`` in one
namespace, each annotated with the gang's size :data:`~iadeep.podspec.ANNOTATION_GANG_SIZE`
``= n`` and carrying its completion index :data:`~iadeep.podspec.ANNOTATION_GANG_INDEX` (the
pods of an Indexed Job). Every member asks for the same ``p`` GPUs and memory.

Phases, as kube-scheduler calls the extender for each member in turn:

1. **Filter, no reservation yet** (:meth:`GangScheduling._gang_filter`): the gang is decided
   once, for every member not yet bound, when the first member that finds all ``n`` members in
   existence is filtered. The policy is asked about the whole gang (``JobRequest.num_gpus =
   k p``, ``pod_gpus = p``, :mod:`iadeep.policy`): a :class:`~iadeep.policy.Wait` fails every
   node and nothing is reserved; a :class:`~iadeep.policy.Placement` gives pod ``j`` the GPUs
   ``gpus[j p:(j+1) p]`` (one node), and member ``j`` (in index order) gets pod ``j``. All
   members' reservations are one transaction (:meth:`~iadeep.state.StateStore.reserve_gang`).
   Before all ``n`` members exist every node fails (``waiting for the gang's members``).
2. **Filter, reserved**: the member passes its reserved node only.
3. **Bind** (:meth:`GangScheduling._gang_permit`): a member's bind waits, at most
   ``gang_permit_wait_s``, until every member the decision reserved has passed its filter (as
   kube-scheduler's Permit phase waits for a gang); the bind then reuses the member's reservation.
   A member without a reservation on the node is refused (a member is never placed alone).
4. **Released together**: when a member's bind fails or its permit wait ends, when a member
   ends (deleted, failed) before the whole gang is bound, and when a member is left unbound
   ``gang_timeout_s`` after its reservation (the sweep), the reservations of every member not
   bound are released (:meth:`GangScheduling._release_gang`); kube-scheduler retries the
   members on the Node events the release makes (:mod:`iadeep.extender._nodestate`).

The members are read from the pod follower's copy of the pods (:class:`~iadeep.extender.GangMembers`,
no API request) while it is synced and complete, else listed through the API
(:meth:`GangScheduling._gang_members`). The release (phase 4) lists them through the API: it must
not miss a member bound a moment ago, whose watch event may still be on its way.

The permit bookkeeping (who passed, who is bound) is this process's; the reservations are the
store's. With several server processes (``workers > 1``) the members' filters may reach
different processes, whose permit waits then end unsatisfied and release the gang: run one
worker for gangs.

:class:`GangScheduling` is a part of :class:`iadeep.extender.ExtenderService` (a base class of
it), over the service's ``store``, ``pod_api``, ``cache``, policy and lock, and its helpers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from iadeep.extender._bind import KubeError, PodStatus, time_left
from iadeep.extender._pods import PodDemand, PodSpecError
from iadeep.extender._preempt import with_nominations
from iadeep.extender._view import Snapshot
from iadeep.extender._wire import ExtenderArgs, ExtenderFilterResult, Pod
from iadeep.policy import Placement
from iadeep.state import AllocationConflict, GangMember, StoreUnavailable

__all__ = ["GangScheduling", "reserved_node"]

log = logging.getLogger("iadeep.extender")

GangKey = tuple[str, str]  # (namespace, gang)


def reserved_node(snap: Snapshot, pod_uid: str) -> str | None:
    """The node on which ``pod_uid`` holds GPUs in ``snap`` (None: no reservation)."""
    for (node, _), st in snap.gpu_states.items():
        if pod_uid in st.pods:
            return node
    return None


class GangScheduling:
    """The gang verbs' parts and their bookkeeping (module docstring)."""

    def _init_gangs(self) -> None:
        self._gang_cond = threading.Condition(threading.Lock())
        self._gang_decided: dict[GangKey, set[str]] = {}  # members the decision reserved
        self._gang_arrived: dict[GangKey, set[str]] = {}  # of them, those whose filter passed
        self._gang_bound: dict[GangKey, set[str]] = {}
        self._gang_decide_lock = threading.Lock()  # one gang decision at a time

    # -- filter ------------------------------------------------------------------------------
    def _gang_filter(self, args: ExtenderArgs, demand: PodDemand, type_id: int) -> ExtenderFilterResult:
        """Filter of a gang member: its reserved node, after deciding the gang if nobody did."""
        names = args.candidate_names()
        key = (demand.namespace, demand.gang)
        with self._gang_decide_lock:
            try:
                snap, base = self.cache.current()
            except StoreUnavailable as exc:
                return ExtenderFilterResult.failure(f"iadeep: {exc}")
            node = reserved_node(snap, demand.uid)
            if node is None:
                outcome = self._gang_decide(demand, type_id, snap, base)
                if outcome.startswith("wait: "):
                    self.metrics.filter_nodes.labels("failed").inc(len(names))
                    return ExtenderFilterResult.for_args(
                        args, [], {n: f"iadeep: {outcome.removeprefix('wait: ')}" for n in names}, {})
                node = outcome
        with self._gang_cond:
            if key in self._gang_decided:
                self._gang_arrived.setdefault(key, set()).add(demand.uid)
                self._gang_cond.notify_all()
        why = f"gang {demand.gang!r} member {demand.gang_index} is reserved on {node}"
        passed = [n for n in names if n == node]
        self.metrics.filter_nodes.labels("passed").inc(len(passed))
        self.metrics.filter_nodes.labels("failed").inc(len(names) - len(passed))
        return ExtenderFilterResult.for_args(args, passed, {n: f"iadeep: {why}" for n in names if n != node}, {})

    def _gang_decide(self, demand: PodDemand, type_id: int, snap: Snapshot, base) -> str:
        """Decide and reserve the gang of ``demand``; returns the node of ``demand``'s member, or
        ``"wait: <reason>"`` (nothing reserved)."""
        if self.pod_api is None:
            return "wait: gang scheduling needs the Kubernetes API (no pod_api configured)"
        try:
            pods = self._gang_members(demand)
        except KubeError as exc:
            return f"wait: could not list the members of gang {demand.gang!r}: {exc}"
        members: dict[int, tuple[PodDemand, str]] = {}
        for status, pod in pods:
            try:
                d = self._pod_demand(pod)
            except PodSpecError as exc:
                return f"wait: member {pod.metadata.name} of gang {demand.gang!r}: {exc}"
            if d is None or d.gang != demand.gang:
                continue
            if (d.gang_size, d.num_gpus) != (demand.gang_size, demand.num_gpus) or abs(d.mem_gib - demand.mem_gib) > 1e-9:
                return (f"wait: the members of gang {demand.gang!r} disagree: {d.name} asks for {d.num_gpus} GPU(s) x "
                        f"{d.mem_gib:g} GiB in a gang of {d.gang_size}, {demand.name} for {demand.num_gpus} x "
                        f"{demand.mem_gib:g} GiB in a gang of {demand.gang_size}")
            if d.gang_index in members:
                return f"wait: gang {demand.gang!r} has two live members of index {d.gang_index}"
            members[d.gang_index] = (d, status.node)
        if len(members) < demand.gang_size:
            return f"wait: waiting for the gang's members: {len(members)} of {demand.gang_size} exist"
        pending = [d for i, (d, node) in sorted(members.items()) if not node and reserved_node(snap, d.uid) is None]
        if demand.uid not in {d.uid for d in pending}:
            return f"wait: pod {demand.name} is not among the live members of gang {demand.gang!r}"
        k, p = len(pending), demand.num_gpus
        now = self.clock()
        others = [n.pod_uid for n in self.nominations.others(demand.uid)]
        base = with_nominations(base, snap, self.nominations.others(demand.uid), self.types, now_s=now)
        view, request = base.with_job(msgspec.structs.replace(self._job_record(demand, now), num_gpus=k * p), type_id, now_s=now,
                                      jobs=snap.jobs)
        exclude = [*others, *(d.uid for d in pending)]
        request = replace(request, pod_gpus=p,
                          gpus_ahead=self.pending.gpus_ahead(demand.uid, demand.priority, demand.created_s,
                                                             demand.namespace, demand.name, exclude=exclude),
                          jobs_queued=self.pending.others(demand.uid, exclude=exclude))
        with self._policy_lock:
            decision = self.policy.place(request, view)
        if not isinstance(decision, Placement):
            return f"wait: gang of {k} pod(s) x {p} GPU(s): {getattr(decision, 'reason', '') or 'waits'}"
        chosen: list[GangMember] = []
        for j, d in enumerate(pending):
            gpus = decision.gpus[j * p:(j + 1) * p]
            nodes = {int(view.gpu_node[g]) for g in gpus}
            if len(nodes) != 1:
                return f"wait: the policy's placement put pod {j} of gang {demand.gang!r} on {len(nodes)} nodes"
            chosen.append(GangMember(self._job_record(d, now), view.node_names[nodes.pop()],
                                     tuple(int(view.gpu_local_index[g]) for g in gpus)))
        try:
            held = self.store.reserve_gang(chosen, colocation_limit=self.policy.limit, now_s=now)
        except (AllocationConflict, StoreUnavailable) as exc:
            try:
                self.cache.sync()
            except StoreUnavailable:
                pass
            return f"wait: gang {demand.gang!r} not reserved: {exc}"
        for m, assignments in zip(chosen, held, strict=True):
            self.cache.apply(m.job, type_id, assignments)
        key = (demand.namespace, demand.gang)
        with self._gang_cond:
            self._gang_decided[key] = {m.job.pod_uid for m in chosen}
            self._gang_arrived[key] = set()
            self._gang_bound[key] = set()
        log.info("gang %s/%s: %d pod(s) x %d GPU(s) reserved on %s (%s)", demand.namespace, demand.gang, k, p,
                 ", ".join(m.node for m in chosen), decision.reason)
        return next(m.node for m in chosen if m.job.pod_uid == demand.uid)

    def _gang_members(self, demand: PodDemand) -> list[tuple[PodStatus, Pod]]:
        """The live members of ``demand``'s gang: the pod follower's copy
        (:class:`~iadeep.extender.GangMembers`) while it is synced and holds all
        ``gang_size`` members, ``demand`` among them; else one listing through the API (the
        follower off or reconnecting, or a member whose watch event has not arrived yet: it
        trails the API server's write by milliseconds, and a member missing from the copy would
        make the gang wait for a retry).

        Raises:
            KubeError: the listing through the API failed.
        """
        follower = self.pod_follower
        if follower is not None and follower.synced:
            pods = self.gangs.members(demand.namespace, demand.gang)
            if len(pods) >= demand.gang_size and any(status.uid == demand.uid for status, _ in pods):
                return pods
            log.debug("gang %s/%s: the pod follower holds %d of its %d members; listing them", demand.namespace,
                      demand.gang, len(pods), demand.gang_size)
        assert self.pod_api is not None
        return self.pod_api.gang_pods(demand.namespace, demand.gang)

    # -- bind --------------------------------------------------------------------------------
    def _gang_permit(self, demand: PodDemand, node: str) -> str:
        """Wait until every member the gang's decision reserved has passed its filter; returns
        why the member may not be bound ("" when it may). Waits at most ``gang_permit_wait_s``
        (and half the bind's time left)."""
        try:
            snap = self.cache.current()[0]
        except StoreUnavailable as exc:
            return str(exc)
        if reserved_node(snap, demand.uid) != node:
            return (f"gang {demand.gang!r} member {demand.gang_index} holds no reservation on {node} (a member is "
                    "only bound on the GPUs its gang's decision reserved)")
        key = (demand.namespace, demand.gang)
        wait_s = self.settings.gang_permit_wait_s
        left = time_left()
        if left is not None:
            wait_s = min(wait_s, left / 2)
        deadline = time.monotonic() + wait_s
        with self._gang_cond:
            while True:
                decided = self._gang_decided.get(key)
                if decided is None or demand.uid not in decided:
                    return ""  # decided by another process or before a restart: its reservation stands
                missing = decided - self._gang_arrived.get(key, set()) - self._gang_bound.get(key, set())
                if not missing:
                    return ""
                rest = deadline - time.monotonic()
                if rest <= 0:
                    return (f"gang {demand.gang!r}: {len(missing)} of {len(decided)} member(s) did not reach "
                            f"filter within {wait_s:g} s; the gang is released and placed again")
                self._gang_cond.wait(rest)

    def _gang_bound_one(self, demand: PodDemand) -> None:
        """Member ``demand`` is bound; once every decided member is, the bookkeeping goes."""
        key = (demand.namespace, demand.gang)
        with self._gang_cond:
            decided = self._gang_decided.get(key)
            if decided is None:
                return
            bound = self._gang_bound.setdefault(key, set())
            bound.add(demand.uid)
            if decided <= bound:
                for table in (self._gang_decided, self._gang_arrived, self._gang_bound):
                    table.pop(key, None)

    # -- release -----------------------------------------------------------------------------
    def _release_gang(self, namespace: str, gang: str, why: str) -> list[str]:
        """Release the reservations of every member of the gang that is not bound; returns them."""
        key = (namespace, gang)
        with self._gang_cond:
            decided = self._gang_decided.pop(key, set())
            bound = self._gang_bound.pop(key, set())
            self._gang_arrived.pop(key, None)
        try:
            jobs = self.cache.current()[0].jobs
        except StoreUnavailable:
            jobs = {}
        uids = {u for u, j in jobs.items() if j.gang == gang and j.namespace == namespace} | decided
        if self.pod_api is not None:
            try:
                bound |= {status.uid for status, _ in self.pod_api.gang_pods(namespace, gang) if status.node}
            except KubeError as exc:
                log.warning("gang %s/%s: members not listed (%s); releasing the unbound ones known here", namespace,
                            gang, exc)
        todo = sorted(uids - bound)
        released = self.release_pods(todo, why="gang") if todo else []
        log.info("gang %s/%s released (%s): %s", namespace, gang, why, ", ".join(released) or "nothing held")
        return released

    def release_ended(self, uids: Sequence[str]) -> list[str]:
        """The pod follower's release of ended pods: a gang member that ends before its whole
        gang is bound releases the gang (the unbound members' reservations)."""
        gangs: set[GangKey] = set()
        try:
            jobs = self.cache.current()[0].jobs
        except StoreUnavailable:
            jobs = {}
        with self._gang_cond:
            for uid in uids:
                job = jobs.get(uid)
                if job is not None and job.gang and (job.namespace, job.gang) in self._gang_decided:
                    gangs.add((job.namespace, job.gang))
        released = self.release_pods(uids)
        for namespace, gang in sorted(gangs):
            more = self._release_gang(namespace, gang, "a member ended before the gang was bound")
            released += [u for u in more if u not in released]
        return released

    def gang_peers(self, uids: set[str], unbound: set[str]) -> set[str]:
        """The members of the gangs of ``uids`` that are in ``unbound`` (the sweep's release of a
        gang one of whose members is stale)."""
        try:
            jobs = self.cache.current()[0].jobs
        except StoreUnavailable:
            return set()
        gangs = {(j.namespace, j.gang) for u in uids if (j := jobs.get(u)) is not None and j.gang}
        if not gangs:
            return set()
        peers = {u for u, j in jobs.items() if j.gang and (j.namespace, j.gang) in gangs and u in unbound}
        with self._gang_cond:
            for key in gangs:
                for table in (self._gang_decided, self._gang_arrived, self._gang_bound):
                    table.pop(key, None)
        return peers
