"""Abstract base of placement-and-tuning policies, in kube-scheduler's phases.

A scheduling cycle for one job calls the phases in this order (kube-scheduler's framework names,
``pkg/scheduler/framework/interface.go``); both drivers, the simulator and the extender, call them
through :meth:`Policy.place` (the cycle) and the extender's verbs:

1. **filter** (:meth:`Policy.filter`): feasibility only. Which nodes have enough GPUs that could
   take one worker of the job (:meth:`Policy.eligible`: co-location limit, memory, pairs measured
   not to fit, pairs the policy bans, shares, GPU models). It never decides to wait.
2. **score** (:meth:`Policy.score`): node priorities 0..10 from :meth:`Policy.utility` (the
   extender's ``prioritize``; the simulator needs none: reserve picks GPUs cluster-wide).
3. **reserve** (:meth:`Policy.reserve`): place or wait, a :class:`Placement` on GPUs or a
   :class:`Wait` (the extender's ``bind`` calls it on the chosen node's view).
4. **post-filter** (:meth:`Policy.post_filter`): only after a :class:`Wait`: preemption as its own
   typed result, a :class:`Preemption`, or the wait (default: the wait).

Then, for a GPU whose set of co-located jobs changed (after a placement or a completion was
applied), :meth:`Policy.tune`. It may run trials through the injected ``measure`` executor. The
driver applies the :class:`TuningDecision` when the session ends: the batch sizes, or an undo
(:func:`iadeep.policy.undo_rule`): :meth:`Policy.avoid` with ``decision.avoid``, then the jobs of
``decision.evict`` re-queued (the live system: the coordinator records it, the extender calls
:meth:`Policy.avoid` and evicts the pod).

**Gangs as pods.** A job of more GPUs than one node has runs as a gang of equal pods, each pod's
GPUs on one node, the pods on any nodes (:attr:`JobRequest.pod_gpus`; the split rule is
:func:`pod_size`'s), as the live system runs it (an Indexed Job of ``n_pods`` pods). Reserve then
chooses GPUs that split into such pods (:func:`choose_gpus` with ``pod_gpus``; the pod contract of
:attr:`Placement.gpus`), and waits when the GPUs its rule chose do not split so (the eligible GPUs
it reads are all of them: which of them can form pods is :func:`choose_gpus`'s question); with
``pod_gpus = 0`` any GPUs of the cluster serve (the simulator's ``gang_placement="any-gpus"``).
Filter answers for one pod (``pod_gpus`` GPUs on a node).

A subclass implements :meth:`utility` (and may override ``reserve``/``post_filter``/``tune``);
set ``name`` and ``colocation_limit``, and decorate it with :func:`iadeep.policy.register`.

A policy instance serves one cluster and may keep learned state (e.g. the online interference
learner); it is not thread-safe: drivers serialise calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from iadeep.interference import InterferenceModel
from iadeep.policy._rows import row_any
from iadeep.policy._types import (
    ClusterView,
    FilterResult,
    JobRequest,
    Measure,
    Placement,
    Preemption,
    TuningDecision,
    Wait,
    _frozen,
    capacity_masks,
)

__all__ = ["MAX_COLOCATION_LIMIT", "Policy", "REASONS", "choose_gpus", "pod_size"]

#: The most jobs the live services put on one GPU: the extender's ``colocation_limit`` setting is
#: at most this, so it is also the most jobs a node coordinator's tuning session holds (the tuner
#: refuses more). The registered policies' own limits are 1 and 2 (only pairs are measured); 4
#: leaves room for a configured limit while a session's search space stays small (at most
#: ``5 ** 4`` configurations over the Gavel measurements, five batch sizes a family).
MAX_COLOCATION_LIMIT = 4

#: Reason codes of :meth:`Policy.eligible`, index -> message.
REASONS = (
    "ok",
    "co-location limit reached",
    "not enough free GPU memory",
    "a co-located job is measured not to fit with it (out of memory)",
    "refused by the policy (this pair was measured to share badly)",
    "not enough free GPU share (gpu_milli)",
    "GPU model not among those the job accepts",
)
_OK, _LIMIT, _MEM, _PAIR, _POLICY, _SHARE, _MODEL = range(7)
#: eligibility is patched on at most this many GPUs changed since it was last computed for the same
#: job needs (one event changes a few); more, and it is computed afresh over all GPUs (measured on
#: the full trace's 416 GPUs: a patch costs some 1.5 us a GPU, the whole-cluster rule 40-60 us)
_PATCH_AT_MOST = 32
#: ... and on at most this many changes logged since (a longer log is not even deduplicated)
_PATCH_LOG_AT_MOST = 256


class Policy(ABC):
    """Base class of a placement-and-tuning policy.

    Args:
        model: the interference model (job-type ids, memory estimates, which pairs fit).
        colocation_limit: jobs allowed per GPU; defaults to the class's ``colocation_limit``.
    """

    name: ClassVar[str] = ""
    colocation_limit: ClassVar[int] = 1
    #: What the live node coordinator runs for a GPU whose co-location set changed
    #: (:attr:`iadeep.state.PlacementPolicy.session`): ``tune`` (batch-size tuning with the tuner)
    #: or ``profile`` (one measurement round at the jobs' current sizes, as :meth:`tune` of a
    #: policy that only profiles measures one trial).
    node_session: ClassVar[str] = "tune"

    def __init__(self, model: InterferenceModel, *, colocation_limit: int | None = None):
        self.model = model
        self.limit = int(colocation_limit or type(self).colocation_limit)
        # job-type pairs this policy measured to share badly and will not form again
        self.avoided = np.zeros_like(model.fits, dtype=bool)
        self._avoiding = [False] * len(self.avoided)  # per job type: avoided[t].any(), kept by avoid()
        self._avoid_version = 0  # bumped by avoid(): eligibility remembered on a view is keyed by it
        # eligibility key -> (the driver's OccupancyChanges.log, its version then, the reason codes):
        # patched on the GPUs changed since when the key is asked for again (eligible())
        self._kept_eligible: dict[tuple, tuple[list[int], int, np.ndarray]] = {}
        if self.limit < 1:
            raise ValueError(f"colocation_limit must be >= 1, got {self.limit}")

    # -- eligibility -------------------------------------------------------------------------
    def eligible(self, job: JobRequest, view: ClusterView) -> tuple[np.ndarray, np.ndarray]:
        """Which GPUs could take one worker of ``job``.

        Returns:
            ``(mask, reason)``: bool array ``(G,)`` and reason codes ``(G,)`` (see :data:`REASONS`),
            read-only: the answer is remembered on ``view`` for every job with the same needs
            (type, GPUs, memory, share, GPU models), as a scheduling pass asks for many such pods.
        """
        milli = job.gpu_milli
        key = ("eligible", id(self), self._avoid_version, job.type_id, job.num_gpus, job.mem_gib,
               None if milli != milli else milli, job.gpu_models)
        memo = view.memo
        found = memo.get(key)
        if found is None:
            mask, reason = self._eligible(job, view, key)
            found = memo[key] = (_frozen(mask), _frozen(reason))
        return found

    def _eligible(self, job: JobRequest, view: ClusterView, key: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
        memo = view.memo
        n_open = memo.get(("open GPUs", self.limit))  # GPUs below the co-location limit: every job's answer reads it
        if n_open is None:
            n_open = memo[("open GPUs", self.limit)] = int(np.count_nonzero(view.njobs < self.limit))
        if n_open < job.num_gpus:  # fast path: not enough open slots at all
            return np.zeros(view.n_gpus, dtype=bool), np.full(view.n_gpus, _LIMIT, dtype=np.int8)
        changes = view.occupancy_changes
        keep = changes is not None and bool(key) and job.gpu_milli != job.gpu_milli and not job.gpu_models
        if keep:  # a job without a share or GPU model asked for, on a driver that records changes
            kept = self._kept_eligible.get(key)
            if kept is not None and kept[0] is changes.log:  # the same driver's record
                since = changes.log[kept[1]:changes.version]
                if len(since) <= _PATCH_LOG_AT_MOST:
                    gpus = dict.fromkeys(since)  # each changed GPU once, in order
                    if len(gpus) <= _PATCH_AT_MOST:
                        reason = self._patch(job, view, kept[2], gpus)
                        self._kept_eligible[key] = (changes.log, changes.version, reason)
                        return reason == _OK, reason
        mask, reason = self._eligible_all(job, view)
        if keep:
            self._kept_eligible[key] = (changes.log, changes.version, reason)
        return mask, reason

    def _patch(self, job: JobRequest, view: ClusterView, reason: np.ndarray, gpus) -> np.ndarray:
        """:meth:`_eligible_all`'s reason codes from an earlier answer (``reason``) on the GPUs
        whose occupancy changed since (``gpus``, an iterable of GPU ids), for a job without a
        share or GPU model: the same rule, GPU by GPU on plain values (a handful of GPUs per
        event, where the whole-cluster form costs some 20 array operations). The codes'
        precedence is the array form's order of assignment: limit, memory, pair, policy."""
        t = job.type_id
        fits = self.model.fits[t].tolist()
        avoided = self.avoided[t].tolist() if self._avoiding[t] else None
        need = job.mem_gib - 1e-9
        limit = self.limit
        njobs, total, used = view.njobs.item, view.gpu_mem_total_gib.item, view.gpu_mem_used_gib.item
        occupied, slot_types = view.occupied, view.slot_types
        reason = reason.copy()
        for g in gpus:  # a few GPUs: plain values read one by one
            if njobs(g) >= limit:
                code = _LIMIT
            elif not total(g) - used(g) >= need:  # the same subtraction as the array form's
                code = _MEM
            else:
                code = _OK
                g_occ, g_types = occupied[g].tolist(), slot_types[g].tolist()
                for occ, u in zip(g_occ, g_types):
                    if occ and not fits[u]:
                        code = _PAIR
                        break
                if code == _OK and avoided is not None:
                    for occ, u in zip(g_occ, g_types):
                        if occ and avoided[u]:
                            code = _POLICY
                            break
            reason[g] = code
        return reason

    def _eligible_all(self, job: JobRequest, view: ClusterView) -> tuple[np.ndarray, np.ndarray]:
        """The eligibility rule over all GPUs (arrays ``(G,)``), past the fast path."""
        occupied = view.occupied
        occ_types = view.slot_types  # (G, S); meaningful where occupied
        t = job.type_id
        pair_bad = row_any(occupied & ~self.model.fits[t][occ_types])
        reason = np.zeros(view.n_gpus, dtype=np.int8)  # _OK
        if self._avoiding[t]:
            reason[row_any(occupied & self.avoided[t][occ_types])] = _POLICY
        reason[pair_bad] = _PAIR
        reason[~(view.gpu_mem_total_gib - view.gpu_mem_used_gib >= job.mem_gib - 1e-9)] = _MEM
        share_ok, model_ok = capacity_masks(job, view)
        if share_ok is not None:
            reason[~share_ok] = _SHARE
        if model_ok is not None:
            reason[~model_ok] = _MODEL
        reason[view.njobs >= self.limit] = _LIMIT
        return reason == _OK, reason

    def avoid(self, type_ids: list[int]) -> None:
        """Never again co-locate these job types with each other (both directions); a measured
        bad packing is remembered so that the policy does not form and undo it over and over."""
        self._avoid_version += 1
        self._kept_eligible.clear()  # keyed by the old version: never asked for again
        for i, a in enumerate(type_ids):
            for j, b in enumerate(type_ids):
                if i != j:
                    self.avoided[a, b] = True
        self._avoiding = self.avoided.any(axis=1).tolist()

    def keeps(self, evict: int, avoid: tuple[int, ...], view: ClusterView) -> bool:
        """Whether the newest job of an undone co-location (handle ``evict`` of ``view``; ``avoid``
        the undo's job types in placement order, its own last) stays on its GPU: the ban is
        applied either way, the eviction only when this is False. Both drivers ask it when they
        carry an undo out (the simulator at the session's end, the extender before it evicts),
        after the ban. Here: never."""
        return False

    @abstractmethod
    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """Preference for each GPU in [0, 1] (higher is better), shape ``(G,)``; only ``mask`` GPUs matter."""

    # -- extender-style entry points -----------------------------------------------------------
    def filter(self, job: JobRequest, view: ClusterView, nodes: list[str] | None = None) -> FilterResult:
        """The filter phase: nodes that can take one pod of ``job`` (``job.pod_gpus`` eligible
        GPUs on that node, or ``job.num_gpus`` without a pod rule); feasibility only, whether the job should wait is :meth:`reserve`'s.

        Args:
            nodes: restrict to these node names (unknown names fail with a reason).
        """
        mask, reason = self.eligible(job, view)
        return self._filter(job, view, nodes, mask, reason)

    def score(self, job: JobRequest, view: ClusterView, feasible: Mapping[str, int]) -> dict[str, int]:
        """Node priorities 0..10 (kube-scheduler extender scale): best GPU utility on the node x 10
        (rounded half to even), one point less for a node whose best GPU is below the best node's
        but rounds to the same score; 0 for nodes with no feasible GPU.

        The point less: kube-scheduler picks at random among the nodes of the highest score, and
        the extender's bind then takes the best GPU of the node picked; without it a pod went to a
        GPU the policy ranks lower (e.g. a partner predicted 0.84 instead of 0.86: both score 9),
        where :meth:`place` (the simulator) takes the best GPU of the cluster."""
        mask, _ = self.eligible(job, view)
        return self._score(job, view, feasible, mask)

    def assess(self, job: JobRequest, view: ClusterView, nodes: list[str] | None = None) -> tuple[FilterResult, dict[str, int]]:
        """:meth:`filter` and :meth:`score` of its feasible nodes in one pass (one eligibility
        computation); what the extender answers ``filter`` and then ``prioritize`` with."""
        mask, reason = self.eligible(job, view)
        result = self._filter(job, view, nodes, mask, reason)
        return result, self._score(job, view, result.feasible, mask)

    def _filter(self, job: JobRequest, view: ClusterView, nodes: list[str] | None, mask: np.ndarray,
                reason: np.ndarray) -> FilterResult:
        n_nodes = len(view.node_names)
        node = view.gpu_node
        ok = np.bincount(node[mask], minlength=n_nodes).tolist()
        index = view.node_positions()
        need = job.pod_gpus or job.num_gpus
        feasible: dict[str, int] = {}
        rejected: list[tuple[str, int | None]] = []
        for name in nodes if nodes is not None else view.node_names:
            k = index.get(name)
            if k is not None and ok[k] >= need:
                feasible[name] = ok[k]
            else:
                rejected.append((name, k))
        failed: dict[str, str] = {}
        if rejected:
            gpus_on = np.bincount(node, minlength=n_nodes)
            # most common reason among each node's ineligible GPUs: counts of shape (n_nodes, len(REASONS))
            codes = np.bincount(node[~mask] * len(REASONS) + reason[~mask], minlength=n_nodes * len(REASONS))
            common = codes.reshape(n_nodes, len(REASONS)).argmax(axis=1)
            for name, k in rejected:
                if k is None:
                    failed[name] = "node has no GPU inventory published by the iadeep device plugin"
                elif gpus_on[k] == 0:
                    failed[name] = "node has no GPUs"
                else:
                    failed[name] = f"needs {need} GPU(s), {ok[k]} eligible; {REASONS[common[k]]}"
        return FilterResult(feasible, failed)

    def _score(self, job: JobRequest, view: ClusterView, feasible: Mapping[str, int],
               mask: np.ndarray) -> dict[str, int]:
        if not feasible:
            return {}
        util = np.clip(self.utility(job, view, mask), 0.0, 1.0)
        best = np.zeros(len(view.node_names))
        np.maximum.at(best, view.gpu_node[mask], util[mask])
        points = np.rint(10 * best).astype(np.int64)
        index = view.node_positions()
        ks = [index[name] for name, count in feasible.items() if count and name in index]
        if ks:
            top = best[ks].max()
            second = (points == points[ks].max()) & (best < top - 1e-9)
            points[ks] = np.maximum(points[ks] - second[ks], 0)
        pts = points.tolist()
        return {name: pts[index[name]] if count and name in index else 0 for name, count in feasible.items()}

    # -- reserve and post-filter ---------------------------------------------------------------
    def place(self, job: JobRequest, view: ClusterView) -> Placement | Preemption | Wait:
        """The scheduling cycle: :meth:`reserve`, then :meth:`post_filter` when it waits."""
        decision = self.reserve(job, view)
        return self.post_filter(job, view, decision) if isinstance(decision, Wait) else decision

    def reserve(self, job: JobRequest, view: ClusterView) -> Placement | Wait:
        """The reserve phase: choose GPUs for ``job`` now, or say why it must wait."""
        return self._place(job, view, *self.eligible(job, view))

    def post_filter(self, job: JobRequest, view: ClusterView, wait: Wait) -> Preemption | Wait:
        """The post-filter phase, after :meth:`reserve` answered ``wait``: a :class:`Preemption`
        that lets the job start, or the wait (default: the wait; no preemption)."""
        return wait

    def _place(self, job: JobRequest, view: ClusterView, mask: np.ndarray, reason: np.ndarray) -> Placement | Wait:
        """:meth:`reserve` given :meth:`eligible`'s answer (subclasses override this one)."""
        if np.count_nonzero(mask) < job.num_gpus:
            return Wait(job.job_id, _wait_reason(job, mask, reason))
        util = self.utility(job, view, mask)
        gpus = choose_gpus(job.num_gpus, mask, util, view, pod_gpus=job.pod_gpus)
        if gpus is None:
            return Wait(job.job_id, pod_wait_reason(job))
        return Placement(job.job_id, gpus, f"{self.name}: best utility {util[list(gpus)].min():.2f}")

    def tune(self, gpu: int, view: ClusterView, measure: Measure) -> TuningDecision | None:
        """React to a change of the co-location set on ``gpu``; default: keep every job as submitted.

        Returns ``None`` when nothing changes.
        """
        job_type, base_type = view.job_type.item, view.job_base_type.item
        changed = {h: base_type(h) for h in view.occupants(gpu).tolist() if job_type(h) != base_type(h)}
        return TuningDecision(gpu, changed, reason="restore submitted batch sizes") if changed else None


def _wait_reason(job: JobRequest, mask: np.ndarray, reason: np.ndarray) -> str:
    """The reason of a wait for too few eligible GPUs: the most common reason code of the
    ineligible GPUs (the lowest code on ties). ``mask, reason``: :meth:`Policy.eligible`'s answer,
    where ``mask`` is ``reason == _OK``."""
    # one count of every code (measured: 5 array operations before); the ineligible GPUs' codes are
    # the non-zero ones, so the first maximum past code 0 is bincount(reason[~mask]).argmax()
    counts = np.bincount(reason, minlength=1).tolist()
    rest = counts[1:]
    common = REASONS[1 + rest.index(max(rest))] if any(rest) else "no GPUs"
    return f"needs {job.num_gpus} GPU(s), {counts[_OK]} eligible: {common}"


def pod_size(num_gpus: int, node_gpus: Sequence[int]) -> int:
    """GPUs per pod of a job of ``num_gpus`` GPUs on nodes of ``node_gpus`` GPUs: the rule by
    which a trace job becomes a gang of equal pods, in both drivers.

    The largest ``p`` that divides ``num_gpus``, is at most the largest node's GPU count, and
    lets the nodes, empty, hold the ``num_gpus // p`` pods of ``p`` GPUs (each node
    ``node_gpus[i] // p`` of them). A job that fits one node is one pod (``p = num_gpus``).
    Equal pods because distributed data parallelism launches the same number of processes on
    every node (torchrun's ``--nproc-per-node``); the largest such size keeps the gang on as
    few nodes as possible. Examples on 4-GPU nodes: 16 GPUs -> 4 pods of 4; 6 -> 2 pods of 3;
    8 -> 2 of 4; 5 -> 5 of 1 (5 is prime). Decision record:
    ``docs/design/2026-12-03-gangs-as-pods.md``.

    Args:
        num_gpus: GPUs of the job (>= 1).
        node_gpus: GPUs of each node the job may run on (those of a GPU model it accepts).

    Returns:
        GPUs per pod, a divisor of ``num_gpus``.

    Raises:
        ValueError: ``num_gpus < 1``, or the nodes have fewer than ``num_gpus`` GPUs in all.
    """
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    sizes = [int(n) for n in node_gpus]
    for p in range(min(num_gpus, max(sizes, default=0)), 0, -1):
        if num_gpus % p == 0 and sum(n // p for n in sizes) >= num_gpus // p:
            return p
    raise ValueError(f"a job of {num_gpus} GPUs does not fit nodes of {sum(sizes)} GPUs in all")


def pod_wait_reason(job: JobRequest) -> str:
    """The reason of a wait when enough GPUs are eligible but not as pods on single nodes."""
    return (f"needs {job.n_pods} pod(s) of {job.pod_gpus} GPU(s), each on one node: "
            f"the eligible GPUs do not split so")


def choose_gpus(k: int, mask: np.ndarray, util: np.ndarray, view: ClusterView, *,
                pod_gpus: int = 0) -> tuple[int, ...] | None:
    """Pick ``k`` eligible GPUs (``mask``, shape ``(G,)``) by utility (``util``, shape ``(G,)``).

    Without a pod rule (``pod_gpus = 0``), keeping a gang on as few nodes as possible. One GPU:
    the best utility (lowest id on ties). Several: the node whose ``k`` best eligible GPUs have
    the highest total utility, ties to the node with the fewest eligible GPUs (best fit, limits
    fragmentation); when no node has ``k``, whole nodes in order of eligible count.

    With pods of ``p = pod_gpus`` GPUs: ``k // p`` pods, each ``p`` GPUs of one node. Each node's
    eligible GPUs, best utility first (lowest id on ties), make ``count // p`` candidate pods
    (its best ``p``, its next ``p``, ...); the pods taken are those of the highest total utility,
    ties to the node with the fewest eligible GPUs (best fit), then the lower node index, then
    the node's earlier pod. A single pod (``p = k``) is then the same one-node choice as without
    pods, never the spread over whole nodes.
    The result follows :attr:`Placement.gpus`' pod contract.

    Returns:
        GPU ids; ``None`` only with pods, when the eligible GPUs do not make ``k // p`` pods.

    Raises:
        ValueError: fewer than ``k`` eligible GPUs, or ``pod_gpus`` not 0 nor a divisor of ``k``.
    """
    cand = mask.nonzero()[0]
    if len(cand) < k:
        raise ValueError(f"need {k} GPUs, {len(cand)} eligible")
    if pod_gpus:
        if pod_gpus < 0 or k % pod_gpus:
            raise ValueError(f"pod_gpus must be 0 or divide k = {k}, got {pod_gpus}")
        if pod_gpus == 1:  # one-GPU pods fit any GPU: the best k (utility descending, then id)
            return tuple(int(g) for g in cand[np.lexsort((cand, -util[cand]))][:k])
        return _choose_pods(k, pod_gpus, cand, util, view)
    if k == 1:  # the same pick as the sort below (first maximum = lowest id), without sorting G GPUs
        return (int(np.where(mask, util, -np.inf).argmax()),)
    # stable sort: utility descending, then GPU id ascending
    order = cand[np.lexsort((cand, -util[cand]))]
    if k == 1:
        return (int(order[0]),)
    nodes = view.gpu_node[order]
    best: tuple[float, int, np.ndarray] | None = None
    for node in np.unique(nodes):
        on = order[nodes == node]
        if len(on) >= k:
            key = (float(util[on[:k]].sum()), -len(on))
            if best is None or key > best[:2]:
                best = (key[0], key[1], on[:k])
    if best is not None:
        return tuple(int(g) for g in best[2])
    counts = np.bincount(nodes)
    picked: list[int] = []
    for node in np.argsort(-counts, kind="stable"):
        picked.extend(int(g) for g in order[nodes == node])
        if len(picked) >= k:
            break
    return tuple(picked[:k])


def _choose_pods(k: int, p: int, cand: np.ndarray, util: np.ndarray, view: ClusterView) -> tuple[int, ...] | None:
    """:func:`choose_gpus` with pods of ``p > 1`` GPUs over the eligible GPU ids ``cand``."""
    order = cand[np.lexsort((cand, -util[cand]))]  # utility descending, then GPU id ascending
    nodes = view.gpu_node[order]
    counts = np.bincount(nodes)
    pods: list[tuple[float, int, int, int, np.ndarray]] = []
    for node in (counts >= p).nonzero()[0].tolist():
        on = order[nodes == node]
        count = len(on)
        for c in range(count // p):
            chunk = on[c * p:(c + 1) * p]
            pods.append((-float(util[chunk].sum()), count, node, c, chunk))
    n = k // p
    if len(pods) < n:
        return None
    pods.sort(key=lambda pod: pod[:4])
    return tuple(int(g) for pod in pods[:n] for g in pod[4].tolist())
