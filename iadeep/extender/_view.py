"""From a state-store snapshot to the policy core's inputs: pure functions, no I/O.

:func:`build_view` is the whole translation in one call::

    view, request = build_view(snapshot, demand_job, types, now_s=now, slots=2)

The extender keeps a :class:`ViewBase` per snapshot (the arrays of every GPU and placed job,
built once) and derives each request's view from it with :meth:`ViewBase.with_job` in
``O(G + J)`` array copies, no Python loop over GPUs; :meth:`ViewBase.restrict` keeps one node
(the bind path), :func:`add_reservation` adds a reservation just made to both halves of a copy.

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
from dataclasses import dataclass, field, replace

import numpy as np

from iadeep.extender._pods import job_of
from iadeep.podspec import TypeResolver
from iadeep.policy import ClusterView, JobRequest
from iadeep.state import Assignment, GpuState, JobRecord, NodeInventory

__all__ = ["Snapshot", "TypeResolver", "ViewBase", "add_reservation", "build_view", "remove_pod"]


@dataclass(frozen=True)
class Snapshot:
    """What the extender knows of the shared state at one moment.

    Attributes:
        inventories: node name -> published GPUs.
        gpu_states: ``(node, gpu index)`` -> memory used and pods.
        jobs: pod UID -> job record.
        taken_at_s: when it was listed (Unix seconds); changes applied later keep it.
    """

    inventories: Mapping[str, NodeInventory] = field(default_factory=dict)
    gpu_states: Mapping[tuple[str, int], GpuState] = field(default_factory=dict)
    jobs: Mapping[str, JobRecord] = field(default_factory=dict)
    taken_at_s: float = 0.0

    def with_changes(self, *, inventories: Mapping[str, NodeInventory | None] | None = None,
                     gpu_states: Mapping[tuple[str, int], GpuState | None] | None = None,
                     jobs: Mapping[str, JobRecord | None] | None = None) -> Snapshot:
        """A copy with records replaced (``None``: deleted); only the changed mappings are copied."""

        def merged(old: Mapping, new: Mapping | None) -> Mapping:
            if not new:
                return old
            out = dict(old)
            for k, v in new.items():
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = v
            return out

        return Snapshot(merged(self.inventories, inventories), merged(self.gpu_states, gpu_states),
                        merged(self.jobs, jobs), self.taken_at_s)

    def reservation_states(self, assignments: Sequence[Assignment]) -> dict[tuple[str, int], GpuState]:
        """The GPU states once ``assignments`` are added (a pod already on a GPU is not added twice);
        only the GPUs that change."""
        out: dict[tuple[str, int], GpuState] = {}
        for a in assignments:
            key = (a.node, a.gpu)
            old = out.get(key) or self.gpu_states.get(key) or GpuState(a.node, a.gpu)
            if a.pod_uid not in old.pods:
                out[key] = GpuState(a.node, a.gpu, old.mem_used_gib + a.mem_gib, (*old.pods, a.pod_uid))
        return out

    def without_pod_states(self, pod_uid: str) -> dict[tuple[str, int], GpuState]:
        """The GPU states once ``pod_uid`` holds nothing (its memory is its job record's ``mem_gib``
        per GPU); only the GPUs that change. A pod whose reservation a tuning session grew
        (:meth:`iadeep.state.StateStore.resize`) held more: the copy then shows less memory free
        than there is, the safe side, until the store's new state arrives."""
        job = self.jobs.get(pod_uid)
        mem = job.mem_gib if job is not None else 0.0
        return {key: GpuState(st.node, st.gpu, max(st.mem_used_gib - mem, 0.0), tuple(p for p in st.pods if p != pod_uid))
                for key, st in self.gpu_states.items() if pod_uid in st.pods}

    def node_gpu_states(self, node: str) -> list[GpuState]:
        """The node's GPUs in inventory order (zero-use states for GPUs without a record)."""
        inv = self.inventories.get(node)
        if inv is None:
            return []
        return [self.gpu_states.get((node, g.index), GpuState(node, g.index)) for g in inv.gpus]


@dataclass(frozen=True)
class _JobKeys:
    """Handle -> ``(namespace, Job name)`` (:func:`~iadeep.extender._pods.job_of`), computed
    when a policy asks (rarely: what it remembers between calls); a pod without a record: its UID."""

    pods: tuple[str, ...]  # the placed jobs' pods (handles 0..J-1)
    jobs: Mapping[str, JobRecord]
    asking: JobRecord  # handle J

    def __getitem__(self, handle: int) -> object:
        if handle == len(self.pods):
            rec: JobRecord | None = self.asking
        else:
            rec = self.jobs.get(self.pods[handle])
        return self.pods[handle] if rec is None else job_of(rec.namespace, rec.name)

    def __len__(self) -> int:
        return len(self.pods) + 1


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class ViewBase:
    """The arrays of a :class:`~iadeep.policy.ClusterView` without the asking job.

    Built from a :class:`Snapshot` by :meth:`from_snapshot` (one pass, ``O(G + J)`` Python) and
    then kept up to date change by change with :meth:`with_gpu_states` and :meth:`with_jobs`
    (array copies, Python work only for the changed GPUs and jobs). Handles are never reused: a
    pod that left keeps its (unreferenced) job row until the next :meth:`from_snapshot`
    (:meth:`mostly_dead` says when that is due).

    Attributes:
        node_names: shape ``(n_nodes,)``; node_start: first GPU of each node, shape ``(n_nodes + 1,)``.
        gpu_*: per-GPU arrays, shape ``(G,)``; gpu_uuid: UUIDs from the inventory.
        slots: handles per GPU, ``-1`` empty, shape ``(G, S)``.
        job_*: per job row, shape ``(J,)``; job_updated_s: when each row's ``job_work_left_s``
            was set (Unix seconds); handles: pod UID -> handle; pods: handle -> pod UID.
        node_pos: node name -> position; gpu_pos: ``(node, gpu index)`` -> global GPU id.
        gpu_model: GPU model of each GPU from the inventory (``""`` unknown), shape ``(G,)``;
            ``None`` only for a view built by hand.
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
    job_updated_s: np.ndarray
    handles: Mapping[str, int]
    pods: tuple[str, ...]
    node_pos: Mapping[str, int]
    gpu_pos: Mapping[tuple[str, int], int]
    gpu_model: np.ndarray | None = None

    @property
    def n_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    def mostly_dead(self) -> bool:
        """More than half of the job rows belong to pods no GPU holds any more (cheap test: a live
        row fills at least one slot)."""
        return len(self.pods) > 2 * int(np.count_nonzero(self.slots >= 0))

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
        models: list[str] = []
        total: list[float] = []
        used: list[float] = []
        occupants: list[tuple[str, ...]] = []
        gpu_pos: dict[tuple[str, int], int] = {}
        states = snapshot.gpu_states
        for k, name in enumerate(names):
            gpus = snapshot.inventories[name].gpus
            for g in gpus:
                st = states.get((name, g.index))
                gpu_pos[(name, g.index)] = len(gpu_node)
                gpu_node.append(k)
                local.append(g.index)
                uuids.append(g.uuid)
                models.append(g.model)
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
        jtype, jgpus, jleft = _job_rows([snapshot.jobs.get(uid) for uid in pods], types)
        return cls(names, _ro(node_start), _ro(np.array(gpu_node, dtype=np.int64)), _ro(np.array(local, dtype=np.int64)),
                   tuple(uuids), _ro(np.array(total, dtype=float)), _ro(np.array(used, dtype=float)), _ro(slot_arr),
                   _ro(jtype), _ro(jgpus), _ro(jleft), _ro(np.full(len(pods), snapshot.taken_at_s)), handles, pods,
                   {n: k for k, n in enumerate(names)}, gpu_pos, _ro(np.array(models, dtype=object)))

    def gpus_of(self, node: str) -> range:
        """Global GPU ids of ``node`` (empty when unknown)."""
        k = self.node_index(node)
        return range(0) if k is None else range(int(self.node_start[k]), int(self.node_start[k + 1]))

    def restrict(self, node: str) -> ViewBase:
        """The same state limited to one node (empty when the node is unknown)."""
        gpus = self.gpus_of(node)
        sl = slice(gpus.start, gpus.stop)
        known = self.node_index(node) is not None
        local = self.gpu_local_index[sl]
        return ViewBase(
            (node,) if known else (), _ro(np.array([0, len(gpus)] if known else [0], dtype=np.int64)),
            _ro(np.zeros(len(gpus), dtype=np.int64)), local, self.gpu_uuid[sl],
            self.gpu_mem_total_gib[sl], self.gpu_mem_used_gib[sl], self.slots[sl], self.job_type, self.job_num_gpus,
            self.job_work_left_s, self.job_updated_s, self.handles, self.pods, {node: 0} if known else {},
            {(node, int(g)): i for i, g in enumerate(local.tolist())},
            None if self.gpu_model is None else self.gpu_model[sl])

    def with_gpu_states(self, states: Mapping[tuple[str, int], GpuState | None], jobs: Mapping[str, JobRecord],
                        types: TypeResolver, *, now_s: float, type_ids: Mapping[str, int] | None = None) -> ViewBase:
        """A copy where the given GPUs hold exactly ``states`` (``None``: unused).

        GPUs not in the layout (node without inventory) are ignored. A pod new to the view gets a
        job row from ``jobs`` (the default type when it has no record there; ``type_ids`` overrides
        the type of given pods), its work left as of ``now_s``.
        """
        hits = [(self.gpu_pos[key], st) for key, st in states.items() if key in self.gpu_pos]
        if not hits:
            return self
        used = self.gpu_mem_used_gib.copy()
        width = max([self.slots.shape[1], *(len(st.pods) for _, st in hits if st is not None)])
        slots = self.slots.copy() if width == self.slots.shape[1] else np.concatenate(
            [self.slots, np.full((self.slots.shape[0], width - self.slots.shape[1]), -1, dtype=np.int64)], axis=1)
        handles, pods = self.handles, self.pods
        new: list[str] = []
        for g, st in hits:
            slots[g] = -1
            if st is None:
                used[g] = 0.0
                continue
            used[g] = st.mem_used_gib
            for s, uid in enumerate(st.pods):
                h = handles.get(uid)
                if h is None:
                    if not new:
                        handles = dict(handles)
                    h = handles[uid] = len(pods) + len(new)
                    new.append(uid)
                slots[g, s] = h
        jtype, jgpus, jleft, jupd = self.job_type, self.job_num_gpus, self.job_work_left_s, self.job_updated_s
        if new:
            pods = (*pods, *new)
            t, n, left = _job_rows([jobs.get(uid) for uid in new], types)
            for i, uid in enumerate(new):
                if type_ids and uid in type_ids:
                    t[i] = type_ids[uid]
            jtype, jgpus, jleft = np.concatenate([jtype, t]), np.concatenate([jgpus, n]), np.concatenate([jleft, left])
            jupd = np.concatenate([jupd, np.full(len(new), now_s)])
        return replace(self, gpu_mem_used_gib=_ro(used), slots=_ro(slots), job_type=_ro(jtype), job_num_gpus=_ro(jgpus),
                       job_work_left_s=_ro(jleft), job_updated_s=_ro(jupd), handles=handles, pods=pods)

    def with_jobs(self, jobs: Mapping[str, JobRecord | None], types: TypeResolver, *, now_s: float) -> ViewBase:
        """A copy where the rows of pods already in the view follow their new job records (type,
        GPUs, work left as of ``now_s``; a deleted record makes the row the default type, as a pod
        without a record gets in :meth:`from_snapshot`); records of pods not in the view are
        ignored (they are read when the pod shows up on a GPU)."""
        rows = [(self.handles[uid], rec) for uid, rec in jobs.items() if uid in self.handles]
        if not rows:
            return self
        jtype, jgpus, jleft, jupd = (a.copy() for a in (self.job_type, self.job_num_gpus, self.job_work_left_s, self.job_updated_s))
        t, n, left = _job_rows([rec for _, rec in rows], types)
        idx = [h for h, _ in rows]
        jtype[idx], jgpus[idx], jleft[idx], jupd[idx] = t, n, left, now_s
        return replace(self, job_type=_ro(jtype), job_num_gpus=_ro(jgpus), job_work_left_s=_ro(jleft), job_updated_s=_ro(jupd))

    def cluster_view(self, *, now_s: float) -> ClusterView:
        """The policy's view of the placed pods alone (no job asking; handles are the job keys),
        each at dedicated speed as in :meth:`with_job`."""
        jtype = _ro(self.job_type.copy())
        return ClusterView(now_s, self.node_names, self.gpu_node, self.gpu_local_index, self.gpu_mem_total_gib,
                           self.gpu_mem_used_gib, self.slots, jtype, jtype, self.job_num_gpus, self.job_work_left_s,
                           self.job_updated_s, _ro(np.ones(len(self.pods))), gpu_model=self.gpu_model,
                           node_pos=self.node_pos)

    def with_job(self, job: JobRecord, type_id: int, *, now_s: float,
                 jobs: Mapping[str, JobRecord] | None = None) -> tuple[ClusterView, JobRequest]:
        """The policy's inputs for ``job`` asking to be placed (it becomes handle ``J``); the
        view's job keys (:meth:`~iadeep.policy.ClusterView.job_key`) are the pods' Jobs, from
        their records in ``jobs`` (a pod without one: its UID)."""
        n = len(self.pods)
        jtype = np.append(self.job_type, type_id)
        jgpus = np.append(self.job_num_gpus, max(job.num_gpus, 1))
        jleft = np.append(self.job_work_left_s, max(job.remaining_s, 0.0))
        updated = np.append(self.job_updated_s, now_s)
        rate = np.ones(n + 1)
        rate[n] = 0.0
        view = ClusterView(now_s, self.node_names, self.gpu_node, self.gpu_local_index, self.gpu_mem_total_gib,
                           self.gpu_mem_used_gib, self.slots, _ro(jtype), _ro(jtype.copy()), _ro(jgpus), _ro(jleft),
                           _ro(updated), _ro(rate), gpu_model=self.gpu_model, node_pos=self.node_pos,
                           job_keys=_JobKeys(self.pods, jobs or {}, job))
        request = JobRequest(n, job.pod_uid, type_id, max(job.num_gpus, 1), float(job.mem_gib), max(job.remaining_s, 0.0),
                             gpu_models=tuple(job.gpu_models))
        return view, request


def add_reservation(snapshot: Snapshot, base: ViewBase, job: JobRecord, type_id: int,
                    assignments: Sequence[Assignment], types: TypeResolver, *, now_s: float) -> tuple[Snapshot, ViewBase]:
    """Both halves of a copy with a reservation just made (``job`` holding ``assignments``, its
    row of type ``type_id``); the very same objects when the copy has it already."""
    states = snapshot.reservation_states(assignments)
    if not states:
        return snapshot, base
    snapshot = snapshot.with_changes(gpu_states=states, jobs={job.pod_uid: job})
    return snapshot, base.with_gpu_states(states, snapshot.jobs, types, now_s=now_s, type_ids={job.pod_uid: type_id})


def remove_pod(snapshot: Snapshot, base: ViewBase, pod_uid: str, types: TypeResolver, *,
               now_s: float) -> tuple[Snapshot, ViewBase]:
    """Both halves of a copy once ``pod_uid`` holds no GPU (the same objects when it held none)."""
    states = snapshot.without_pod_states(pod_uid)
    if not states:
        return snapshot, base
    snapshot = snapshot.with_changes(gpu_states=states)
    return snapshot, base.with_gpu_states(states, snapshot.jobs, types, now_s=now_s)


def _job_rows(records: Sequence[JobRecord | None], types: TypeResolver) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Type ids, GPU counts and work left (s) of job rows; a missing record is one default-type
    GPU with no known work left."""
    n = len(records)
    jtype = np.empty(n, dtype=np.int64)
    jgpus = np.empty(n, dtype=np.int64)
    jleft = np.empty(n)
    for i, rec in enumerate(records):
        if rec is None:
            jtype[i], jgpus[i], jleft[i] = types.default_type, 1, 0.0
        else:
            jtype[i] = types.resolve_or_default(rec.model, rec.batch_size)
            jgpus[i], jleft[i] = max(rec.num_gpus, 1), max(rec.remaining_s, 0.0)
    return jtype, jgpus, jleft


def build_view(snapshot: Snapshot, job: JobRecord, types: TypeResolver, *, now_s: float, slots: int) -> tuple[ClusterView, JobRequest]:
    """The :class:`~iadeep.policy.ClusterView` and :class:`~iadeep.policy.JobRequest` for ``job``.

    Raises:
        PodSpecError: the job's model family is unknown to the interference model.
    """
    type_id = types.resolve(job.model, job.batch_size)
    return ViewBase.from_snapshot(snapshot, types, slots=slots).with_job(job, type_id, now_s=now_s, jobs=snapshot.jobs)
