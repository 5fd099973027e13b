"""Typed inputs and decisions of the policy core.

A driver (the simulator, the scheduler extender, the node coordinator) builds a :class:`ClusterView`
and a :class:`JobRequest`, calls a policy, and applies the frozen decision it gets back. Policies
never write to the view and never perform I/O.

Notations:
    G: number of GPUs in the cluster (global GPU ids ``0..G-1``).
    S: co-location slots per GPU (the largest co-location limit the driver supports).
    J: number of job handles the driver knows (a handle is a row index into the job arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property

import numpy as np

from iadeep.policy._rows import row_count, row_max

__all__ = [
    "ClusterView",
    "OccupancyChanges",
    "JobRequest",
    "Placement",
    "Preemption",
    "Wait",
    "ANY_BEHIND",
    "FilterResult",
    "TuningDecision",
    "Measure",
    "capacity_masks",
    "fits_when_empty",
]


@dataclass(frozen=True, eq=False)
class ClusterView:
    """Read-only view of cluster state, valid for the duration of one policy call.

    Attributes:
        now_s: driver clock (seconds).
        node_names: shape ``(n_nodes,)``.
        gpu_node: node index of each GPU, shape ``(G,)``.
        gpu_local_index: index of each GPU on its node, shape ``(G,)``.
        gpu_mem_total_gib: memory of each GPU (GiB), shape ``(G,)``.
        gpu_mem_used_gib: memory reserved by the jobs on each GPU (GiB), shape ``(G,)``.
        slots: job handle in each co-location slot of each GPU, ``-1`` when empty, shape ``(G, S)``.
            **Slot contract**: a GPU's occupied slots come first, in placement order (slot 0 holds
            the job placed on that GPU earliest, the last occupied slot the newest), and its empty
            slots follow. Drivers keep it: the simulator shifts a GPU's remaining jobs down when
            one leaves, the extender lists a GPU's pods in reservation order. Policies rely on it
            to read a GPU's occupant (slot 0 of a GPU holding one job) and its newest job (the
            last occupied slot). A view that breaks it raises ``ValueError`` at construction
            (a survivor left in slot 1 would otherwise be read as handle ``-1``, which numpy
            indexes as the last job).
        job_type: current job-type id of each handle (interference-model ids), shape ``(J,)``.
        job_base_type: job-type id the job was submitted with, shape ``(J,)``.
        job_num_gpus: GPUs each job holds or asks for, shape ``(J,)``.
        job_work_left_s: remaining work of each job in seconds *at dedicated speed*, as of
            ``job_updated_s``, shape ``(J,)`` (the simulator knows it from the trace; the live
            services estimate it from reported progress). Use :meth:`remaining_s` for ``now_s``.
        job_updated_s: when ``job_work_left_s`` was last brought up to date, shape ``(J,)``.
        job_rate: current progress rate of each running job (1.0 = dedicated speed; 0 when not
            running), shape ``(J,)``.
        gpu_share_used_milli: GPU shares held on each GPU, in 1/1000 GPU, shape ``(G,)``; jobs
            with a share (:attr:`JobRequest.gpu_milli`) fit where it stays <= 1000. ``None``
            (default): the driver does not account shares.
        gpu_model: GPU model name of each GPU (e.g. ``"V100M32"``, ``""`` = unnamed), shape
            ``(G,)``; ``None`` (default): unknown (every model constraint then fails).
        job_gpu_milli: the GPU share each job holds on each of its GPUs, in 1/1000 GPU (its
            :attr:`JobRequest.gpu_milli`; NaN: a whole-GPU job without a share), shape ``(J,)``.
            Jobs that all hold shares do not slow each other down (the simulator's rule for
            shares: :mod:`iadeep.sim`). ``None`` (default): the driver does not account shares.
        node_pos: node name -> position in ``node_names``; optional (built on first use by
            :meth:`node_positions` when a driver does not hand over one it keeps anyway).
        job_keys: each handle's job identity across views, indexable by handle (:meth:`job_key`);
            ``None`` (default): the handle itself, for a driver whose handles are stable.
    """

    now_s: float
    node_names: tuple[str, ...]
    gpu_node: np.ndarray
    gpu_local_index: np.ndarray
    gpu_mem_total_gib: np.ndarray
    gpu_mem_used_gib: np.ndarray
    slots: np.ndarray
    job_type: np.ndarray
    job_base_type: np.ndarray
    job_num_gpus: np.ndarray
    job_work_left_s: np.ndarray
    job_updated_s: np.ndarray
    job_rate: np.ndarray
    gpu_share_used_milli: np.ndarray | None = None
    gpu_model: np.ndarray | None = None
    job_gpu_milli: np.ndarray | None = None
    node_pos: Mapping[str, int] | None = field(default=None, compare=False, repr=False)
    job_keys: Sequence[Hashable] | None = field(default=None, compare=False, repr=False)
    #: a driver's record of which GPUs' occupancy changed when (:class:`OccupancyChanges`), set by
    #: :meth:`with_occupancy`; ``None`` (default): unknown, every answer is computed afresh
    occupancy_changes = None  # not annotated: not a field (nor a ClassVar in __dataclass_fields__)

    def job_key(self, handle: int) -> Hashable:
        """A job's identity across views, for what a policy remembers about a job between calls
        (e.g. how often it was preempted). The simulator's handles are its jobs' indices, stable
        for the whole run, so the handle itself (``job_keys`` unset); the extender renumbers its
        handles when it rebuilds its view and a Job's replacement pod is a new pod, so it gives
        ``(namespace, Job name)`` (:mod:`iadeep.extender._view`)."""
        return handle if self.job_keys is None else self.job_keys[handle]

    def __post_init__(self) -> None:
        slots = self.slots
        if slots.ndim != 2 or slots.shape[0] != self.gpu_node.shape[0]:
            raise ValueError(f"slots must have shape (G, S) with G = {self.gpu_node.shape[0]}, got {slots.shape}")
        if slots.shape[1] > 1:
            occupied = slots >= 0
            gap = occupied[:, 1:] & ~occupied[:, :-1]  # (G, S-1): slot s occupied, s-1 empty
            self.__dict__["occupied"] = _frozen(occupied)  # computed here anyway: the cached property's value
            if gap.any():
                g, s = (int(x) + d for x, d in zip(np.argwhere(gap)[0], (0, 1)))
                raise ValueError(f"slot contract broken on GPU {g}: slot {s} is occupied but slot {s - 1} is empty "
                                 f"(occupied slots must come first, in placement order)")

    def occupants(self, gpu: int) -> np.ndarray:
        """Handles of the jobs on ``gpu`` in placement order (oldest first), shape ``(n,)``."""
        return self.slots[gpu, :self.njobs.item(gpu)].copy()  # occupied slots come first (slot contract)

    def node_positions(self) -> Mapping[str, int]:
        """Node name -> position in :attr:`node_names` (built once per view)."""
        if self.node_pos is None:
            object.__setattr__(self, "node_pos", {n: k for k, n in enumerate(self.node_names)})
        assert self.node_pos is not None
        return self.node_pos

    @property
    def n_gpus(self) -> int:
        """Number of GPUs ``G``."""
        return int(self.gpu_node.shape[0])

    # Derived per-GPU arrays, computed once per view (a view is immutable: drivers build a new one
    # when anything changes) because every policy call of a scheduling pass needs them.
    @cached_property
    def occupied(self) -> np.ndarray:
        """``slots >= 0``, shape ``(G, S)``, read-only."""
        return _frozen(self.slots >= 0)

    @cached_property
    def njobs(self) -> np.ndarray:
        """Jobs on each GPU, shape ``(G,)``, read-only."""
        return _frozen(row_count(self.occupied))

    @cached_property
    def slot_types(self) -> np.ndarray:
        """Current job type in each slot, shape ``(G, S)``; meaningful only where :attr:`occupied`."""
        return _frozen(self.job_type[np.maximum(self.slots, 0)])

    @cached_property
    def gpu_free_in_s(self) -> np.ndarray:
        """Seconds until each GPU is free at current rates (its last occupant's remaining work
        over its rate, the rate floored at 1e-6), 0 for an idle GPU, shape ``(G,)``."""
        occupied = self.occupied
        if self.slots.shape[1] == 0:
            return _frozen(np.zeros(self.n_gpus))
        handles = np.where(occupied, self.slots, 0)
        # remaining_s(handles) / max(rate, 1e-6), elementwise as those two compute it, gathering each
        # array once (take: the same values as indexing), in place; then 0 in the empty slots
        job_rate = self.job_rate.take(handles)
        left = self.job_work_left_s.take(handles) - job_rate * (self.now_s - self.job_updated_s.take(handles))
        np.maximum(left, 0.0, out=left)
        left /= np.maximum(job_rate, 1e-6)
        left[~occupied] = 0.0
        return _frozen(row_max(left))

    @cached_property
    def memo(self) -> dict:
        """Answers a policy computed from this view, keyed by what they depend on besides it
        (e.g. :meth:`~iadeep.policy.Policy.eligible` per job needs); lives as long as the view
        and its :meth:`at` copies (and later views a driver hands it on to:
        :meth:`with_occupancy`), so it holds only answers that do not depend on ``now_s``, the jobs'
        rates or their remaining work."""
        return {}

    @classmethod
    def with_occupancy(cls, *args, occupied: np.ndarray, njobs: np.ndarray, slot_types: np.ndarray,
                       memo: dict | None = None, changes: OccupancyChanges | None = None, **kwargs) -> ClusterView:
        """A view (arguments as the constructor's) whose :attr:`occupied`, :attr:`njobs` and
        :attr:`slot_types` the driver hands over, kept up to date across its changes, instead of
        computing them from ``slots``: per-GPU state that changes on a few GPUs per event, where
        every view would otherwise rederive it over all ``G`` GPUs.

        The driver vouches for them and for the slot contract (neither is checked here): they
        must equal what a view built from the same state computes (``slot_types`` also in empty
        slots: ``job_type[0]``, as ``job_type[max(slots, 0)]`` gives), and they must be
        read-only. The simulator keeps them (:mod:`iadeep.sim`); ``tests/core/test_core_view_at.py``
        compares every view it hands out with one built afresh, whose construction checks the
        contract.

        Shapes: ``occupied`` ``(G, S)`` bool, ``njobs`` ``(G,)`` int64, ``slot_types`` ``(G, S)`` int64.

        ``memo``: an earlier view's :attr:`memo` to share, or ``None`` (a fresh one). The driver may
        hand one on only while what its answers derive from is unchanged since that view (which job
        sits in which slot, the jobs' types and GPU counts, the GPUs' memory, shares and models);
        rates, remaining work and the clock may have moved. The simulator does so between
        changes of occupancy (a rate change alone leaves eligibility as it was).

        ``changes``: which GPUs' occupancy changed since when (:class:`OccupancyChanges`), for
        answers a policy patches on the GPUs changed since it last computed them
        (:meth:`~iadeep.policy.Policy.eligible`); ``None``: not kept.
        """
        new = object.__new__(cls)
        d = new.__dict__
        d.update(_FIELD_DEFAULTS)
        d.update(zip(_FIELD_NAMES, args))
        d.update(kwargs)
        d["occupied"], d["njobs"], d["slot_types"] = occupied, njobs, slot_types
        if memo is not None:
            d["memo"] = memo
        if changes is not None:
            d["occupancy_changes"] = changes
        return new

    def at(self, now_s: float) -> ClusterView:
        """This view at another clock ``now_s``, sharing its arrays.

        The copy skips the slot contract check this view passed and carries over the derived
        entries that do not depend on the clock (:attr:`occupied`, :attr:`njobs`,
        :attr:`slot_types`, and :attr:`memo` with e.g. the eligibility answers);
        :attr:`gpu_free_in_s` and :meth:`remaining_s` follow ``now_s``.

        **Invalidation** is the driver's: it may call this only while what those entries derive
        from is unchanged since this view was built (which job sits in which slot, the jobs'
        types and GPU counts, the GPUs' memory, shares and models); after any such change it
        must build a new view. Rates and remaining work are read from the shared arrays, as a
        new view would. The simulator calls it when only its clock moved (its state epoch,
        bumped by every placement, release and batch-size change, is unchanged).
        """
        new = object.__new__(ClusterView)
        d = new.__dict__
        d.update({f: v for f, v in self.__dict__.items() if f in _HANDED_ON})
        d["now_s"] = float(now_s)
        return new

    def gpu_njobs(self) -> np.ndarray:
        """Jobs on each GPU, shape ``(G,)``."""
        return self.njobs

    def remaining_s(self, handles: np.ndarray) -> np.ndarray:
        """Remaining work at dedicated speed (s) of ``handles`` at ``now_s``, same shape."""
        if isinstance(handles, np.ndarray) and handles.dtype.kind in "iu":  # take: indexing's values, cheaper
            left = self.job_work_left_s.take(handles) - self.job_rate.take(handles) * (self.now_s - self.job_updated_s.take(handles))
            return np.maximum(left, 0.0, out=left) if left.ndim else np.maximum(left, 0.0)
        left = self.job_work_left_s[handles] - self.job_rate[handles] * (self.now_s - self.job_updated_s[handles])
        return np.maximum(left, 0.0)

    def gpu_name(self, gpu: int) -> str:
        """``"<node>/gpu<k>"`` for messages."""
        return f"{self.node_names[self.gpu_node[gpu]]}/gpu{self.gpu_local_index[gpu]}"


@dataclass(frozen=True)
class OccupancyChanges:
    """A driver's record of which GPUs' occupancy changed, in order, handed to its views
    (:meth:`ClusterView.with_occupancy`) so that a policy can patch an answer it computed on an
    earlier view on the few GPUs changed since, in place of recomputing it over all ``G``.

    "Occupancy" is what eligibility reads: which job sits in which slot, those jobs' types, the
    GPU's memory and shares in use. Every such change appends its GPU to ``log``; the GPUs
    changed between versions ``v`` and ``w`` are ``log[v:w]``.

    Attributes:
        version: the driver's occupancy version when the view was built (``len(log)`` then).
        log: the GPU id of each change, in order; the driver's own list, append-only (its
            identity tells one driver's record from another's; read it, never write it).
    """

    version: int
    log: Sequence[int]


@dataclass(frozen=True)
class JobRequest:
    """A job asking to be placed.

    Attributes:
        handle: the job's row in the view's job arrays.
        job_id: the driver's identifier (trace job id or pod UID).
        type_id: interference-model id of its (model, batch size).
        num_gpus: GPUs needed at once (gang).
        mem_gib: memory it reserves on each GPU (GiB).
        remaining_s: remaining work at dedicated speed (seconds).
        gpus_ahead: GPUs asked for by the jobs queued ahead of it (0 at the head of the queue).
        jobs_behind: jobs queued behind it (under FIFO they cannot start while it waits).
        gpu_milli: share of each GPU it needs, in 1/1000 GPU (openb's ``gpu_milli``); NaN
            (default): not a share request (only memory and the co-location limit apply).
        gpu_models: GPU models it accepts (openb's ``gpu_spec``); empty (default): any.
        jobs_queued: the other jobs waiting in the queue, ahead of it or behind, blocked by it or
            not (kube-scheduler's pending pods): the jobs whose start a change of the cluster's
            throughput moves (the queue-pressure term of :class:`iadeep.policy.iadeep.IADeep`).
        pod_gpus: GPUs of each of its pods (a gang of ``num_gpus // pod_gpus`` pods, each pod's
            GPUs on one node, the pods on any nodes; :func:`iadeep.policy.pod_size` chooses it
            from the cluster's nodes); ``0`` (default): no pod rule, any ``num_gpus`` GPUs of the
            cluster (the simulator's ``gang_placement="any-gpus"``, and one pod asked about on
            one node's view). ``num_gpus`` is a multiple of it.
    """

    handle: int
    job_id: str
    type_id: int
    num_gpus: int
    mem_gib: float
    remaining_s: float
    gpus_ahead: int = 0
    jobs_behind: int = 0
    gpu_milli: float = float("nan")
    gpu_models: tuple[str, ...] = ()
    jobs_queued: int = 0
    pod_gpus: int = 0

    def __post_init__(self) -> None:
        if self.pod_gpus < 0 or (self.pod_gpus and self.num_gpus % self.pod_gpus):
            raise ValueError(f"job {self.job_id}: pod_gpus must be 0 or divide num_gpus = {self.num_gpus}, "
                             f"got {self.pod_gpus}")

    @property
    def n_pods(self) -> int:
        """Pods of the job: ``num_gpus // pod_gpus``, or 1 without a pod rule."""
        return self.num_gpus // self.pod_gpus if self.pod_gpus else 1


@dataclass(frozen=True)
class Placement:
    """Decision of the reserve phase: run the job on these GPUs now.

    Attributes:
        job_id: the job.
        gpus: global GPU ids, ``len(gpus) == num_gpus``. **Pod contract**: for a job with pods
            (:attr:`JobRequest.pod_gpus` ``= p > 0``) pod ``i``'s GPUs are ``gpus[i*p:(i+1)*p]``,
            all on one node (pods in the order the policy chose them: best first).
        reason: a short human-readable justification.
    """

    job_id: str
    gpus: tuple[int, ...]
    reason: str = ""


@dataclass(frozen=True)
class Preemption:
    """Decision of the post-filter phase (:meth:`iadeep.policy.Policy.post_filter`): run the job on
    ``gpus`` once the ``victims`` have left them.

    The driver checkpoints the victims and puts them back in the queue (ahead of the jobs behind
    this one) *before* placing the job: ``gpus`` counts on the GPUs they free. A policy returns it
    when the job blocks a FIFO queue (``JobRequest.jobs_behind > 0``) or, if told so, at the head
    of kube-scheduler's queue; a driver that cannot preempt treats it as a :class:`Wait`.

    Attributes:
        job_id: the job.
        gpus: global GPU ids, ``len(gpus) == num_gpus``, some of them the victims' (pods as
            :attr:`Placement.gpus` orders them).
        victims: handles (:class:`ClusterView` job handles) of the running jobs to preempt.
        reason: a short human-readable justification.
    """

    job_id: str
    gpus: tuple[int, ...]
    victims: tuple[int, ...]
    reason: str = ""


#: :attr:`Wait.holds_up_to_behind` of a wait that no number of jobs queued behind can change.
ANY_BEHIND = 2**62


@dataclass(frozen=True)
class Wait:
    """Decision: leave the job queued. ``reason`` says why (shown to users and in pod events).

    Attributes:
        job_id: the job.
        reason: why it waits.
        holds_up_to_behind: a queueing hint (the role of kube-scheduler's QueueingHint, KEP-4247:
            which events can make a rejected pod schedulable). ``>= 0`` promises that the policy
            would decide to wait again as long as only time passes: the cluster state it read is
            unchanged (which jobs sit on which GPUs, their job types, GPU memory and shares, every
            running job's rate and remaining work at that rate), the job's ``gpus_ahead`` is the
            same and its ``jobs_behind`` is at most this number (:data:`ANY_BEHIND`: any number).
            ``-1`` (default): no promise, ask again after any change. A driver may skip the calls
            a promise covers (the simulator does; kube-scheduler's own retries make the extender's
            calls); it never has to.
        expected_wait_s: the policy's expected wait (s) when it waits for time to pass (its
            co-location was priced against this wait); ``None`` when it waits for the cluster
            to change (too few eligible GPUs), which time alone does not.
    """

    job_id: str
    reason: str
    holds_up_to_behind: int = -1
    expected_wait_s: float | None = None


@dataclass(frozen=True)
class FilterResult:
    """Which nodes can take a job (kube-scheduler extender ``filter`` semantics): feasibility only.

    Attributes:
        feasible: node name -> how many of its GPUs can take one worker of the job (at least
            the job's ``num_gpus``; which ones is :meth:`Policy.place`'s choice at bind time).
        failed: node name -> reason it cannot.
    """

    feasible: Mapping[str, int]
    failed: Mapping[str, str]


@dataclass(frozen=True)
class TuningDecision:
    """Outcome of a tuning session on one GPU.

    Attributes:
        gpu: the GPU tuned.
        type_ids: job handle -> job-type id (i.e. batch size) to run from now on.
        trials: number of configurations measured (each costs measurement time).
        evict: handles of jobs to take off the GPU and re-queue (e.g. Gandiva's undo).
        avoid: job-type ids the driver bans from sharing a GPU with each other
            (:meth:`Policy.avoid`) when it applies the decision, i.e. when the session ends (an
            undo, :func:`iadeep.policy.undo_rule`; a session interrupted before then bans nothing,
            as on the live system, where the ban reaches the extender with the session's end).
        samples: observed ``(handle, partner_handle, type_id, partner_type_id, normalised_throughput)``
            tuples, for drivers that persist what was learned.
        progress: summed progress rate of the chosen configuration as measured (NaN if not measured).
        reason: short explanation.
    """

    gpu: int
    type_ids: Mapping[int, int] = field(default_factory=dict)
    trials: int = 0
    evict: tuple[int, ...] = ()
    avoid: tuple[int, ...] = ()
    samples: tuple[tuple[int, int, int, int, float], ...] = ()
    progress: float = float("nan")
    reason: str = ""


def capacity_masks(job: JobRequest, view: ClusterView) -> tuple[np.ndarray | None, np.ndarray | None]:
    """GPUs with room for ``job``'s share, and GPUs of a model it accepts.

    Shares: a GPU has 1000 milli; a job asking ``gpu_milli`` fits where
    ``gpu_share_used_milli + gpu_milli <= 1000`` (openb's GPU-sharing semantics, Weng et al.,
    ATC'23). Models: the GPU's ``gpu_model`` is one of ``job.gpu_models``.

    Returns:
        ``(share_ok, model_ok)``: bool arrays ``(G,)``, each ``None`` when the constraint does not
        apply (no share asked or not accounted by the driver; no model required).
    """
    share_ok = model_ok = None
    if job.gpu_milli == job.gpu_milli and view.gpu_share_used_milli is not None:  # not NaN
        share_ok = view.gpu_share_used_milli + job.gpu_milli <= 1000.0 + 1e-9
    if job.gpu_models:
        models = view.gpu_model if view.gpu_model is not None else np.full(view.n_gpus, "", dtype=object)
        model_ok = np.isin(models, list(job.gpu_models))
    return share_ok, model_ok


def fits_when_empty(job: JobRequest, view: ClusterView) -> np.ndarray:
    """GPUs that could take one worker of ``job`` once empty: enough total memory and a model it
    accepts (a share always fits an empty GPU), shape ``(G,)``. For rules that free GPUs
    (preemption) on clusters whose GPUs differ."""
    ok = view.gpu_mem_total_gib >= job.mem_gib - 1e-9
    _, model_ok = capacity_masks(job, view)
    return ok if model_ok is None else ok & model_ok


#: A measurement executor: runs the given configuration (handle -> type id) of the jobs on one GPU
#: for one trial and returns each job's observed normalised throughput (handle -> float). The
#: simulator injects a noisy model; the live coordinator injects one that sets batch sizes and
#: reads the throughput the jobs report.
Measure = Callable[[Mapping[int, int]], Mapping[int, float]]


#: What :meth:`ClusterView.at` hands on: every field but the clock, and the derived entries that do
#: not depend on it (a derived entry added to ClusterView is recomputed by a copy unless listed here).
_HANDED_ON = frozenset({f.name for f in fields(ClusterView) if f.name != "now_s"}
                       | {"occupied", "njobs", "slot_types", "memo", "occupancy_changes"})
_FIELD_NAMES = tuple(f.name for f in fields(ClusterView))  # constructor order, for :meth:`ClusterView.with_occupancy`
_FIELD_DEFAULTS = {f.name: f.default for f in fields(ClusterView) if f.default is not MISSING}


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # flags.writeable = False, without building the flags object
    return a
