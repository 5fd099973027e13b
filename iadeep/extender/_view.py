"""From a state-store snapshot to the policy core's inputs: pure functions, no I/O.

:func:`build_view` is the whole translation in one call::

    view, request = build_view(snapshot, demand_job, types, now_s=now, slots=2)

The extender keeps a :class:`ViewBase` per snapshot (the arrays of every GPU and placed job,
built once) and derives each request's view from it with :meth:`ViewBase.with_job` in
``O(G + J)`` array copies, no Python loop over GPUs; :meth:`ViewBase.restrict` keeps one node
(the bind path), :meth:`ViewBase.with_reservation` adds a reservation just made.

Rules of the translation:

* nodes are the inventories, sorted by name; a node's GPUs are contiguous, in inventory order;
* a GPU's used memory is its :class:`~iadeep.state.GpuState` ``mem_used_gib`` (0 when absent);
  its slots hold the handles of its ``pods``, in order;
* the placed jobs (pods found on some GPU) get handles ``0..J-1`` in order of first appearance;
  the asking job is handle ``J`` (the last row). A pod on a GPU without a job record is kept as
  a job of the default type (its memory is still counted);
* a job's remaining work is its record's ``remaining_s``, as of ``now_s``; placed jobs progress
  at rate 1 (the coordinator refines ``remaining_s`` in the record from reported progress).

Notations:
    G: GPUs in the view; S: co-location slots; J: placed jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from iadeep.extender._pods import PodSpecError
from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView, JobRequest
from iadeep.state import Assignment, GpuState, JobRecord, NodeInventory

__all__ = ["Snapshot", "TypeResolver", "ViewBase", "build_view"]


@dataclass(frozen=True)
class Snapshot:
    """What the extender knows of the shared state at one moment.

    Attributes:
        inventories: node name -> published GPUs.
        gpu_states: ``(node, gpu index)`` -> memory used and pods.
        jobs: pod UID -> job record.
        taken_at_s: when it was read (Unix seconds).
    """

    inventories: Mapping[str, NodeInventory] = field(default_factory=dict)
    gpu_states: Mapping[tuple[str, int], GpuState] = field(default_factory=dict)
    jobs: Mapping[str, JobRecord] = field(default_factory=dict)
    taken_at_s: float = 0.0

    def with_reservation(self, job: JobRecord, assignments: Sequence[Assignment]) -> Snapshot:
        """A copy that includes ``assignments`` of ``job`` (idempotent: a pod already on a GPU is
        not added twice)."""
        states = dict(self.gpu_states)
        for a in assignments:
            old = states.get((a.node, a.gpu), GpuState(a.node, a.gpu))
            if a.pod_uid in old.pods:
                continue
            states[(a.node, a.gpu)] = GpuState(a.node, a.gpu, old.mem_used_gib + a.mem_gib, (*old.pods, a.pod_uid))
        jobs = dict(self.jobs)
        jobs[job.pod_uid] = job
        return Snapshot(self.inventories, states, jobs, self.taken_at_s)

    def without_pod(self, pod_uid: str) -> Snapshot:
        """A copy where ``pod_uid`` holds nothing (its memory is its job record's ``mem_gib`` per GPU)."""
        job = self.jobs.get(pod_uid)
        mem = job.mem_gib if job is not None else 0.0
        states = dict(self.gpu_states)
        for key, st in self.gpu_states.items():
            if pod_uid in st.pods:
                states[key] = GpuState(st.node, st.gpu, max(st.mem_used_gib - mem, 0.0),
                                       tuple(p for p in st.pods if p != pod_uid))
        return Snapshot(self.inventories, states, self.jobs, self.taken_at_s)

    def node_gpu_states(self, node: str) -> list[GpuState]:
        """The node's GPUs in inventory order (zero-use states for GPUs without a record)."""
        inv = self.inventories.get(node)
        if inv is None:
            return []
        return [self.gpu_states.get((node, g.index), GpuState(node, g.index)) for g in inv.gpus]


class TypeResolver:
    """Maps a job's (model family, batch size) to the interference model's type id.

    An unmeasured batch size of a known family maps to the nearest measured one (ties to the
    smaller); an unknown family is an error for a new pod and the default type for a stored record.

    Args:
        model: the interference model.
        default_model / default_batch_size: the type of pods without annotations.
    """

    def __init__(self, model: InterferenceModel, default_model: str, default_batch_size: int):
        self.model = model
        self._sizes: dict[str, tuple[int, ...]] = {}
        for t in model.types:
            self._sizes.setdefault(t.model, ())
        for fam in self._sizes:
            self._sizes[fam] = model.batch_sizes(fam)
        self._cache: dict[tuple[str, int], int] = {}
        self.default_type = self.resolve(default_model, default_batch_size)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted(self._sizes))

    def resolve(self, family: str, batch_size: int) -> int:
        """Type id of ``family`` at (the measured batch size nearest to) ``batch_size``.

        Raises:
            PodSpecError: ``family`` was not measured (the message lists the known families).
        """
        key = (family, batch_size)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        sizes = self._sizes.get(family)
        if not sizes:
            raise PodSpecError(f"model {family!r} is not in the interference model; known: {', '.join(self.families)}")
        nearest = min(sizes, key=lambda b: (abs(b - batch_size), b))
        tid = self.model.type_id(JobType(family, nearest))
        if len(self._cache) < 4096:
            self._cache[key] = tid
        return tid

    def resolve_or_default(self, family: str, batch_size: int) -> int:
        try:
            return self.resolve(family, batch_size)
        except PodSpecError:
            return self.default_type


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class ViewBase:
    """The arrays of a :class:`~iadeep.policy.ClusterView` without the asking job.

    Attributes:
        node_names: shape ``(n_nodes,)``; node_start: first GPU of each node, shape ``(n_nodes + 1,)``.
        gpu_*: per-GPU arrays, shape ``(G,)``; gpu_uuid: UUIDs from the inventory.
        slots: handles per GPU, ``-1`` empty, shape ``(G, S)``.
        job_*: per placed job, shape ``(J,)``; handles: pod UID -> handle; pods: handle -> pod UID.
        updated_s: time the remaining work refers to.
    """

    node_names: tuple[str, ...]
    node_start: np.ndarray
    gpu_node: np.ndarray
    gpu_local_index: np.ndarray
    gpu_uuid: tuple[str, ...]
    gpu_mem_total_gib: np.ndarray
    gpu_mem_used_gib: np.ndarray
    slots: np.ndarray
    job_type: np.ndarray
    job_num_gpus: np.ndarray
    job_work_left_s: np.ndarray
    handles: Mapping[str, int]
    pods: tuple[str, ...]
    updated_s: float
    node_pos: Mapping[str, int]

    @property
    def n_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    def node_index(self, name: str) -> int | None:
        """Position of ``name`` in :attr:`node_names`, ``None`` when unknown."""
        return self.node_pos.get(name)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, types: TypeResolver, *, slots: int) -> ViewBase:
        """Build the arrays (one pass over inventories and GPU states).

        Args:
            slots: minimum co-location slots per GPU (the policy's limit); more when a GPU
                already holds more pods.
        """
        names = tuple(sorted(snapshot.inventories))
        node_start = np.zeros(len(names) + 1, dtype=np.int64)
        gpu_node: list[int] = []
        local: list[int] = []
        uuids: list[str] = []
        total: list[float] = []
        used: list[float] = []
        occupants: list[tuple[str, ...]] = []
        states = snapshot.gpu_states
        for k, name in enumerate(names):
            gpus = snapshot.inventories[name].gpus
            for g in gpus:
                st = states.get((name, g.index))
                gpu_node.append(k)
                local.append(g.index)
                uuids.append(g.uuid)
                total.append(g.mem_gib)
                used.append(st.mem_used_gib if st else 0.0)
                occupants.append(st.pods if st else ())
            node_start[k + 1] = node_start[k] + len(gpus)
        width = max([slots, *(len(p) for p in occupants)])
        slot_arr = np.full((len(occupants), width), -1, dtype=np.int64)
        handles: dict[str, int] = {}
        for g, pods in enumerate(occupants):
            for s, uid in enumerate(pods):
                h = handles.setdefault(uid, len(handles))
                slot_arr[g, s] = h
        pods = tuple(handles)
        jtype = np.empty(len(pods), dtype=np.int64)
        jgpus = np.empty(len(pods), dtype=np.int64)
        jleft = np.empty(len(pods))
        for h, uid in enumerate(pods):
            rec = snapshot.jobs.get(uid)
            if rec is None:
                jtype[h], jgpus[h], jleft[h] = types.default_type, 1, 0.0
            else:
                jtype[h] = types.resolve_or_default(rec.model, rec.batch_size)
                jgpus[h], jleft[h] = max(rec.num_gpus, 1), max(rec.remaining_s, 0.0)
        return cls(names, _ro(node_start), _ro(np.array(gpu_node, dtype=np.int64)), _ro(np.array(local, dtype=np.int64)),
                   tuple(uuids), _ro(np.array(total, dtype=float)), _ro(np.array(used, dtype=float)), _ro(slot_arr),
                   _ro(jtype), _ro(jgpus), _ro(jleft), handles, pods, snapshot.taken_at_s,
                   {n: k for k, n in enumerate(names)})

    def gpus_of(self, node: str) -> range:
        """Global GPU ids of ``node`` (empty when unknown)."""
        k = self.node_index(node)
        return range(0) if k is None else range(int(self.node_start[k]), int(self.node_start[k + 1]))

    def restrict(self, node: str) -> ViewBase:
        """The same state limited to one node (empty when the node is unknown)."""
        gpus = self.gpus_of(node)
        sl = slice(gpus.start, gpus.stop)
        known = self.node_index(node) is not None
        return ViewBase(
            (node,) if known else (), _ro(np.array([0, len(gpus)] if known else [0], dtype=np.int64)),
            _ro(np.zeros(len(gpus), dtype=np.int64)), self.gpu_local_index[sl], self.gpu_uuid[sl],
            self.gpu_mem_total_gib[sl], self.gpu_mem_used_gib[sl], self.slots[sl], self.job_type, self.job_num_gpus,
            self.job_work_left_s, self.handles, self.pods, self.updated_s, {node: 0} if known else {})

    def with_reservation(self, job: JobRecord, type_id: int, assignments: Sequence[Assignment]) -> ViewBase:
        """A copy that includes a reservation just made (idempotent per pod and GPU)."""
        used = self.gpu_mem_used_gib.copy()
        slots = self.slots
        handles = dict(self.handles)
        pods = self.pods
        jtype, jgpus, jleft = self.job_type, self.job_num_gpus, self.job_work_left_s
        h = handles.get(job.pod_uid)
        if h is None:
            h = len(pods)
            handles[job.pod_uid] = h
            pods = (*pods, job.pod_uid)
            jtype = np.append(jtype, type_id)
            jgpus = np.append(jgpus, max(job.num_gpus, 1))
            jleft = np.append(jleft, max(job.remaining_s, 0.0))
        for a in assignments:
            k = self.node_index(a.node)
            if k is None:
                continue
            hit = np.flatnonzero(self.gpu_local_index[self.node_start[k]:self.node_start[k + 1]] == a.gpu)
            if not len(hit):
                continue
            g = int(self.node_start[k]) + int(hit[0])
            row = slots[g]
            if (row == h).any():
                continue
            free = np.flatnonzero(row < 0)
            if not len(free):
                slots = np.concatenate([slots, np.full((slots.shape[0], 1), -1, dtype=np.int64)], axis=1)
                col = slots.shape[1] - 1
            else:
                col = int(free[0])
            if slots is self.slots:
                slots = slots.copy()
            slots[g, col] = h
            used[g] += a.mem_gib
        return ViewBase(self.node_names, self.node_start, self.gpu_node, self.gpu_local_index, self.gpu_uuid,
                        self.gpu_mem_total_gib, _ro(used), _ro(slots), _ro(jtype), _ro(jgpus), _ro(jleft), handles, pods,
                        self.updated_s, self.node_pos)

    def with_job(self, job: JobRecord, type_id: int, *, now_s: float) -> tuple[ClusterView, JobRequest]:
        """The policy's inputs for ``job`` asking to be placed (it becomes handle ``J``)."""
        n = len(self.pods)
        jtype = np.append(self.job_type, type_id)
        jgpus = np.append(self.job_num_gpus, max(job.num_gpus, 1))
        jleft = np.append(self.job_work_left_s, max(job.remaining_s, 0.0))
        updated = np.full(n + 1, self.updated_s)
        updated[n] = now_s
        rate = np.ones(n + 1)
        rate[n] = 0.0
        view = ClusterView(now_s, self.node_names, self.gpu_node, self.gpu_local_index, self.gpu_mem_total_gib,
                           self.gpu_mem_used_gib, self.slots, _ro(jtype), _ro(jtype.copy()), _ro(jgpus), _ro(jleft),
                           _ro(updated), _ro(rate))
        request = JobRequest(n, job.pod_uid, type_id, max(job.num_gpus, 1), float(job.mem_gib), max(job.remaining_s, 0.0))
        return view, request


def build_view(snapshot: Snapshot, job: JobRecord, types: TypeResolver, *, now_s: float, slots: int) -> tuple[ClusterView, JobRequest]:
    """The :class:`~iadeep.policy.ClusterView` and :class:`~iadeep.policy.JobRequest` for ``job``.

    Raises:
        PodSpecError: the job's model family is unknown to the interference model.
    """
    type_id = types.resolve(job.model, job.batch_size)
    return ViewBase.from_snapshot(snapshot, types, slots=slots).with_job(job, type_id, now_s=now_s)
