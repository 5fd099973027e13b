"""Carrying out the node coordinators' undos: the ban in the extender's policy, the eviction of the pod.

A coordinator whose tuning session measured its GPU's co-location below the policy's
``undo_below`` (:func:`iadeep.policy.undo_rule`, the rule the simulator's policy applies) writes an
:class:`~iadeep.state.UndoRecord`; it has no Kubernetes rights. The extender follows these records
with the rest of the state (:class:`~iadeep.extender._cache.StateCache`) and:

1. **bans** the record's job types from sharing a GPU with each other
   (:meth:`iadeep.policy.Policy.avoid`) at once, on the following thread: later filters and
   binds never form that pair again. Bans live only in the records: every listing hands all of
   them over again, so a restarted extender (or another worker) has them before it serves;
2. **evicts** the named pod through the Eviction API (``policy/v1``, RBAC ``pods/eviction``
   create, as for preemption: :mod:`iadeep.extender._preempt`), on a thread of its own (no
   Kubernetes call on the following thread), with the pod's UID as precondition. Its Job replaces
   it (``podFailurePolicy`` ignoring ``DisruptionTarget``); the replacement is placed with the
   work the evicted pod had left plus the checkpoint cost, as after a preemption. What "back to the
   queue" means here is kube-scheduler's: the replacement is a new pod, queued by its creation
   time behind the pods created before it, which is what the simulator's ``kube`` queue does
   with an evicted job (:meth:`iadeep.sim._queue.KubeQueue.requeue`);
3. **settles** the record (``outcome`` ``evicted``, or ``gone`` when the pod had already left:
   404, or a UID precondition that failed), by compare and swap.

Before it evicts, it asks the policy whether the pod **stays**
(:meth:`iadeep.policy.Policy.keeps`, on the extender's current view): with the ban in force the
pod would be locked out, every GPU of the cluster holding a job of a type banned beside it, for
longer than its pair costs (:class:`iadeep.policy.IADeep`). The simulator's policy asks the same
at the end of the session. A kept pod is not evicted; the record is settled ``kept`` and the ban
stands.

Idempotence: a settled record only bans. A pending one processed again (the extender restarted
between the eviction and the settlement; two workers) evicts by UID, so it can never evict a
second pod: the pod of that name is read first and evicted only if it still has the record's UID
(the eviction carries the UID as precondition too); otherwise the record is settled ``gone``.

Bad input never stops the extender: a record that does not parse is dropped by the store's
follower (logged, treated as absent); one whose job types the interference model does not know
is logged and skipped (no ban, no eviction); an eviction the API refuses for another reason (a
PodDisruptionBudget: 429; the API unreachable) leaves the record pending and is retried every
``retry_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from iadeep.extender._bind import KubeError, PodApi
from iadeep.extender._pods import PodSpecError
from iadeep.podspec import TypeResolver
from iadeep.policy import Policy
from iadeep.state import RecordError, StateStore, StoreUnavailable, UndoRecord

__all__ = ["UndoApplier"]

log = logging.getLogger("iadeep.extender")


class UndoApplier:
    """Applies undo records (module docstring). Thread-safe.

    Args:
        store: the state store (settles records).
        pod_api: the Kubernetes calls (``None``: bans only; evictions stay pending).
        types: resolves a record's ``(model, batch size)`` to the policy's job-type ids.
        policy: the extender's policy; ``policy_lock`` serialises calls into it.
        before_evict: called with a record just before its pod is evicted (the service keeps the
            pod's work left for its Job's replacement pod).
        clock: Unix seconds.
        retry_s: how often pending evictions that failed are tried again (s).
        on_settled: called with each outcome this process settled (the service counts them).
        keep: asked with a pending record before its pod is evicted: True keeps the pod, ``None``
            leaves the record pending, to be asked again (module docstring; ``keep=None``: every
            pod is evicted). An exception counts as False.
    """

    def __init__(self, *, store: StateStore, pod_api: PodApi | None, types: TypeResolver, policy: Policy,
                 policy_lock: threading.RLock, before_evict: Callable[[UndoRecord], None] | None = None,
                 clock: Callable[[], float] = time.time, retry_s: float = 5.0,
                 on_settled: Callable[[str], None] | None = None,
                 keep: Callable[[UndoRecord], bool | None] | None = None) -> None:
        self.store = store
        self.pod_api = pod_api
        self.types = types
        self.policy = policy
        self.policy_lock = policy_lock
        self.before_evict = before_evict
        self.clock = clock
        self.retry_s = retry_s
        self.on_settled = on_settled
        self.keep = keep
        self.banned: set[tuple[int, ...]] = set()  # type-id tuples applied to the policy
        self.settled: dict[str, str] = {}  # pod UID -> outcome, of the records this process settled
        self._pending: dict[str, UndoRecord] = {}  # pod UID -> record to carry out
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- from the following thread -----------------------------------------------------------
    def receive(self, records: Sequence[UndoRecord]) -> None:
        """Ban each record's types now; queue the pending ones for eviction (never raises)."""
        queued = False
        for r in records:
            try:
                ids = tuple(self.types.resolve(t.model, t.batch_size) for t in r.types)
            except PodSpecError as exc:
                log.error("undo record of pod %s skipped (no ban, no eviction): %s", r.pod_uid, exc)
                continue
            try:
                self._ban(ids, r)
            except Exception:  # noqa: BLE001 - the follower thread must go on (it would list again and again)
                log.exception("undo record of pod %s: the ban failed; skipped", r.pod_uid)
                continue
            with self._lock:
                if r.outcome == "pending":
                    self._pending[r.pod_uid] = r
                    queued = True
                else:
                    self._pending.pop(r.pod_uid, None)
        if queued:
            self._wake.set()

    def _ban(self, ids: tuple[int, ...], record: UndoRecord) -> None:
        with self.policy_lock:
            avoided = self.policy.avoided
            if all(avoided[a, b] for i, a in enumerate(ids) for j, b in enumerate(ids) if i != j):
                return  # already banned: no new eligibility version
            self.policy.avoid(list(ids))
            self.banned.add(ids)
        log.info("banned co-location of %s (undo of %s/%s on %s/gpu%d: %s)",
                 ", ".join(f"{t.model}/{t.batch_size}" for t in record.types), record.namespace, record.name,
                 record.node, record.gpu, record.reason or f"progress {record.progress:.2f} < {record.undo_below:g}")

    # -- evictions -----------------------------------------------------------------------------
    def pending(self) -> list[UndoRecord]:
        """The records whose eviction is still to be carried out."""
        with self._lock:
            return list(self._pending.values())

    def process(self) -> int:
        """Carry out the pending evictions now (one pass); returns how many were settled. Never
        raises: a failure leaves the record pending for the next pass."""
        if self.pod_api is None:
            return 0
        done = 0
        for r in self.pending():
            try:
                outcome = self._evict(r)
            except Exception:  # noqa: BLE001 - one bad record never stops the others
                log.exception("undo of pod %s/%s failed; retried later", r.namespace, r.name)
                continue
            if outcome is None:
                continue
            try:
                changed = not self.store.settle_undo(r, outcome, at=self.clock())
            except (StoreUnavailable, RecordError) as exc:
                log.warning("undo of pod %s/%s carried out (%s) but not settled: %s; retried later", r.namespace, r.name,
                            outcome, exc)
                continue  # evicting again by UID is harmless: the pod is gone (404 -> gone)
            with self._lock:
                if self._pending.get(r.pod_uid) == r:
                    del self._pending[r.pod_uid]
            self.settled[r.pod_uid] = outcome
            if self.on_settled is not None:
                self.on_settled(outcome)
            done += 1
            if changed:
                log.info("undo record of pod %s changed meanwhile (another extender settled it)", r.pod_uid)
        return done

    def _evict(self, r: UndoRecord) -> str | None:
        """Evict ``r``'s pod; the outcome to settle with (``None``: retry later)."""
        assert self.pod_api is not None
        try:  # the pod of that name must still be this one: a Job's replacement may carry the same name
            uid = self.pod_api.read_pod(r.namespace, r.name).metadata.uid
        except KubeError as exc:
            if exc.status != 404:
                log.warning("undo of pod %s/%s: could not read the pod, retried in %.0f s: %s", r.namespace, r.name,
                            self.retry_s, exc)
                return None
            uid = None
        if uid != r.pod_uid:
            log.info("undo of pod %s/%s (%s): the pod is gone%s; nothing evicted", r.namespace, r.name, r.pod_uid,
                     f" (that name is now pod {uid})" if uid else "")
            return "gone"
        kept = self._kept(r)
        if kept is None:
            log.info("undo of pod %s/%s: whether it stays cannot be decided now (state store); retried in %.0f s",
                     r.namespace, r.name, self.retry_s)
            return None
        if kept:
            log.info("undo of pod %s/%s on %s/gpu%d: kept (every GPU holds a type banned beside it, longer than "
                     "its pair costs); the ban stands", r.namespace, r.name, r.node, r.gpu)
            self._event(r, "IadeepKept", f"not evicted: {r.reason or 'co-location undone'}, but every GPU holds a "
                                           "type banned beside it for longer than this pair costs")
            return "kept"
        if self.before_evict is not None:
            self.before_evict(r)
        try:  # the UID precondition still guards the race with a replacement made meanwhile
            self.pod_api.evict(r.namespace, r.name, r.pod_uid)
        except KubeError as exc:
            if exc.status in (404, 409):  # gone, or a pod of that name with another UID: nothing of ours to evict
                log.info("undo of pod %s/%s (%s): the pod is gone (%s)", r.namespace, r.name, r.pod_uid, exc)
                return "gone"
            log.warning("undo of pod %s/%s: eviction refused, retried in %.0f s: %s", r.namespace, r.name,
                        self.retry_s, exc)
            return None
        log.info("undo: evicted pod %s/%s from %s/gpu%d: %s", r.namespace, r.name, r.node, r.gpu, r.reason)
        self._event(r, "IadeepUndone", f"evicted: {r.reason or 'co-location undone'}; its Job replaces it")
        return "evicted"

    def _event(self, r: UndoRecord, reason: str, message: str) -> None:
        """A Kubernetes event on ``r``'s pod; a failure is ignored (an event is for humans; what
        was done stands)."""
        assert self.pod_api is not None
        try:
            self.pod_api.event(r.namespace, r.name, r.pod_uid, reason, message)
        except Exception:  # noqa: BLE001
            pass

    def _kept(self, r: UndoRecord) -> bool | None:
        if self.keep is None:
            return False
        try:
            kept = self.keep(r)
            return None if kept is None else bool(kept)
        except Exception:  # noqa: BLE001 - a failed question evicts, as without the rule
            log.exception("undo of pod %s/%s: whether it stays could not be decided; evicting", r.namespace, r.name)
            return False

    # -- background ----------------------------------------------------------------------------
    def start(self) -> None:
        """Carry out evictions on a daemon thread as records arrive (and retry every ``retry_s``)."""
        if self._thread is not None or self.pod_api is None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="iadeep-undo", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.retry_s)
            self._wake.clear()
            if not self._stop.is_set():
                self.process()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
