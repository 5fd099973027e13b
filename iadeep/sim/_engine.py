"""Discrete-event simulator over nodes x GPUs x GPU memory, driving a policy from the core.

Job progress is measured in *work*: seconds of run time on dedicated GPUs at the submitted batch
size (the trace's duration). A running job's progress rate (work per second) is, on each of its GPUs,
``min(normalised throughput x goodput gain, 1)`` (:mod:`iadeep.interference`,
:mod:`iadeep.goodput`; the cap: nothing runs faster than its dedicated run as submitted); a
gang (multi-GPU job) advances at the rate of its slowest GPU (synchronous data parallelism).

The engine is this module's event loop and state; the rate model is
:class:`iadeep.sim._rates.RateModel`, the tuning sessions :class:`iadeep.sim._sessions.TuningSessions`
(both base classes of :class:`Simulator`), and a finished run hands its record
(:class:`iadeep.sim._result.RunRecord`) to :meth:`iadeep.sim.SimResult.build`.

Events: arrival, completion, end of a tuning session, queue wake-up. After each batch of
simultaneous events the scheduler tries the jobs its queue offers (:mod:`iadeep.sim._queue`: the
FIFO head, with backfill the next ``backfill_depth`` jobs, or kube-scheduler's active queue with
backoff; completions and evictions are reported to it as cluster events). Every
GPU whose co-location set changed gets a tuning call; a session with ``n`` trials lasts
``n x trial_s`` during which the jobs progress at the mean true rate of the measured
configurations, then the chosen configuration applies, or the policy's undo does: the pair of
types is banned (:meth:`~iadeep.policy.Policy.avoid`) and the newest job re-queued, both at the
session's end, as on the live system (the coordinator records the undo when its session ends, the
extender then bans and evicts); a session interrupted by another change is discarded, its undo
with it. A placement may also preempt running jobs.

Gangs (``SimSettings.gang_placement``): by default a job runs as the live system runs it, a gang
of equal pods (:func:`iadeep.policy.pod_size`), each pod's GPUs on one node and the pods on any
nodes; the policy is asked to place all of them at once (:attr:`iadeep.policy.JobRequest.pod_gpus`),
as the extender decides a gang when its first member is filtered. ``"any-gpus"`` places a job on
any GPUs of the cluster. A job evicted either way is re-queued
(:meth:`~iadeep.sim._queue.SchedulingQueue.requeue`: FIFO at the head, a preempted job ahead of
the jobs behind the placed one; kube-scheduler's queue as its Job's replacement pod, created at
the eviction) keeping the work it did plus ``restart_penalty_s``. Measurements the policy sees are noisy; the simulator uses the true values.

Memory is reserved as the live system reserves it: a job holds, on each of its GPUs, the larger
of its submitted batch size's memory (its pod's ``iadeep.io/gpu-mem`` request, which the extender
reserves at placement) and its current batch size's: a tuning session may grow a job into memory
no other job reserved (the coordinator moves the pod's reservation with it,
:meth:`iadeep.state.StateStore.resize`), and a smaller batch size frees nothing below the request.

GPU shares and models (openb): a job with a ``gpu_milli`` share takes that much of each of its
GPUs (shares on a GPU sum to at most 1000, on top of the memory check); a job with a
``gpu_spec`` runs only on GPUs of those models. **Rule for shares** (an assumption, as in the
FGD simulator that replays openb, Weng et al., ATC'23, which models GPU sharing as resource
partitioning without interference): a job holding a share runs at its trace speed whatever
shares its GPU's other jobs hold, i.e. its normalised throughput is 1 and only its GPU model's
speed applies; jobs without a share (``gpu_milli`` NaN: Philly, ITP) interfere as the
interference model says. **GPU models**: with ``speeds`` (:func:`iadeep.sim.type_speeds`,
Gavel's isolated throughputs per GPU type), a job's rate on a GPU whose model maps to a Gavel
type (``V100*``, ``P100*``, ``K80*``) is multiplied by that type's throughput of its job type over
the reference type's (the trace's durations are taken as runs on the reference type); other
models run at the reference speed. Censored jobs (``censored``) run for their observed time, a
lower bound.
"""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

from iadeep.goodput import gain_matrix
from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.policy import ClusterView, JobRequest, OccupancyChanges, Placement, Policy, Preemption, pod_size
from iadeep.sim._config import ClusterSpec, SimSettings
from iadeep.sim._errors import InfeasibleJobError
from iadeep.sim._feasible import feasibility, gpu_model_mask
from iadeep.sim._queue import SchedulingQueue
from iadeep.sim._rates import RateModel
from iadeep.sim._result import RunRecord, SimResult
from iadeep.sim._sessions import TUNED as _TUNED
from iadeep.sim._sessions import Session, TuningSessions
from iadeep.sim._speeds import gavel_type_of

__all__ = ["Simulator", "simulate"]

_ARRIVE, _FINISH, _WAKE = 0, 1, 3  # and _TUNED (2): a tuning session's end
_PENDING, _QUEUED, _RUNNING, _DONE, _UNSCHEDULABLE = 0, 1, 2, 3, 4


class Simulator(RateModel, TuningSessions):
    """One simulation of a job table on a cluster under one policy.

    Args:
        jobs: the normalised job table (:mod:`iadeep.traces`): job_id, submit_time, duration,
            num_gpus, model, batch_size; optional gpu_milli, gpu_spec, censored.
        policy: a policy instance (fresh per run: policies keep learned state).
        model: the ground-truth interference model.
        cluster: the cluster.
        settings: simulation settings.
        infeasible: what to do with jobs that can never run (:func:`iadeep.sim.feasibility`):
            ``"raise"`` (default) or ``"skip"`` (never queued; reported as unschedulable).
        speeds: Gavel GPU type -> relative speed per job-type id, shape ``(n_types,)``
            (:func:`iadeep.sim.type_speeds`); ``None``: every GPU at the reference speed.
        queue: the scheduling queue (a fresh one per run); ``None``: built from ``settings``
            (:meth:`SimSettings.make_queue`).

    Raises:
        InfeasibleJobError: (a ``ValueError``) with ``infeasible="raise"``, a job needs more GPUs
            (of its accepted models) than the cluster has, or more memory than any such GPU has;
            the message names the first such job.
        iadeep.interference.UnknownJobType: a job type the model lacks.
    """

    def __init__(self, jobs: pd.DataFrame, policy: Policy, model: InterferenceModel, cluster: ClusterSpec = ClusterSpec(),
                 settings: SimSettings = SimSettings(), infeasible: str = "raise",
                 speeds: dict[str, np.ndarray] | None = None, queue: SchedulingQueue | None = None):
        if infeasible not in ("raise", "skip"):
            raise ValueError(f"infeasible must be 'raise' or 'skip', got {infeasible!r}")
        self.policy, self.model, self.cluster, self.settings = policy, model, cluster, settings
        self.rng = np.random.default_rng(settings.seed)
        self._noise: list[float] = []  # measurement noise drawn ahead from rng (_lognormal)
        self._noise_at = 0
        self._noise_sigma = settings.measurement_noise
        n = len(jobs)
        self.job_ids = jobs["job_id"].astype(str).to_numpy()
        self.submit = jobs["submit_time"].to_numpy(dtype=float)
        self.duration = jobs["duration"].to_numpy(dtype=float)
        self.num_gpus = jobs["num_gpus"].to_numpy(dtype=np.int64)
        ids = {}
        base = np.empty(n, dtype=np.int64)
        for i, (m, b) in enumerate(zip(jobs["model"].to_numpy(), jobs["batch_size"].to_numpy())):
            key = (m, int(b))
            if key not in ids:
                ids[key] = model.type_id(JobType(*key))
            base[i] = ids[key]
        self.base_type = base
        G = cluster.total_gpus
        gpu_node, gpu_local, gpu_mem, gpu_models = cluster.gpu_arrays()
        self.censored = jobs["censored"].to_numpy(dtype=bool) if "censored" in jobs.columns else np.zeros(n, dtype=bool)
        milli = jobs["gpu_milli"].to_numpy(dtype=float) if "gpu_milli" in jobs.columns else np.full(n, np.nan)
        self.share = np.where(np.isfinite(milli), milli, 0.0)  # milli held on each of a job's GPUs
        self.has_share = np.isfinite(milli)
        self.job_milli = np.where(self.has_share, milli, np.nan)  # the view's job_gpu_milli (NaN: no share)
        specs = jobs["gpu_spec"].fillna("").astype(str).to_numpy() if "gpu_spec" in jobs.columns else np.full(n, "")
        self.accepts = [tuple(x for x in sp.split("|") if x) for sp in specs]
        why = feasibility(jobs, model, cluster)
        bad = np.flatnonzero(why != "")
        if len(bad) and infeasible == "raise":
            h = int(bad[0])
            ok = gpu_model_mask(specs[h], gpu_models)
            detail = (f"needs {self.num_gpus[h]} GPUs{' of ' + specs[h] if specs[h] else ''}, the cluster has {int(ok.sum())}"
                      if why[h] == "wider_than_cluster" else
                      f"needs {model.mem_gib[base[h]]:.1f} GiB, its GPUs have at most {gpu_mem[ok].max():g} GiB")
            raise InfeasibleJobError(str(self.job_ids[h]), str(why[h]), detail, len(bad))
        self.infeasible_reason = why
        self.pod_gpus = self._pod_sizes(gpu_node, gpu_models, why)
        S = policy.limit
        self.slots = np.full((G, S), -1, dtype=np.int64)
        self.gpu_rate = np.zeros((G, S))  # progress rate each occupant makes on this GPU
        # kept per GPU across events (ClusterView.with_occupancy): slots >= 0, jobs per GPU, the
        # current job type in each slot (type[max(slots, 0)]: job 0's type in empty slots)
        self.occupied = np.zeros((G, S), dtype=bool)
        self.njobs = np.zeros(G, dtype=np.int64)
        self._n_busy = 0  # GPUs holding a job: count_nonzero(njobs), kept as njobs changes
        self._slot_list = self.slots.tolist()  # the slots as plain lists, kept equal to the array
        self.slot_types = np.full((G, S), base[0] if n else 0, dtype=np.int64)
        self.mem_used = np.zeros(G)
        self.share_used = np.zeros(G)
        self.gpu_node, self.gpu_local, self.mem_total, self.gpu_models = gpu_node, gpu_local, gpu_mem, gpu_models
        # speed of each job type on each GPU relative to the reference type: shape (G, n_types)
        ones = np.ones(len(model.types))
        by_model = {m: (speeds or {}).get(gavel_type_of(m), ones) for m in set(gpu_models.tolist())}
        self.gpu_speed = np.stack([by_model[m] for m in gpu_models]) if G else np.zeros((0, len(ones)))
        self.type = base.copy()
        self.rate = np.zeros(n)
        self.work_left = self.duration.copy()
        self.updated = np.zeros(n)
        self.status = np.zeros(n, dtype=np.int8)
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.coloc = np.zeros(n, dtype=np.int64)
        self.trials = np.zeros(n, dtype=np.int64)
        self.evictions = np.zeros(n, dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.gpus: list[tuple[int, ...]] = [()] * n
        self.first_gpus: list[tuple[int, ...]] = [()] * n  # where each job first started
        self.partners: list[set[int]] = [set() for _ in range(n)]  # jobs it ever shared a GPU with
        self.sessions: dict[int, Session] = {}
        self.gpu_version = np.zeros(G, dtype=np.int64)
        # Bumped by every change of what a ClusterView shows beyond the clock (occupancy, types,
        # memory, shares, rates); a Wait's queueing hint holds within one epoch.
        self._epoch = 0
        self._hints: dict[int, tuple[int, int, int]] = {}  # handle -> (epoch, gpus_ahead, holds_up_to_behind)
        self._requests: dict[int, tuple[tuple, JobRequest]] = {}  # handle -> (what its request reads, the request)
        self._view: ClusterView | None = None
        self._view_key: tuple[float, int] = (-1.0, -1)
        # The GPU of every change of what eligibility reads (which job sits in which slot, the jobs'
        # types, GPU memory and shares), in order (OccupancyChanges.log: its length is the
        # occupancy version); views of one version share their memo.
        self._change_log: list[int] = []
        self._memo_version = -1
        self._changes: OccupancyChanges | None = None
        #: calls of the policy: ``place``, retries a Wait's queueing hint skipped, ``tune``
        self.calls = {"place": 0, "skipped_by_hint": 0, "tune": 0}
        self.gain = gain_matrix(model.types, model.isolated_steps_per_s)
        self.queue: SchedulingQueue = queue if queue is not None else settings.make_queue()
        self._wake_at = -1.0
        self.events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.now = 0.0
        self.n_running = 0
        self.timeline: list[tuple[float, int, int, int]] = []
        self.busy_gpu_seconds = 0.0
        self.peak_mem_over = 0.0
        self._ro = {name: _readonly(getattr(self, name)) for name in
                    ("gpu_node", "gpu_local", "mem_total", "mem_used", "slots", "type", "base_type", "num_gpus", "work_left", "updated", "rate",
                     "share_used", "gpu_models", "occupied", "njobs", "slot_types", "job_milli")}
        self._mem_of = model.mem_gib
        self._mem_list = model.mem_gib.tolist()
        # scalar readers for the per-trial arithmetic (plain floats: the same values as the arrays')
        self._norm_of, self._gain_of, self._speed_of = model.norm.item, self.gain.item, self.gpu_speed.item
        self._has_share, self._base_of = self.has_share.tolist(), base.tolist()
        self._node_names = cluster.node_names()
        r = self._ro
        self._view_args = (
            (self._node_names, r["gpu_node"], r["gpu_local"], r["mem_total"], r["mem_used"], r["slots"], r["type"],
             r["base_type"], r["num_gpus"], r["work_left"], r["updated"], r["rate"]),
            {"gpu_share_used_milli": r["share_used"], "gpu_model": r["gpu_models"], "job_gpu_milli": r["job_milli"],
             "occupied": r["occupied"],
             "njobs": r["njobs"], "slot_types": r["slot_types"]})

    # -- event plumbing ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, a, b))

    def view(self) -> ClusterView:
        """The read-only :class:`ClusterView` the policy sees now (the same object while neither the
        clock nor the state epoch moved: its derived arrays are then computed once)."""
        key = (self.now, self._epoch)
        if self._view is not None and self._view_key == key:
            return self._view
        if self._view is not None and self._view_key[1] == self._epoch:
            # only the clock moved: the state epoch is bumped by every other change of what a
            # view shows, so the last view's clock-free parts (eligibility answers) still hold
            self._view_key = key
            self._view = self._view.at(self.now)
            return self._view
        self._view_key = key
        version = len(self._change_log)
        memo = self._view.memo if self._view is not None and self._memo_version == version else {}
        self._memo_version = version
        args, kwargs = self._view_args  # the read-only arrays: the same objects for every view
        self._view = ClusterView.with_occupancy(self.now, *args, **kwargs, memo=memo, changes=self._changes_at(version))
        return self._view

    def _changes_at(self, version: int) -> OccupancyChanges:
        """The change record at ``version`` (one object per version: views of a version share it)."""
        if self._changes is None or self._changes.version != version:
            self._changes = OccupancyChanges(version, self._change_log)
        return self._changes

    def _sync(self, h: int) -> float:
        """Bring job ``h``'s remaining work up to ``now``; returns it (s at dedicated speed)."""
        # plain floats: the same IEEE operations as on the arrays' scalars, without their overhead
        now = self.now
        left = max(self.work_left.item(h) - self.rate.item(h) * (now - self.updated.item(h)), 0.0)
        self.work_left[h] = left
        self.updated[h] = now
        return left

    def _set_rate(self, h: int) -> None:
        left = self._sync(h)
        rate = self._gang_rate(h)
        self.rate[h] = rate
        version = self.version.item(h) + 1
        self.version[h] = version
        self._epoch += 1
        if rate > 0:
            self._push(self.now + left / rate, _FINISH, h, version)

    def _gpu_changed(self, g: int) -> None:
        """Bring GPU ``g``'s kept occupancy, job count and slot types up to date with its slots."""
        self._change_log.append(g)
        types, occupied, slot_types = self.type, self.occupied, self.slot_types
        n = 0
        for s, h in enumerate(self._slot_list[g]):  # S is small (1-4): item writes beat array ops
            occupied[g, s] = h >= 0
            slot_types[g, s] = types[h if h >= 0 else 0]
            n += h >= 0
        self._n_busy += (n > 0) - (self.njobs.item(g) > 0)
        self.njobs[g] = n

    def _type_changed(self, h: int) -> None:
        """Job ``h``'s type changed: its GPUs' kept slot types (and, for job 0, the empty slots')."""
        t = self.type[h]
        for g in self.gpus[h]:
            self.slot_types[g, self._slot(g, h)] = t
            self._change_log.append(g)
        if h == 0:
            self.slot_types[~self.occupied] = self.type[0]

    def _slot(self, g: int, h: int) -> int:
        return self._slot_list[g].index(h)

    def _occupants(self, g: int) -> list[int]:
        return [h for h in self._slot_list[g] if h >= 0]

    def _pod_sizes(self, gpu_node: np.ndarray, gpu_models: np.ndarray, why: np.ndarray) -> np.ndarray:
        """GPUs per pod of each job, shape ``(n_jobs,)``: :func:`iadeep.policy.pod_size` over the
        nodes' GPUs of a model the job accepts (``gang_placement="pods"``), 0 for ``"any-gpus"``
        and for jobs that can never run."""
        out = np.zeros(len(self.num_gpus), dtype=np.int64)
        if self.settings.gang_placement != "pods":
            return out
        n_nodes = int(gpu_node.max()) + 1 if len(gpu_node) else 0
        sizes: dict[tuple[int, tuple[str, ...]], int] = {}
        for h, (k, accepts) in enumerate(zip(self.num_gpus.tolist(), self.accepts)):
            if why[h]:
                continue
            key = (k, accepts)
            p = sizes.get(key)
            if p is None:
                ok = np.isin(gpu_models, list(accepts)) if accepts else np.ones(len(gpu_node), dtype=bool)
                p = sizes[key] = pod_size(k, np.bincount(gpu_node[ok], minlength=n_nodes).tolist())
            out[h] = p
        return out

    # -- applying decisions --------------------------------------------------------------------
    def _apply_placement(self, h: int, p: Placement | Preemption) -> set[int]:
        affected: set[int] = {h}
        pod = self.pod_gpus.item(h)
        if pod > 1:  # the pod contract of Placement.gpus: each pod's GPUs on one node
            nodes = self.gpu_node[list(p.gpus)].reshape(-1, pod)
            if len(p.gpus) != self.num_gpus.item(h) or (nodes != nodes[:, :1]).any():
                raise RuntimeError(f"policy {self.policy.name} placed {self.job_ids[h]}'s pods of {pod} GPUs "
                                   f"across nodes: GPUs {p.gpus}")
        self._epoch += 1
        for g in p.gpus:
            row = self._slot_list[g]
            if -1 not in row:  # empty slots hold -1
                raise RuntimeError(f"policy {self.policy.name} placed {self.job_ids[h]} on full GPU {g}")
            for other in self._occupants(g):
                self.coloc[other] += 1
                self.coloc[h] += 1
                self.partners[h].add(other)
                self.partners[other].add(h)
            free = row.index(-1)
            row[free] = h
            self.slots[g, free] = h
            self._gpu_changed(g)
            # plain floats read and written back: the same IEEE sums as on the arrays' scalars
            mem = self.mem_used.item(g) + self._reserved(h)
            share = self.share_used.item(g) + self.share.item(h)
            self.mem_used[g] = mem
            self.share_used[g] = share
            if mem > self.mem_total.item(g) + 1e-9 or share > 1000 + 1e-9:
                raise RuntimeError(f"policy {self.policy.name} over-committed GPU {g} memory or shares")
            if self.accepts[h] and self.gpu_models[g] not in self.accepts[h]:
                raise RuntimeError(f"policy {self.policy.name} placed {self.job_ids[h]} on a {self.gpu_models[g]!r} GPU")
            self.gpu_version[g] += 1
        self.gpus[h] = tuple(p.gpus)
        self.status[h] = _RUNNING
        self.n_running += 1
        self.updated[h] = self.now
        if self.start.item(h) != self.start.item(h):  # NaN: not started before (np.isnan on a scalar costs ~1 us)
            self.start[h] = self.now
            self.first_gpus[h] = tuple(p.gpus)
        for g in p.gpus:
            self._refresh_gpu(g, affected)
        return affected

    def _release(self, h: int) -> list[int]:
        """Take ``h`` off its GPUs; returns the GPUs it left."""
        self._sync(h)
        self._epoch += 1
        self.rate[h] = 0.0
        self.version[h] += 1
        left = list(self.gpus[h])
        for g in left:
            # keep ClusterView's slot contract: the remaining jobs shift down, placement order kept
            row = self._slot_list[g]
            s = row.index(h)
            del row[s]
            row.append(-1)
            self.slots[g] = row
            self._gpu_changed(g)
            rates = self.gpu_rate
            for k in range(s, len(row) - 1):  # shift the rates down with the jobs (S is 1-4: item writes)
                rates[g, k] = rates.item(g, k + 1)
            rates[g, -1] = 0.0
            self.mem_used[g] = max(self.mem_used.item(g) - self._reserved(h), 0.0)  # plain floats: the same values
            self.share_used[g] = max(self.share_used.item(g) - self.share.item(h), 0.0)
            self.gpu_version[g] += 1
            self.sessions.pop(g, None)
        self.gpus[h] = ()
        return left

    def _reserved(self, h: int, t: int | None = None) -> float:
        """GPU memory ``h`` reserves on each of its GPUs (GiB; module docstring) at type ``t``
        (default: the one it runs at)."""
        mem = self._mem_list  # plain floats: the same values as the model's array
        return max(mem[self.type.item(h) if t is None else t], mem[self._base_of[h]])

    def _evict(self, h: int, affected: set[int], here: bool = False) -> None:
        """Take ``h`` off its GPUs and queue it again (:meth:`SchedulingQueue.requeue`: at the head,
        or with ``here`` where the job just placed was, ahead of the jobs behind it) with its work
        so far kept plus ``restart_penalty_s`` (checkpoint and restart)."""
        for g in self._release(h):
            self._refresh_gpu(g, affected)
        affected.discard(h)
        self.type[h] = self.base_type[h]
        self._type_changed(h)
        self.work_left[h] += self.settings.restart_penalty_s
        self._epoch += 1
        self.evictions[h] += 1
        self.status[h] = _QUEUED
        self.n_running -= 1
        self.queue.requeue(h, self.now, here=here)
        self.queue.cluster_event("pod_ended", self.now)

    # -- scheduling ----------------------------------------------------------------------------
    def _request(self, h: int, gpus_ahead: int, jobs_behind: int, jobs_queued: int = 0) -> JobRequest:
        # a queued job's request changes only with its type, remaining work and queue position:
        # the last one is handed again while those are the same (a request is immutable)
        key = (self.type.item(h), self.work_left.item(h), gpus_ahead, jobs_behind, jobs_queued)
        kept = self._requests.get(h)
        if kept is not None and kept[0] == key:
            return kept[1]
        request = self._new_request(h, gpus_ahead, jobs_behind, jobs_queued)
        self._requests[h] = (key, request)
        return request

    def _new_request(self, h: int, gpus_ahead: int, jobs_behind: int, jobs_queued: int = 0) -> JobRequest:
        t = self.type.item(h)
        return JobRequest(h, str(self.job_ids[h]), t, self.num_gpus.item(h), self._mem_list[t],
                          self.work_left.item(h), gpus_ahead, jobs_behind,
                          float(self.share[h]) if self.has_share[h] else float("nan"), self.accepts[h], jobs_queued,
                          self.pod_gpus.item(h))

    def _schedule(self) -> set[int]:
        """Place what the policy allows; returns the GPUs whose co-location set changed."""
        changed: set[int] = set()
        affected: set[int] = set()
        queue = self.queue
        view = None  # one view while candidates fail (nothing changes), a new one after a placement
        hints = self._hints
        for h in queue.candidates(self.now):
            ahead, behind = queue.gpus_ahead(h), queue.blocking(h)
            hint = hints.get(h)
            if hint is not None and hint[0] == self._epoch and hint[1] == ahead and behind <= hint[2]:
                queue.failed(h, self.now)  # the policy's queueing hint: it would wait again
                self.calls["skipped_by_hint"] += 1
                continue
            if view is None:
                view = self.view()
            self.calls["place"] += 1
            decision = self.policy.place(self._request(h, ahead, behind, len(queue) - 1), view)
            if isinstance(decision, (Placement, Preemption)):
                hints.pop(h, None)
                self._requests.pop(h, None)
                view = None
                queue.placed(h, self.now)
                if isinstance(decision, Preemption):
                    for v in decision.victims:  # checkpointed and queued ahead of the jobs behind
                        self._evict(int(v), affected, here=True)
                        changed.update(g for g in decision.gpus)
                placed = self._apply_placement(h, decision)
                affected |= placed
                changed.update(decision.gpus)
                for x in placed:  # the next decision of this pass sees them running at their rates
                    self._sync(x)
                    self.rate[x] = self._gang_rate(x)
                self._epoch += 1
                continue
            if decision.holds_up_to_behind >= 0:
                hints[h] = (self._epoch, ahead, decision.holds_up_to_behind)
            queue.failed(h, self.now)
        for g in sorted(changed):
            self._tune(g, affected)
        for h in affected:
            if self.status[h] == _RUNNING:
                self._set_rate(h)
        return changed

    # -- main loop -----------------------------------------------------------------------------
    def run(self, progress=None) -> SimResult:
        """Run to completion.

        Args:
            progress: optional callable ``progress(done_jobs)`` called as jobs finish.
        """
        skipped = self.infeasible_reason != ""
        self.status[skipped] = _UNSCHEDULABLE
        n = len(self.job_ids) - int(skipped.sum())
        # Arrivals in submission order, outside the event heap: they come before every other event
        # of their time (as they would in the heap, where they hold the lowest sequence numbers),
        # and the heap keeps only the events pushed while running (hundreds, not the whole trace).
        order = [h for h in np.argsort(self.submit, kind="stable").tolist() if not skipped[h]]
        arrival_t = [float(self.submit[h]) for h in order] + [np.inf]
        n_arrivals = len(order)
        self._seq += n_arrivals
        events = self.events
        k = 0  # the next arrival
        done = 0
        last_t = 0.0
        while (k < n_arrivals or events) and done < n:  # stale finish/tuning events may outlive the last job
            t = arrival_t[k]
            if events and events[0][0] < t:
                t = events[0][0]
            self.busy_gpu_seconds += self._n_busy * (t - last_t)  # a GPU is busy iff it holds a job
            last_t = t
            self.now = t
            affected: set[int] = set()
            freed: set[int] = set()
            while arrival_t[k] == t:
                a = order[k]
                k += 1
                self.status[a] = _QUEUED
                self.queue.add(a, float(self.submit[a]), t, gpus=int(self.num_gpus[a]))
            while events and events[0][0] == t:
                _, _, kind, a, b = heapq.heappop(events)
                if kind == _FINISH:
                    if b != self.version[a] or self.status[a] != _RUNNING:
                        continue
                    self._sync(a)
                    freed.update(self._release(a))
                    self.status[a] = _DONE
                    self.n_running -= 1
                    self.end[a] = t
                    self.queue.cluster_event("pod_ended", t)
                    done += 1
                    if progress is not None:
                        progress(done)
                elif kind == _TUNED:
                    session = self.sessions.get(a)
                    if session is None or session.version != b or self.gpu_version[a] != b:
                        continue
                    del self.sessions[a]
                    if session.evict or session.avoid:
                        self._undo(session.evict, session.avoid, affected, a)
                    else:
                        self._apply_config(a, session.config, affected)
            for g in sorted(freed):
                self._refresh_gpu(g, affected)
            for g in sorted(freed):
                if self._occupants(g):
                    self._tune(g, affected)
            for h in affected:
                if self.status[h] == _RUNNING:
                    self._set_rate(h)
            self._schedule()
            wake = self.queue.next_wakeup(t)
            if wake is not None and wake > t and wake != self._wake_at:
                self._wake_at = wake
                self._push(wake, _WAKE, 0)
            if self.settings.record_timeline:
                self.timeline.append((t, len(self.queue), int((self.slots >= 0).any(axis=1).sum()), self.n_running))
        if done != n:
            raise RuntimeError(f"simulation ended with {n - done} unfinished jobs (policy {self.policy.name} deadlocked)")
        return SimResult.build(self.record())

    def record(self) -> RunRecord:
        """What this run recorded, for :meth:`SimResult.build` (the engine's arrays, not copies)."""
        return RunRecord(
            self.policy.name, self.job_ids, self.submit, self.start, self.end, self.duration, self.num_gpus,
            self.base_type, self.type, self.model.types, self.coloc, self.trials, self.evictions, self.censored,
            self.infeasible_reason != "", self.first_gpus, self.partners, self.gpu_node, self.gpu_local,
            self._node_names, self.timeline, self.cluster.total_gpus, self.busy_gpu_seconds)


def _readonly(arr: np.ndarray) -> np.ndarray:
    v = arr.view()
    v.flags.writeable = False
    return v


def simulate(jobs: pd.DataFrame, policy: Policy, model: InterferenceModel, cluster: ClusterSpec = ClusterSpec(),
             settings: SimSettings = SimSettings(), progress=None, infeasible: str = "raise",
             speeds: dict[str, np.ndarray] | None = None) -> SimResult:
    """Convenience wrapper: ``Simulator(jobs, policy, model, cluster, settings, infeasible, speeds).run(progress)``."""
    return Simulator(jobs, policy, model, cluster, settings, infeasible, speeds).run(progress)
