"""The extender's verbs over decoded messages: decode -> policy core -> encode.

:class:`ExtenderService` owns the policy instance (not thread-safe: calls are serialised by a
lock), the :class:`~iadeep.extender._cache.StateCache` and the injected :class:`PodApi`. It makes
no placement decision itself: ``filter`` and ``prioritize`` answer with :meth:`Policy.assess`
(:meth:`Policy.filter` and :meth:`Policy.score` in one pass) and ``bind`` applies
:meth:`Policy.place` on a view restricted to the node kube-scheduler picked. Every failure ends
up in the wire format's ``Error`` field. The node coordinators' undo records are carried out by
:class:`~iadeep.extender._undo.UndoApplier` (the ban in this policy, the pod's eviction).
"""

from __future__ import annotations

import gc
import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from iadeep.extender._bind import (
    BindFailed,
    KubeError,
    PodApi,
    bind_annotations,
    bind_with_annotations,
    call_deadline,
    release_reservation,
    time_left,
)
from iadeep.extender._admission import AdmissionBusy, AdmissionGate, AdmissionTurn
from iadeep.extender._cache import StateCache
from iadeep.extender._metrics import ExtenderMetrics
from iadeep.extender._nodestate import NodeStatePublisher, reservations_annotation
from iadeep.extender._podwatch import PendingPods, PodFollower
from iadeep.extender._preempt import Nominations, with_nominations
from iadeep.extender._pods import (
    ANNOTATION_BIND_PHASE,
    BIND_PHASE_ALLOCATING,
    PodDemand,
    PodSpecError,
    job_of,
    load_quantity_parser,
    pod_demand,
)
from iadeep.extender._settings import ExtenderSettings
from iadeep.extender._undo import UndoApplier
from iadeep.extender._view import TypeResolver, ViewBase
from iadeep.extender._wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriorityList,
    Pod,
)
from iadeep.interference import InterferenceModel, InterferenceSample
from iadeep.policy import POLICIES, ClusterView, FilterResult, JobRequest, Placement, Preemption, Wait, make_policy
from iadeep.state import (
    AllocationConflict,
    Assignment,
    InterferenceSampleRecord,
    JobRecord,
    NodeRecords,
    PlacementPolicy,
    RecordError,
    StateStore,
    StoreUnavailable,
    UndoRecord,
)

__all__ = ["ExtenderService"]

log = logging.getLogger("iadeep.extender")

_NO_INVENTORY = "node has no GPU inventory published by the iadeep device plugin"
_DEMAND_CACHE = 10_000
_ASSESSED = 8  # pods whose filter scores are kept for their prioritize (it follows at once)
_ASSESSED_TTL_S = 10.0
_CALLS_SHARE = 0.8  # of call_budget_s, for a bind's etcd and Kubernetes API calls together


class ExtenderService:
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
                                 on_settled=lambda outcome: self.metrics.undos.labels(outcome).inc())
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
        # pods bound to a node with a device plugin that has not served them yet: binds there
        # take turns (iadeep.extender._admission); fed by the pod follower
        self.admissions = AdmissionGate(self._still_allocating if pod_api is not None else None)
        self._placement_published = False

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
        gc.collect()
        gc.freeze()
        if self.node_state is not None:
            self.node_state.start()
        self.cache.start()
        self.undos.start()
        if self.settings.cache.pod_watch and self.pod_api is not None:
            self.pod_follower = PodFollower(self.pod_api, self.release_pods,  # type: ignore[arg-type]
                                            timeout_s=self.settings.cache.pod_watch_timeout_s, pending=self.pending,
                                            admissions=self.admissions)
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
        if self.node_state is not None:
            self.node_state.stop()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
            self._sweeper = None

    def _publish_placement(self) -> bool:
        """Publish the policy and its co-location limit (:class:`~iadeep.state.PlacementPolicy`): the
        device plugins advertise that many ``gpu-count`` slots per GPU, so the kubelet admits as
        many pods per GPU as this extender places there. False when the store did not answer."""
        if self._placement_published:
            return True
        try:
            self.store.put_placement(PlacementPolicy(self.policy.name, self.policy.limit, self.clock(),
                                                     undo_below=float(getattr(self.policy, "undo_below", None) or 0.0)))
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
                samples.append(InterferenceSample(a, b, float(r.normalised_throughput)))
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

    def _keep_work(self, base: ViewBase, h: int, namespace: str, name: str, now: float) -> None:
        """Pod ``namespace/name`` (handle ``h`` of ``base``) is evicted: its Job's replacement pod
        resumes the work it had left at ``now`` (at rate 1, as the view counts it) plus the
        policy's checkpoint cost (what the simulator charges a preempted or undone job)."""
        left = max(float(base.job_work_left_s[h]) - (now - float(base.job_updated_s[h])), 0.0)
        self._resumed[self._job_of(namespace, name)] = left + float(getattr(self.policy, "checkpoint_cost_s", 0.0))

    def _job_record(self, demand: PodDemand, now: float) -> JobRecord:
        """The pod's job record; a Job's replacement pod after a preemption here resumes the work
        its evicted pod had left, plus the checkpoint cost (what the simulator charges)."""
        job = demand.job_record(now)
        left = self._resumed.get(self._job_of(demand.namespace, demand.name)) if self._resumed else None
        return job if left is None else replace(job, remaining_s=left)

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
            return _NO_INVENTORY
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
        :class:`Preemption` is returned; the victims must leave first). The scores are remembered
        for the pod's ``prioritize``; ``decide=False`` (``prioritize`` without remembered scores) runs
        filter and score only."""
        view, request = self._request(demand, type_id, base, self.clock())
        with self._policy_lock:
            result, scores = self.policy.assess(request, view, names)
            decision = self.policy.place(request, view) if decide else None
        preemption = None
        if isinstance(decision, Wait):
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
            return self._bind_result("released", str(exc))
        if turn is not None:
            turn.bound(uid, ns, name)
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

    @property
    def releases_in_flight(self) -> int:
        """Releases of ended pods being made now."""
        return self._releasing

    def await_releases(self) -> None:
        """Wait until no release of an ended pod is in flight (bounded by ``release_wait_s``)."""
        if not self._releasing:
            return
        deadline = time.monotonic() + self.settings.cache.release_wait_s
        with self._released:
            while self._releasing and (left := deadline - time.monotonic()) > 0:
                self._released.wait(left)

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
                return _NO_INVENTORY
            uuids = {int(nb.gpu_local_index[g]): nb.gpu_uuid[g] for g in range(nb.n_gpus)}
            if existing:  # a retried bind of a pod already reserved here: reuse the reservation
                return existing, "reservation already held", uuids, existing[0].assumed_at
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

    # -- upkeep ------------------------------------------------------------------------------
    def sweep(self) -> list[str]:
        """Release reservations of pods that are gone, finished, bound elsewhere, or left unbound
        longer than ``sweep_grace_s``; returns the released pod UIDs.

        Raises:
            KubeError, StoreUnavailable: the pods or the reservations could not be listed.
        """
        if self.pod_api is None:
            return []
        assignments = self.store.assignments()
        pods = {p.uid: p for p in self.pod_api.pods()}
        now = self.clock()
        grace = self.settings.cache.sweep_grace_s
        stale: set[str] = set()
        for a in assignments:
            p = pods.get(a.pod_uid)
            if p is None or p.phase in ("Succeeded", "Failed") or (p.node and p.node != a.node) \
                    or (not p.node and now - a.assumed_at > grace):
                stale.add(a.pod_uid)
        with self._memo_lock:
            stale |= self._pending_release
        released = self.release_pods(sorted(stale), why="sweep", attempts=1)
        if released:
            log.info("sweep released %d stale reservation(s): %s", len(released), ", ".join(released[:10]))
        return released

    def release_pods(self, uids: Sequence[str], *, why: str = "pod ended", attempts: int = 3) -> list[str]:
        """Release the reservations of ``uids`` (the one release path: the pod follower calls it
        for pods that ended, the sweep for stale reservations). Idempotent; a release the store
        refuses (unreachable) is queued for the next sweep. Returns the UIDs released.

        The pod follower's UIDs are filtered to pods with a job record in the followed copy (pods
        never reserved through iadeep need no release) unless queued for release already. While a
        release is in flight, ``filter`` waits for it (at most ``CacheSettings.release_wait_s``):
        kube-scheduler retries the pods that did not fit on the very event that ended the pod,
        and would otherwise be told the memory is still taken.
        """
        if why == "sweep":  # stale reservations: nobody is being retried on their account
            return self._release_pods(uids, why=why, attempts=attempts)
        with self._released:
            self._releasing += 1
        try:
            return self._release_pods(uids, why=why, attempts=attempts)
        finally:
            with self._released:
                self._releasing -= 1
                self._released.notify_all()

    def _release_pods(self, uids: Sequence[str], *, why: str, attempts: int) -> list[str]:
        released = []
        now = self.clock()
        if why != "sweep":
            try:
                jobs = self.cache.current()[0].jobs
            except StoreUnavailable:
                jobs = None  # unknown: try them all
            with self._memo_lock:
                queued = set(self._pending_release)
            uids = [u for u in uids if jobs is None or u in jobs or u in queued]
        for uid in uids:
            if release_reservation(self.store, uid, now_s=now, attempts=attempts):
                released.append(uid)
                self.cache.forget(uid)
                with self._memo_lock:
                    self._pending_release.discard(uid)
            else:
                with self._memo_lock:
                    self._pending_release.add(uid)
        if released:
            self.metrics.releases.labels(why).inc(len(released))
        return released

    def _sweep_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.sweep()
            except (KubeError, StoreUnavailable) as exc:
                log.warning("sweep failed: %s", exc)
            except Exception:  # noqa: BLE001 - keep sweeping
                log.exception("sweep failed")

    # -- inspection --------------------------------------------------------------------------
    def inspect(self, node: str | None = None) -> dict[str, Any]:
        """Per node, per GPU: memory, the pods on it and their predicted normalised throughput.

        Raises:
            StoreUnavailable: no usable snapshot.
        """
        snap, base = self.cache.current()
        pred = self.predicted()
        nodes: dict[str, list[dict[str, Any]]] = {}
        for name in ([node] if node is not None else base.node_names):
            gpus = base.gpus_of(name)
            if base.node_index(name) is None:
                continue
            rows = []
            for g in gpus:
                handles = [int(h) for h in base.slots[g] if h >= 0]
                types = [int(base.job_type[h]) for h in handles]
                jobs = []
                for k, h in enumerate(handles):
                    uid = base.pods[h]
                    rec = snap.jobs.get(uid)
                    others = types[:k] + types[k + 1:]
                    throughput = float(np.prod([pred[types[k], t] for t in others])) if others else 1.0
                    jobs.append({
                        "pod_uid": uid,
                        "pod": f"{rec.namespace}/{rec.name}" if rec else uid,
                        "model": rec.model if rec else None,
                        "batch_size": rec.batch_size if rec else None,
                        "mem_gib": rec.mem_gib if rec else None,
                        "predicted_normalised_throughput": round(throughput, 4),
                    })
                total, used = float(base.gpu_mem_total_gib[g]), float(base.gpu_mem_used_gib[g])
                rows.append({"index": int(base.gpu_local_index[g]), "uuid": base.gpu_uuid[g], "mem_total_gib": total,
                             "mem_used_gib": round(used, 6), "mem_free_gib": round(total - used, 6), "jobs": jobs})
            nodes[name] = rows
        return {
            "policy": self.policy.name,
            "colocation_limit": self.policy.limit,
            "samples_learned": self.samples_learned,
            "snapshot_age_s": self.cache.age_s(),
            "nodes": nodes,
        }

    def _metrics_rows(self) -> dict[str, Any]:
        try:
            doc = self.inspect()
        except StoreUnavailable:
            return {"store_ok": False, "snapshot_age_s": self.cache.age_s()}
        for gpus in doc["nodes"].values():
            for g in gpus:
                for j in g["jobs"]:
                    j["mem_gib"] = j["mem_gib"] or 0.0
        doc["store_ok"] = self.cache.last_error is None
        return doc
