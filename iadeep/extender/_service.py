"""The extender's verbs over decoded messages: decode -> policy core -> encode.

:class:`ExtenderService` owns the policy instance (not thread-safe: calls are serialised by a
lock), the :class:`~iadeep.extender._cache.StateCache` and the injected :class:`PodApi`. It makes
no placement decision itself: ``filter`` and ``prioritize`` answer with :meth:`Policy.assess`
(:meth:`Policy.filter` and :meth:`Policy.score` in one pass) and ``bind`` applies
:meth:`Policy.place` on a view restricted to the node kube-scheduler picked. Every failure ends
up in the wire format's ``Error`` field. The node coordinators' undo records are carried out by
:class:`~iadeep.extender._undo.UndoApplier` (the ban in this policy, the pod's eviction).

This module holds the service's shell (lifecycle, learning, the pods' demands) and the filter,
prioritize and preemption verbs; the bind verb is :class:`~iadeep.extender._binding.BindPipeline`,
the gangs' phases :class:`~iadeep.extender._gang.GangScheduling`, the releases, sweep and
inspection :class:`~iadeep.extender._upkeep.Upkeep` (its base classes).
"""

from __future__ import annotations

import gc
import inspect
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import msgspec
import numpy as np

from iadeep.extender._bind import (
    KubeError,
    PodApi,
)
from iadeep.extender._admission import AdmissionGate
from iadeep.extender._arrivals import ArrivalLog
from iadeep.extender._binding import NO_INVENTORY, BindPipeline
from iadeep.extender._cache import StateCache
from iadeep.extender._gang import GangScheduling
from iadeep.extender._metrics import ExtenderMetrics
from iadeep.extender._nodestate import NodeStatePublisher, reservations_annotation
from iadeep.extender._podwatch import GangMembers, PendingPods, PodFollower
from iadeep.extender._preempt import Nominations, with_nominations
from iadeep.extender._pods import (
    PodDemand,
    PodSpecError,
    job_of,
    job_record,
    load_quantity_parser,
    pod_demand,
)
from iadeep.extender._settings import ExtenderSettings
from iadeep.extender._undo import UndoApplier
from iadeep.extender._upkeep import Upkeep
from iadeep.extender._view import ViewBase
from iadeep.extender._wire import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriorityList,
    Pod,
)
from iadeep.podspec import TypeResolver
from iadeep.interference import InterferenceModel, InterferenceSample
from iadeep.policy import POLICIES, ClusterView, FilterResult, JobRequest, Placement, Preemption, Wait, make_policy
from iadeep.state import (
    InterferenceSampleRecord,
    JobRecord,
    PlacementPolicy,
    StateStore,
    StoreUnavailable,
    UndoRecord,
)

__all__ = ["ExtenderService"]

log = logging.getLogger("iadeep.extender")

_DEMAND_CACHE = 10_000
_ASSESSED = 8  # pods whose filter scores are kept for their prioritize (it follows at once)
_ASSESSED_TTL_S = 10.0


class ExtenderService(BindPipeline, GangScheduling, Upkeep):
    """Filter, prioritize and bind for kube-scheduler, plus inspection and upkeep.

    Args:
        settings: the service settings.
        store: the state store.
        pod_api: the Kubernetes calls (``None``: ``bind`` answers ``Error``; tests of filter only).
        model: the interference model.
        clock: Unix time (seconds), injectable.
    """

    def __init__(self, settings: ExtenderSettings, *, store: StateStore, pod_api: PodApi | None,
                 model: InterferenceModel, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.store = store
        self.pod_api = pod_api
        self.model = model
        self.clock = clock
        options: dict[str, Any] = {"colocation_limit": settings.colocation_limit} if settings.colocation_limit else {}
        if settings.preemption:
            if "preempt_unblocked" not in inspect.signature(POLICIES[settings.policy]).parameters:
                raise ValueError(f"policy {settings.policy!r} does not preempt: IADEEP_EXTENDER_PREEMPTION needs iadeep")
            options["preempt_unblocked"] = True
        if "price_arrivals" in inspect.signature(POLICIES[settings.policy]).parameters:
            options["price_arrivals"] = True  # kube-scheduler's queue lets a later pod start first
        if "slowdown_ends" in inspect.signature(POLICIES[settings.policy]).parameters:
            options["slowdown_ends"] = True  # as the experiment's kube queue (policy_flags)
        if "undo_below" in inspect.signature(POLICIES[settings.policy]).parameters:
            options["undo_below"] = settings.undo_below or None  # 0: never undo
        self.policy = make_policy(settings.policy, model, **options)
        self.nominations = Nominations(settings.preemption_hold_s)
        self._resumed: dict[tuple[str, str], float] = {}  # (namespace, Job) of a preempted pod -> work left (s)
        self.types = TypeResolver(model, settings.defaults.model, settings.defaults.batch_size)
        self._policy_lock = threading.RLock()
        self.metrics = ExtenderMetrics(self._metrics_rows)
        self.undos = UndoApplier(store=store, pod_api=pod_api, types=self.types, policy=self.policy,
                                 policy_lock=self._policy_lock, before_evict=self._resume_after_undo, clock=clock,
                                 on_settled=lambda outcome: self.metrics.undos.labels(outcome).inc(),
                                 keep=self._keeps_after_undo)
        # the iadeep.io/gpu-reservations Node annotation: a Node event after each change, on which kube-scheduler
        # retries the pods this extender refused (iadeep.extender._nodestate)
        self.node_state: NodeStatePublisher | None = None
        if settings.annotate_nodes and pod_api is not None:
            self.node_state = NodeStatePublisher(pod_api.annotate_node, self._node_annotation,
                                                 on_outcome=lambda outcome: self.metrics.node_annotations.labels(outcome).inc())
        self.cache = StateCache(store, self.types, slots=self.policy.limit, max_age_s=settings.cache.max_age_s,
                                idle_s=settings.cache.watch_idle_s, clock=clock, on_samples=self._learn,
                                on_undos=self.undos.receive,
                                on_nodes=self.node_state.mark if self.node_state is not None else None)
        self.samples_learned = 0
        self._node_locks: dict[str, threading.Lock] = {}
        self._node_locks_guard = threading.Lock()
        self._demands: OrderedDict[str, PodDemand] = OrderedDict()
        # pod UID -> (monotonic time, nodes judged, scores): prioritize follows filter
        self._assessed: OrderedDict[str, tuple[float, frozenset[str], dict[str, int]]] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._pending_release: set[str] = set()
        # releases of ended pods in flight: filter waits for them (kube-scheduler retries the pods
        # waiting for memory on the same pod event the follower acts on)
        self._releasing = 0
        self._released = threading.Condition(threading.Lock())
        # pods passed by filter whose bind has not come yet (uid -> monotonic time): the next
        # filter waits for them (kube-scheduler binds in the background)
        self._binding: dict[str, float] = {}
        self._bound = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.pod_follower: PodFollower | None = None
        # kube-scheduler's queue as far as the pods show it (the policy's gpus_ahead); filled by
        # the pod follower, empty without one
        self.pending = PendingPods(self._gpus_of)
        # the gangs' live members, kept by the pod follower (the gang decision reads them there)
        self.gangs = GangMembers()
        # pods bound to a node with a device plugin that has not served them yet: binds there
        # take turns (iadeep.extender._admission); fed by the pod follower
        self.admissions = AdmissionGate(self._still_allocating if pod_api is not None else None)
        self._placement_published = False
        # the policy's arrival log (the arrival price), kept in the store across restarts
        self.arrivals: ArrivalLog | None = None
        if getattr(self.policy, "price_arrivals", False):
            self.arrivals = ArrivalLog(store, self.types, clock=clock)
            self.policy.on_arrival = self.arrivals.record
        self._init_gangs()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Load the state (an unreachable store is reported, not raised) and start the upkeep threads.

        Everything loaded by then (modules, interference model, the listed state) is moved out of
        the cyclic garbage collector's reach (:func:`gc.freeze`): a full collection otherwise
        walks it all while holding the GIL, 60 ms at 1,000 nodes x 8 GPUs on the development
        machine, which every request in flight waits for. Objects made later are collected as usual.
        """
        load_quantity_parser()
        self._publish_placement()
        try:
            self.cache.refresh()
        except StoreUnavailable as exc:
            log.warning("state store not reachable at start: %s", exc)
        except Exception:  # noqa: BLE001 - serve anyway: /readyz reports it and the follower retries
            log.exception("could not load the state at start")
        if self.arrivals is not None:
            try:
                self.arrivals.restore(self.policy, self._policy_lock)
            except StoreUnavailable:  # the writer thread restores once the store answers
                pass
            except Exception:  # noqa: BLE001 - serve anyway; the writer thread tries again
                log.exception("could not take the arrival log back at start")
        gc.collect()
        gc.freeze()
        if self.node_state is not None:
            self.node_state.start()
        self.cache.start()
        self.undos.start()
        if self.arrivals is not None:
            self.arrivals.start(self.policy, self._policy_lock)
        if self.settings.cache.pod_watch and self.pod_api is not None:
            self.pod_follower = PodFollower(self.pod_api, self.release_ended,  # type: ignore[arg-type]
                                            timeout_s=self.settings.cache.pod_watch_timeout_s, pending=self.pending,
                                            admissions=self.admissions, gangs=self.gangs)
            self.pod_follower.start()
        interval = self.settings.cache.sweep_interval_s
        if interval > 0 and self.pod_api is not None:
            self._stop.clear()
            self._sweeper = threading.Thread(target=self._sweep_loop, args=(interval,), name="iadeep-sweep", daemon=True)
            self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()
        if self.pod_follower is not None:
            self.pod_follower.stop()
            self.pod_follower = None
        self.cache.stop()
        self.undos.stop()
        if self.arrivals is not None:
            self.arrivals.stop()
        if self.node_state is not None:
            self.node_state.stop()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
            self._sweeper = None

    def _publish_placement(self) -> bool:
        """Publish the policy and its co-location limit (:class:`~iadeep.state.PlacementPolicy`): the
        device plugins advertise that many ``gpu-count`` slots per GPU, so the kubelet admits as
        many pods per GPU as this extender places there; the node coordinators read the undo
        threshold and the session kind (:attr:`iadeep.policy.Policy.node_session`). False when the
        store did not answer."""
        if self._placement_published:
            return True
        try:
            self.store.put_placement(PlacementPolicy(self.policy.name, self.policy.limit, self.clock(),
                                                     undo_below=float(getattr(self.policy, "undo_below", None) or 0.0),
                                                     session=self.policy.node_session))
        except StoreUnavailable as exc:
            log.warning("placement not published yet (state store unreachable): %s", exc)
            return False
        self._placement_published = True
        log.info("published placement: policy %s, %d job(s) per GPU", self.policy.name, self.policy.limit)
        return True

    def ready(self) -> tuple[bool, str]:
        """``(ok, message)``: the store answers, the placement is published (retried here when
        the store did not answer at start) and the snapshot is fresh."""
        try:
            healthy = self.store.healthy()
        except Exception as exc:  # noqa: BLE001 - any failure of the probe means not ready
            return False, f"state store probe failed: {exc}"
        if not healthy:
            return False, "state store unreachable"
        if not self._publish_placement():
            return False, "placement not published (state store unreachable)"
        try:
            self.cache.current()
        except StoreUnavailable as exc:
            return False, str(exc)
        return True, "ok"

    def _node_annotation(self, node: str) -> str | None:
        """The ``iadeep.io/gpu-reservations`` value of ``node`` from the followed copy (raises StoreUnavailable)."""
        return reservations_annotation(self.cache.current()[0], node)

    # -- learning ----------------------------------------------------------------------------
    def _learn(self, records: Sequence[InterferenceSampleRecord]) -> None:
        learner = getattr(self.policy, "learner", None)
        types = self.model.types
        samples = []
        for r in records:
            try:
                a = types[self.types.resolve(r.job_model, r.job_batch_size)]
                b = types[self.types.resolve(r.partner_model, r.partner_batch_size)]
                y = float(r.normalised_throughput)
                if not 0.0 <= y < math.inf:
                    raise ValueError(f"normalised throughput must be finite and >= 0, got {y}")
                samples.append(InterferenceSample(a, b, y))
            except (PodSpecError, TypeError, ValueError) as exc:
                log.warning("ignoring a learned sample (%s): %s", exc, r)
        with self._policy_lock:
            if learner is not None:
                learner.observe_many(samples)
            self.samples_learned += len(samples)
        self.metrics.samples.set(self.samples_learned)

    def predicted(self) -> np.ndarray:
        """Pairwise predicted normalised throughput the policy uses, shape ``(n_types, n_types)``
        (the measured table for policies without a predictor)."""
        with self._policy_lock:
            fn = getattr(self.policy, "predicted", None)
            return fn() if callable(fn) else self.model.norm

    # -- helpers -----------------------------------------------------------------------------
    def _pod_demand(self, pod: Pod) -> PodDemand | None:
        s = self.settings
        return pod_demand(pod, gpu_mem_resource=s.gpu_mem_resource, gpu_count_resource=s.gpu_count_resource,
                          default_model=s.defaults.model, default_batch_size=s.defaults.batch_size,
                          default_duration_s=s.defaults.duration_s)

    def _demand(self, pod: Pod) -> PodDemand | None:
        demand = self._pod_demand(pod)
        if demand is not None:
            with self._memo_lock:
                self._demands[demand.uid] = demand
                self._demands.move_to_end(demand.uid)
                while len(self._demands) > _DEMAND_CACHE:
                    self._demands.popitem(last=False)
        return demand

    def _gpus_of(self, pod: Pod) -> int | None:
        """GPUs a pending pod asks for (None: no GPU memory of ours); :class:`PendingPods` reads it."""
        demand = self._pod_demand(pod)
        return None if demand is None else demand.num_gpus

    def _request(self, demand: PodDemand, type_id: int, base: ViewBase, now: float) -> tuple[ClusterView, JobRequest]:
        """The policy's inputs for the pod: the view with it added, and its request, whose
        ``gpus_ahead`` counts the pending pods kube-scheduler tries before it and ``jobs_queued``
        the other pending pods (:class:`PendingPods`), as the simulator's kube queue counts them."""
        try:
            jobs = self.cache.current()[0].jobs  # the pods' Jobs name the view's job keys
        except StoreUnavailable:
            jobs = None  # (keys fall back to pod UIDs; the caller's own read of the copy decides)
        view, request = base.with_job(self._job_record(demand, now), type_id, now_s=now, jobs=jobs)
        nominated = [n.pod_uid for n in self.nominations.others(demand.uid)]
        ahead = self.pending.gpus_ahead(demand.uid, demand.priority, demand.created_s, demand.namespace, demand.name,
                                        exclude=nominated)
        queued = self.pending.others(demand.uid, exclude=nominated)
        return view, (replace(request, gpus_ahead=ahead, jobs_queued=queued) if ahead or queued else request)

    _job_of = staticmethod(job_of)

    def _resume_after_undo(self, record: UndoRecord) -> None:
        """Before an undo evicts ``record``'s pod: its Job's replacement pod is placed with the
        work the pod had left plus the checkpoint cost, as after a preemption (:meth:`_preempt`)."""
        try:
            _, base = self.cache.current()
        except StoreUnavailable:
            return  # the replacement is placed with its annotated duration
        h = base.handles.get(record.pod_uid)
        if h is not None:
            self._keep_work(base, h, record.namespace, record.name, self.clock())

    def _keeps_after_undo(self, record: UndoRecord) -> bool | None:
        """Whether the policy keeps ``record``'s pod on its GPU (:meth:`iadeep.policy.Policy.keeps`
        on the current view, the record's types in reservation order): False for a pod the view
        does not hold or a gang member (the view holds its pod, not its gang); ``None`` while the
        state store is unreachable (decided later)."""
        try:
            snap, base = self.cache.current()
        except StoreUnavailable:
            return None
        h = base.handles.get(record.pod_uid)
        job = snap.jobs.get(record.pod_uid)
        if h is None or (job is not None and job.gang):
            return False
        ids = tuple(self.types.resolve(t.model, t.batch_size) for t in record.types)
        with self._policy_lock:
            return self.policy.keeps(h, ids, base.cluster_view(now_s=self.clock()))

    def _keep_work(self, base: ViewBase, h: int, namespace: str, name: str, now: float) -> None:
        """Pod ``namespace/name`` (handle ``h`` of ``base``) is evicted: its Job's replacement pod
        resumes the work it had left at ``now`` (at rate 1, as the view counts it) plus the
        policy's checkpoint cost (what the simulator charges a preempted or undone job)."""
        left = max(float(base.job_work_left_s[h]) - (now - float(base.job_updated_s[h])), 0.0)
        self._resumed[self._job_of(namespace, name)] = left + float(getattr(self.policy, "checkpoint_cost_s", 0.0))

    def _job_record(self, demand: PodDemand, now: float) -> JobRecord:
        """The pod's job record; a Job's replacement pod after a preemption here resumes the work
        its evicted pod had left, plus the checkpoint cost (what the simulator charges)."""
        job = job_record(demand, now)
        left = self._resumed.get(self._job_of(demand.namespace, demand.name)) if self._resumed else None
        return job if left is None else msgspec.structs.replace(job, remaining_s=left)

    def _node_lock(self, node: str) -> threading.Lock:
        with self._node_locks_guard:
            lock = self._node_locks.get(node)
            if lock is None:
                lock = self._node_locks[node] = threading.Lock()
            return lock

    @staticmethod
    def _unresolvable(base: ViewBase, node: str, demand: PodDemand) -> str | None:
        """Why ``node`` can never take the pod (no inventory, too few or too small GPUs), else None."""
        gpus = base.gpus_of(node)
        if base.node_index(node) is None:
            return NO_INVENTORY
        if len(gpus) < demand.num_gpus:
            return f"pod needs {demand.num_gpus} GPU(s), the node has {len(gpus)}"
        big = int((base.gpu_mem_total_gib[gpus.start:gpus.stop] >= demand.mem_gib - 1e-9).sum())
        if big < demand.num_gpus:
            return f"pod needs {demand.mem_gib:g} GiB on each of {demand.num_gpus} GPU(s); {big} GPU(s) of the node are that large"
        return None

    def _too_wide(self, demand: PodDemand) -> str | None:
        """Why no node can take the pod because one store transaction cannot reserve that many
        GPUs (bind would fail the same way everywhere), else None."""
        limit = getattr(self.store, "max_reservation_gpus", None)
        if limit is not None and demand.num_gpus > limit:
            return (f"pod needs {demand.num_gpus} GPUs; one reservation is one etcd transaction and etcd's "
                    f"--max-txn-ops allows at most {limit} GPUs per pod (IADEEP_ETCD_MAX_TXN_OPS)")
        return None

    def _assess(self, demand: PodDemand, type_id: int, base: ViewBase, names: list[str],
                decide: bool = True) -> tuple[FilterResult, dict[str, int], Preemption | None]:
        """The policy's scheduling cycle for the pod on ``base`` (:mod:`iadeep.policy._base`): filter
        and score ``names``, then reserve and post-filter on the whole cluster, as the simulator
        calls them. Every node fails when the cycle waits (with its reason) or preempts (the
        :class:`Preemption` is returned; the victims must leave first); a placement where filter
        found no node (a job the bans lock out) passes its node. The scores are remembered
        for the pod's ``prioritize``; ``decide=False`` (``prioritize`` without remembered scores) runs
        filter and score only."""
        view, request = self._request(demand, type_id, base, self.clock())
        with self._policy_lock:
            result, scores = self.policy.assess(request, view, names)
            decision = self.policy.place(request, view) if decide else None
        preemption = None
        if isinstance(decision, Placement) and not result.feasible:
            # placed where filter finds no eligible GPU: a job the bans lock out (IADeep's reserve
            # step 0); its node passes, the others keep filter's reasons
            node = view.node_names[int(view.gpu_node[decision.gpus[0]])]
            if node in names:
                result = FilterResult({node: len(decision.gpus)}, {n: r for n, r in result.failed.items() if n != node})
        elif isinstance(decision, Wait):
            result = FilterResult({}, {**result.failed, **{name: decision.reason for name in result.feasible}})
        elif isinstance(decision, Preemption):
            preemption = decision
            result = FilterResult({}, {name: f"waiting for preempted job(s) to leave: {decision.reason}"
                                       for name in [*result.feasible, *result.failed]})
        with self._memo_lock:
            self._assessed[demand.uid] = (time.monotonic(), frozenset(names), scores)
            self._assessed.move_to_end(demand.uid)
            while len(self._assessed) > _ASSESSED:
                self._assessed.popitem(last=False)
        return result, scores, preemption

    # -- verbs -------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        """Which of the candidate nodes can take the pod (see :meth:`Policy.filter`)."""
        names = args.candidate_names()
        try:
            demand = self._demand(args.pod)
        except PodSpecError as exc:
            return ExtenderFilterResult.for_args(args, [], {}, {n: f"iadeep: {exc}" for n in names})
        if demand is None:  # not a GPU pod of ours: every node passes
            return ExtenderFilterResult.for_args(args, names, {})
        try:
            type_id = self.types.resolve(demand.model, demand.batch_size)
        except PodSpecError as exc:
            return ExtenderFilterResult.for_args(args, [], {}, {n: f"iadeep: {exc}" for n in names})
        too_wide = self._too_wide(demand)
        if too_wide is not None:  # filter and bind agree: no node could ever be bound
            self.metrics.filter_nodes.labels("unresolvable").inc(len(names))
            return ExtenderFilterResult.for_args(args, [], {}, {n: f"iadeep: {too_wide}" for n in names})
        self.await_releases()
        if demand.gang:  # a gang member: all or nothing (iadeep.extender._gang)
            return self._gang_filter(args, demand, type_id)
        self.await_binds(demand.uid)
        try:
            snap, base = self.cache.current()
        except StoreUnavailable as exc:
            return ExtenderFilterResult.failure(f"iadeep: {exc}")
        nominated = self.nominations.get(demand.uid)
        if nominated is not None and nominated.waiting(snap):  # its victims are leaving the GPUs held for it
            self.metrics.filter_nodes.labels("failed").inc(len(names))
            return ExtenderFilterResult.for_args(args, [], {n: f"iadeep: waiting for {len(nominated.victims)} preempted "
                                                            "pod(s) to leave the GPUs held for this pod" for n in names}, {})
        base = with_nominations(base, snap, self.nominations.others(demand.uid), self.types, now_s=self.clock())
        result, _, preemption = self._assess(demand, type_id, base, names)
        if preemption is not None:
            answer = self._preempt(args, demand, type_id, base, snap, preemption)
            nominated = self.nominations.get(demand.uid)
            # the victims usually leave within a second: then the pod passes in this very call (a pod
            # event that should wake it again can race with this scheduling cycle and be missed)
            snap = self._await_victims(nominated) if nominated is not None else None
            if snap is None:
                return answer
            base = with_nominations(self.cache.current()[1], snap, self.nominations.others(demand.uid), self.types,
                                    now_s=self.clock())
            result, _, preemption = self._assess(demand, type_id, base, names)
            if preemption is not None:
                return answer
        if result.feasible and self.settings.cache.bind_wait_s > 0:
            with self._bound:  # a node passed: kube-scheduler binds the pod next
                self._binding[demand.uid] = time.monotonic()
        passed, failed, unresolvable = [], {}, {}
        for n in names:
            if n in result.feasible:
                passed.append(n)
                continue
            never = self._unresolvable(base, n, demand)
            if never is not None:
                unresolvable[n] = f"iadeep: {never}"
            else:
                failed[n] = f"iadeep: {result.failed.get(n, 'not feasible')}"
        m = self.metrics.filter_nodes
        m.labels("passed").inc(len(passed))
        m.labels("failed").inc(len(failed))
        m.labels("unresolvable").inc(len(unresolvable))
        return ExtenderFilterResult.for_args(args, passed, failed, unresolvable)

    def _await_victims(self, nominated: Any) -> Any:
        """The snapshot once the nominated GPUs' victims have left (their reservations released),
        polled for at most ``preemption_wait_s``; ``None`` when they have not by then."""
        deadline = time.monotonic() + self.settings.preemption_wait_s
        while True:
            snap, _ = self.cache.current()
            if not nominated.waiting(snap):
                return snap
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _preempt(self, args: ExtenderArgs, demand: PodDemand, type_id: int, base: ViewBase, snap: Any,
                 decision: Preemption) -> ExtenderFilterResult:
        """Carry out the policy's preemption for the pod (:mod:`iadeep.extender._preempt`): evict
        the victims' pods, hold the GPUs for the pod; every node fails meanwhile (it passes once
        the victims have left). Without ``preemption``, or when a victim cannot be evicted (a
        nominated pod, no job record, a PodDisruptionBudget), the
        pod waits as the policy would have it wait otherwise."""
        names = args.candidate_names()
        victims = [base.pods[h] for h in decision.victims if 0 <= h < len(base.pods)]
        records = [snap.jobs.get(v) for v in victims]
        why = ""
        if not self.settings.preemption or self.pod_api is None:
            why = "preemption is off (IADEEP_EXTENDER_PREEMPTION)"
        elif len(victims) != len(decision.victims) or any(r is None or self.nominations.is_nominated(r.pod_uid)
                                                          for r in records):
            why = "a victim is not a running pod with a job record"
        else:
            try:
                for r in records:
                    assert r is not None
                    self.pod_api.evict(r.namespace, r.name, r.pod_uid)
            except KubeError as exc:
                why = f"eviction refused: {exc}"
        if why:
            return ExtenderFilterResult.for_args(args, [], {n: f"iadeep: waits (no preemption: {why})" for n in names}, {})
        now = self.clock()
        for h, r in zip(decision.victims, records):
            assert r is not None
            self._keep_work(base, h, r.namespace, r.name, now)
        gpus = [(base.node_names[int(base.gpu_node[g])], int(base.gpu_local_index[g])) for g in decision.gpus]
        self.nominations.add(demand.uid, self._job_record(demand, now), type_id, gpus, victims)
        msg = f"preempted {', '.join(f'{r.namespace}/{r.name}' for r in records if r)}: {decision.reason}"
        log.info("pod %s/%s %s", demand.namespace, demand.name, msg)
        if self.pod_api is not None:
            self.pod_api.event(demand.namespace, demand.name, demand.uid, "IadeepPreempted", msg)
        self.metrics.filter_nodes.labels("failed").inc(len(names))
        return ExtenderFilterResult.for_args(args, [], {n: f"iadeep: {msg}; waits for the GPUs held for it" for n in names}, {})

    def prioritize(self, args: ExtenderArgs) -> HostPriorityList:
        """Scores 0..10 of the candidate nodes (see :meth:`Policy.score`); 0 for nodes it cannot take.

        The scores are those computed by this pod's ``filter`` call when it judged these nodes in
        the last ``_ASSESSED_TTL_S`` seconds: like kube-scheduler, which filters and scores one
        scheduling cycle against one snapshot, filter and prioritize then agree even when other
        binds changed the state in between. Otherwise the current state is assessed.

        Raises:
            StoreUnavailable: the state is unknown (the route answers with an error status).
        """
        names = args.candidate_names()
        try:
            demand = self._demand(args.pod)
            type_id = None if demand is None else self.types.resolve(demand.model, demand.batch_size)
        except PodSpecError:
            demand, type_id = None, None
        if demand is None or type_id is None:
            return HostPriorityList(names, [0] * len(names))
        snap, base = self.cache.current()  # an unknown state fails prioritize, remembered scores or not
        base = with_nominations(base, snap, self.nominations.others(demand.uid), self.types, now_s=self.clock())
        with self._memo_lock:
            memo = self._assessed.get(demand.uid)
        if memo is not None and time.monotonic() - memo[0] <= _ASSESSED_TTL_S and memo[1].issuperset(names):
            scores = memo[2]
        else:
            _, scores, _ = self._assess(demand, type_id, base, names, decide=False)
        get = scores.get
        return HostPriorityList(names, [get(n, 0) for n in names])

