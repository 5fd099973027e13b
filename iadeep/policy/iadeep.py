"""``iadeep``: interference-aware placement with a co-location limit and tuning of co-located jobs.

Notation: for the job ``n`` asking and a candidate partner ``p`` alone on a GPU, ``a`` and ``b``
are their predicted normalised throughputs together, ``R_n``, ``R_p`` their remaining work at
dedicated speed (s), ``k_p`` the partner's GPUs, ``W`` the expected wait for free GPUs
(:meth:`IADeep.expected_wait_s`: GPUs free up in order of remaining time, after the ``gpus_ahead``
that pending jobs ahead take; for a job of several GPUs in pods of ``pod_gpus``, until its pods
fit, each on one node), ``B`` the jobs blocked behind ``n`` (``jobs_behind``; 0 under
kube-scheduler's queue), ``Q`` the other queued jobs (``jobs_queued``), ``G`` the cluster's GPUs.

Reserve phase (:meth:`IADeep.reserve`), in order:

0. **a job the bans lock out** (one GPU, no eligible GPU, and every GPU of the cluster holding a
   job of a type banned beside it: :meth:`IADeep.lockout_s`, the time ``L`` until some GPU holds
   none, from the banned jobs' work left at dedicated speed): the GPU holding one job whose only
   bar is a ban, the one whose pair costs least against that partner at dedicated speed
   (``d_n + d_p`` below, :meth:`IADeep.pair_cost_s`), when that cost is below ``L`` (its wait is
   at least ``L``); otherwise it waits. A ban is a wait with no price; this prices it
   where it can starve a job type (a gang holding a slot on every GPU);
1. a GPU share (openb ``gpu_milli`` < 1000): best fit beside other shares (shares do not interfere);
2. free GPUs, when enough are eligible; a job of several GPUs that would leave no room for the
   one-GPU jobs arriving (the **arrival price** below) waits instead when that price is above its
   expected wait ``W`` for GPUs that free up (``W (1 + B)`` with ``B`` blocked behind it);
3. otherwise every eligible GPU holding one job is priced by :func:`finish_times` (both progress
   at ``a``/``b`` until one ends, then the survivor runs alone): the change of completion times is
   ``d_n = t_n - R_n`` for the job and ``d_p = k_p (t_p - R_p / rate_p)`` for the partner
   (**a gang partner's pace**: a gang progresses at its slowest GPU, so a partner already running
   at ``rate_p`` runs at ``min(b, rate_p)`` beside the job; a gang slowed by the other jobs on its
   GPUs runs so only until the last of them leaves, at ``tau``, and then at ``b`` while the job
   stays, so its delay is ``k_p`` times what the job adds to its finish time over the gang left to
   speed up at ``tau``: about ``(1 - b)(t_n - tau)`` per GPU, 0 when the job leaves first and
   ``b >= rate_p``), minus
   the **queue pressure** ``Q / G * max(a - k_p (1 - b), 0) * min(t_n, t_p)`` when ``queue_pressure``
   is on (off by default: it did not hold on a draw it was not designed on): the work the pair adds
   on the partner's GPUs while both run moves every queued job's start earlier, spread over the
   cluster. Waiting is credited ``W (1 + B / need)`` (every blocked job starts up to ``W`` later).
   The job co-locates on the GPUs that minimise ``d_n + d_p - credit`` when that is below 0, else it
   waits. A gang with nobody blocked behind it (``need > 1``, ``B = 0``) pays its slowest shared
   GPU's delay once (:func:`_gang_choice`, exact). With ``partner_once``, a job of several GPUs
   pays a partner it would share several GPUs with once: exactly for pods
   (:meth:`IADeep._place_pods`), otherwise each shared GPU's ``d_p`` over the number of that
   partner's shareable GPUs, at most ``need`` (exact when the choice takes that many of them).
   A job of pods of several GPUs, each pod on one node, has its GPUs chosen as pods first (fewest
   shared GPUs, then the cheapest) and exactly those shared GPUs priced (:meth:`IADeep._place_pods`).
   A pair predicted below taking turns (``a + b < 1``) is credited the job's own wait only, the
   queue's too when the job would leave free GPUs idle (``bad_pairs_when_waiting``). A job of
   several GPUs pays the arrival price on top of the pairs' prices.

**The arrival price** (:meth:`IADeep.arrival_cost_s`, ``price_arrivals``): a job of several GPUs
that holds its GPUs for ``T`` (its remaining work) blocks the one-GPU jobs arriving meanwhile when
none of them would find an eligible GPU (the last free GPUs taken, a share beside a whole-GPU pod,
the second slots full or out of memory). Arriving at the rate ``lambda_b`` of the last day's
one-GPU jobs that would be blocked, they wait ``lambda_b T**2 / 2`` in all. No other price sees
them: the queue of now may be empty while the stream that follows is not. The price lapses once
the job has waited ``2 T`` (:data:`ARRIVAL_HOLD_AT_MOST`).

Post-filter phase (:meth:`IADeep.post_filter`, only after a wait): head-of-line preemption. A
running job ``v`` alone on enough GPUs is preempted (checkpointed, queued again) when
``W (1 + b) > (R_h + c) + R_h b`` (``R_h`` the waiting job's run time, ``c`` the checkpoint cost,
``b = min(B, GPUs with room)``; with ``preempt_unblocked`` also at ``B = 0``: ``W > R_h + c``),
only if ``v`` would hold its GPUs longer than ``R_h + c`` (fewest GPUs, then longest hold first),
and while the delays charged to ``v`` stay within its remaining work (a thrash guard), and not
when the head's arrival price exceeds ``W (1 + b) - (R_h + c) - R_h b``.

Tuning (:meth:`IADeep.tune`): after a GPU's co-location set changes,
:class:`~iadeep.policy._tuning.BatchSizeTuner` picks the batch sizes of its jobs (a GPU whose jobs
all hold shares has none to pick: shares do not interfere, so its jobs keep their submitted
sizes and no session runs; its trials would only slow them down); every
measurement trains the :class:`~iadeep.interference.OnlineInterferenceLearner` (or the measured
table with ``predictor="oracle"``). A session whose best configuration still sums below
``undo_below`` undoes the co-location (:func:`iadeep.policy.undo_rule`): the newest job is
evicted and the pair of job types banned (:meth:`~iadeep.policy.Policy.avoid`), unless the ban
would lock it out longer than its pair costs (:meth:`IADeep.keeps`, step 0's test): then it stays
and the ban stands. Both drivers ask :meth:`IADeep.keeps` when they carry the undo out: the
simulator at the session's end, the extender before it evicts (:mod:`iadeep.extender._undo`).

The measurements behind each rule and the alternatives tried: ``docs/design/``
(2026-12-03-queue-pressure.md, 2026-12-03-policy-rules.md, 2026-12-04-a-gangs-wait-on-nodes.md,
2026-12-05-a-lockout-is-priced.md, 2026-12-05-the-arrival-price.md).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace

import numpy as np

from iadeep.interference import InterferenceModel, InterferenceSample, OnlineInterferenceLearner
from iadeep.policy._base import _POLICY, Policy, _wait_reason, choose_gpus, pod_wait_reason
from iadeep.policy._registry import register
from iadeep.policy._rows import row_prod
from iadeep.policy._tuning import BatchSizeTuner
from iadeep.policy._undo import undo_rule
from iadeep.policy._types import (ANY_BEHIND, ClusterView, JobRequest, Measure, Placement, Preemption, TuningDecision, Wait,
                                  fits_when_empty)
from iadeep.tuning import DEFAULT_TRIALS

__all__ = ["IADeep", "finish_times"]


def finish_times(r_new: np.ndarray, r_partner: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finish times (s from now) of two co-located jobs; the survivor runs alone afterwards.

    Args:
        r_new, r_partner: remaining work at dedicated speed (s), broadcastable arrays.
        a, b: normalised throughputs of the new job and the partner while together (> 0).
    """
    t_new_alone = r_new / a
    t_part_alone = r_partner / b
    new_first = t_new_alone <= t_part_alone
    t_new = np.where(new_first, t_new_alone, t_part_alone + (r_new - a * t_part_alone))
    t_part = np.where(new_first, t_new_alone + (r_partner - b * t_new_alone), t_part_alone)
    return t_new, t_part


def _finish_in_phases(work: np.ndarray, d1: np.ndarray, r1: np.ndarray, d2: np.ndarray | float,
                      r2: np.ndarray | float) -> np.ndarray:
    """When (s from now) a job with ``work`` s of dedicated work left finishes, running at rate
    ``r1`` for ``d1`` s, then ``r2`` for ``d2`` s, then at dedicated speed (rates > 0;
    broadcastable arrays)."""
    w1 = r1 * d1
    w2 = w1 + r2 * d2
    return np.where(work <= w1, work / r1, np.where(work <= w2, d1 + (work - w1) / r2, d1 + d2 + (work - w2)))


def _smallest(x: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` smallest values of ``x`` (no NaN), ties to the lower position:
    ``np.argsort(x, kind="stable")[:n]``, with ``np.argmin`` for the common ``n = 1`` (the
    first minimum: the same position without sorting every shareable GPU)."""
    if n == 1 and len(x):
        return np.array([x.argmin()])  # methods, not np.argmin: the same, without numpy's Python wrapper
    return x.argsort(kind="stable")[:n]


def _gang_choice(own: np.ndarray, rest: np.ndarray, need: int) -> tuple[np.ndarray, float]:
    """The ``need`` positions minimising ``max(own[chosen]) + sum(rest[chosen])`` and that minimum.

    Exact: the best choice's slowest position has some delay ``own[j]``; among the positions no
    slower than it, the ``need`` smallest ``rest`` are the best for that bound. One pass in order
    of ``own`` keeps them in a heap. ``rest`` may hold ``inf`` (a partner not allowed).
    """
    heap: list[tuple[float, int]] = []  # (-rest, position): the need smallest rest so far
    total, n_inf = 0.0, 0  # the sum of their finite rest, and how many are infinite
    best, best_at = math.inf, None
    for i in own.argsort(kind="stable").tolist():
        r = float(rest[i])
        if len(heap) == need:
            if not r < -heap[0][0]:
                continue  # not among the need best: this bound is no better than an earlier one
            out = -heapq.heappop(heap)[0]
            if math.isinf(out):
                n_inf -= 1
            else:
                total -= out
        heapq.heappush(heap, (-r, i))
        if math.isinf(r):
            n_inf += 1
        else:
            total += r
        if len(heap) == need and not n_inf:
            value = float(own[i]) + total
            if value < best:
                best, best_at = value, [j for _, j in heap]
    if best_at is None:  # every choice is infinite: the need smallest rest, priced infinite
        return _smallest(rest, need), math.inf
    return np.array(best_at), best


def _shares_only(gpu: int, view: ClusterView) -> bool:
    """Whether every job on ``gpu`` holds a GPU share (:attr:`ClusterView.job_gpu_milli` finite):
    shares do not slow each other down, so no batch size does better together than alone.
    False when the driver does not account shares."""
    milli = view.job_gpu_milli
    return milli is not None and bool(np.isfinite(milli.take(view.occupants(gpu))).all())


def _saving(gain: float, wait: float | None = None) -> str:
    """The reason of a co-location predicted to save ``gain`` job-seconds (against waiting ``wait`` s)."""
    vs = "" if wait is None else f" vs waiting {wait:.0f}s"
    return f"co-located: predicted saving {gain:.0f} job-seconds{vs}"


def _waits(job: JobRequest, wait: float) -> Wait:
    """The wait of a job whose co-location is predicted to cost more than waiting ``wait`` s."""
    return Wait(job.job_id, f"co-location predicted to cost more than waiting {wait:.0f}s for a free GPU",
                expected_wait_s=wait)


#: a one-GPU job's needs in the arrival log: (type id, GiB, share in 1/1000 GPU or None for a whole GPU)
_Needs = tuple[int, float, "float | None"]


def _needs(job: JobRequest) -> _Needs | None:
    """The needs of ``job`` in the arrival log; ``None`` for a job of several GPUs. A whole GPU's
    share is ``None``, not NaN, so that equal needs are one key (NaN equals no NaN)."""
    if job.num_gpus != 1:
        return None
    milli = job.gpu_milli
    return job.type_id, job.mem_gib, None if milli != milli else milli


#: why a locked-out job shares a GPU with a banned partner (IADeep._place_locked_out)
_LOCKED_OUT = "every GPU holds a partner banned beside it"

#: GPUs remembered as freeing up soonest (IADeep._remember_soonest)
_SOONEST = 8

#: how far back (s) the arrivals that set the arrival price's rate are remembered (IADeep.arrival_cost_s)
ARRIVAL_WINDOW_S = 24 * 3600.0

#: the arrival price lapses once its job has waited this many times its remaining work
#: (IADeep.arrival_cost_s; 1, 2 and 4 measured: docs/design/2026-12-05-the-arrival-price.md)
ARRIVAL_HOLD_AT_MOST = 2.0


@register
class IADeep(Policy):
    """Interference-aware placement and tuning.

    Args:
        model: interference model (ground-truth fits and memory; predictions come from ``predictor``).
        colocation_limit: jobs per GPU (2: only pairs are measured).
        predictor: ``"learned"`` (online learner) or ``"oracle"`` (the measured table).
        learner: an existing learner to use (e.g. one restored from the state store).
        tuning_trials: configurations measured per tuning session (default
            :data:`iadeep.tuner.DEFAULT_TRIALS`, the live coordinator's and tuner's too).
        bad_pairs_when_waiting: allow a pair predicted below taking turns (a + b < 1) when the two
            jobs' own completion times still beat waiting (never for queue pressure alone).
        undo_below: re-queue the newest job when a tuning session's best measured progress sum is
            below this (None: never undo).
        preempt: allow head-of-line preemption (module docstring).
        checkpoint_cost_s: work a preempted job loses (checkpoint and restart, seconds at
            dedicated speed) in the preemption rule; the simulator's default
            ``SimSettings.restart_penalty_s`` is the same 30 s, as the GPU emulator's
            ``checkpoint_cost_s``.
        preempt_unblocked: also preempt for a job with no job blocked behind it (``B = 0``, all
            that kube-scheduler's queue reports; module docstring). Off by default: only a driver
            that can carry a preemption out may turn it on.
        queue_pressure: credit a co-location with the queue's gain from the work it adds (module
            docstring); off by default (docs/design/2026-12-03-queue-pressure.md: it moved a design
            draw's median and not the acceptance draw's).
        waive_lockout: price a ban where it locks a job out of every GPU (module docstring, reserve
            step 0, and :meth:`keeps`); off: every ban holds and every undo evicts.
        price_arrivals: charge a job of several GPUs for the one-GPU jobs it would leave no room
            for (:meth:`arrival_cost_s`, module docstring: the arrival price); off: a gang's
            placement sees only the jobs running and the queue. Off by default: it belongs to
            queues that let a later job start before a waiting one, and the drivers that run one
            turn it on (the extender, under kube-scheduler's queue; the experiment under its
            ``kube`` and ``backfill`` queues: ``iadeep.experiment._steps.policy_flags``). Under
            strict FIFO the arrivals wait behind a job held for them anyway.
        slowdown_ends: price a job beside a gang that other jobs already slow by the time it keeps
            the gang slowed after they leave (module docstring: a gang partner's pace); off: the
            gang is taken to stay at its current rate, so joining it costs nothing when the
            pair is no slower than that rate. Off by default: it was measured better under
            kube-scheduler's queue only (neutral under strict FIFO;
            docs/design/2026-12-05-a-slowed-gangs-slowdown-ends.md), and the drivers that run that
            queue turn it on (the extender; the experiment's ``kube`` queue:
            ``iadeep.experiment._steps.policy_flags``).
        partner_once: a job of several GPUs that would share more than one GPU with the same
            partner pays that partner's price (``d_p``, already ``k_p`` times its delay) once, not
            once per GPU shared (module docstring, step 3); off: once per GPU shared. Off by
            default: measured better under strict FIFO on three draws (geomean 0.97-0.98; draw
            8128's worst 1.99 -> 1.42), where the experiment's ``fifo`` queue turns it on
            (``iadeep.experiment._steps.policy_flags``); under kube-scheduler's queue it helped the
            worst setting and was slightly worse in geomean (+0.3 % to +0.9 % on three draws;
            docs/design/2026-12-05-runs-with-their-own-noise.md), so the extender leaves it off.
    """

    name = "iadeep"
    colocation_limit = 2

    def __init__(self, model: InterferenceModel, *, colocation_limit: int | None = None, predictor: str = "learned",
                 learner: OnlineInterferenceLearner | None = None, tuning_trials: int = DEFAULT_TRIALS,
                 bad_pairs_when_waiting: bool = True, undo_below: float | None = 1.0, preempt: bool = True,
                 checkpoint_cost_s: float = 30.0, preempt_unblocked: bool = False, queue_pressure: bool = False,
                 waive_lockout: bool = True, price_arrivals: bool = False, slowdown_ends: bool = False,
                 partner_once: bool = False):
        super().__init__(model, colocation_limit=colocation_limit)
        if predictor not in ("learned", "oracle"):
            raise ValueError(f"predictor must be 'learned' or 'oracle', got {predictor!r}")
        self.learner = learner if learner is not None else OnlineInterferenceLearner(model.types)
        self.predictor = predictor
        self.tuner = BatchSizeTuner(model, trials=tuning_trials)
        self.bad_pairs_when_waiting = bad_pairs_when_waiting
        self.undo_below = undo_below
        self.preempt = preempt
        self.checkpoint_cost_s = checkpoint_cost_s
        self.preempt_unblocked = preempt_unblocked
        self.queue_pressure = queue_pressure
        self.waive_lockout = waive_lockout
        self.price_arrivals = price_arrivals
        self.slowdown_ends = slowdown_ends
        self.partner_once = partner_once
        # the jobs first asked about within ARRIVAL_WINDOW_S, oldest first: (time s, job id, the
        # needs of a one-GPU job as (type, GiB, share) or None), and each one's time (a one-GPU
        # job's pruned with it; a job of several GPUs' kept: it bounds how long the price holds it)
        self._arrivals: deque[tuple[float, Hashable, _Needs | None]] = deque()
        self._arrived: dict[Hashable, float] = {}
        self._arriving: dict[_Needs, int] = {}  # one-GPU needs -> count in _arrivals
        #: called with ``(time s, job)`` when the reserve phase first meets a job under
        #: ``price_arrivals``: a driver that keeps the arrival log across its restarts records it
        #: there (the extender: :mod:`iadeep.extender._arrivals`) and gives it back with
        #: :meth:`remember_arrivals`. It sees what is noted; it decides nothing.
        self.on_arrival: Callable[[float, JobRequest], None] | None = None
        self._preempted: dict[Hashable, float] = {}  # job (ClusterView.job_key) -> delay its preemptions have cost it so far (s)
        self._soonest: list[int] = []  # GPUs that freed up soonest when last computed: a hint (_wait_within)

    def predicted(self) -> np.ndarray:
        """Predicted pairwise normalised throughput, shape ``(n_types, n_types)``."""
        return self.model.norm if self.predictor == "oracle" else self.learner.matrix()

    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """1 for a free GPU; for a shared one half the predicted pair sum (in [0, 1])."""
        util = np.ones(view.n_gpus)
        occupied = view.occupied
        occ_types = np.where(occupied, view.slot_types, 0)
        pred = self.predicted()
        a = row_prod(np.where(occupied, pred[job.type_id, occ_types], 1.0))
        b = row_prod(np.where(occupied, pred[occ_types, job.type_id], 1.0))
        shared = view.njobs > 0
        util[shared] = 0.5 * (a[shared] + b[shared]) * 0.9  # a free GPU always ranks above sharing
        return util

    def expected_wait_s(self, job: JobRequest, view: ClusterView, n_free: int, free: np.ndarray | None = None) -> float:
        """Expected time until ``job`` could start alone (s): GPUs free up in order of remaining time.

        The ``need = max(num_gpus - n_free, 1) + gpus_ahead``-th GPU to free up, the pending pods
        ahead taking the first ones. For a job of several GPUs whose pods each need one node
        (``job.pod_gpus``) and given ``free`` (its eligible free GPUs, boolean of shape ``(G,)``),
        at least the time by which its pods fit: :meth:`_pods_ready_s`.
        """
        busy = view.njobs > 0
        left = view.gpu_free_in_s[busy]
        if len(left) == 0:
            return 0.0
        need = max(job.num_gpus - n_free, 1) + job.gpus_ahead
        kth = min(need, len(left)) - 1
        if free is not None and job.pod_gpus and job.num_gpus > 1:
            return max(float(np.partition(left, kth)[kth]), self._pods_ready_s(job, view, free, busy, left))
        left.partition(kth)  # in place (left is a copy): np.partition's value, without a second copy
        return float(left[kth])

    @staticmethod
    def _pods_ready_s(job: JobRequest, view: ClusterView, free: np.ndarray, busy: np.ndarray, left: np.ndarray) -> float:
        """Time (s) until the ``num_gpus / pod_gpus`` pods of ``job`` fit, each on one node.

        A node's GPUs become available in order of remaining time (its ``free`` GPUs at 0, its busy
        ones at :attr:`ClusterView.gpu_free_in_s`), but the ``gpus_ahead`` busy GPUs of the whole
        cluster that free up first are the pending pods' ahead of it; the node holds its ``j``-th
        pod once its ``j * pod_gpus``-th GPU is available. The answer is the pods' count-th
        smallest such time over all nodes (the latest one when the cluster holds fewer).
        Args: ``busy`` the GPUs holding a job, ``left`` their times until free (``gpu_free_in_s[busy]``).
        """
        p, n_pods = job.pod_gpus, job.num_gpus // job.pod_gpus
        busy_ids = busy.nonzero()[0]
        if job.gpus_ahead:  # taken by the pods ahead: not available to this job within its wait
            keep = np.argsort(left, kind="stable")[job.gpus_ahead:]
            busy_ids, left = busy_ids[keep], left[keep]
        free_ids = free.nonzero()[0]
        # every available GPU as (node, time until available), sorted by node, then time; a GPU's
        # rank on its node says which pod it completes (the j-th pod at rank j * p - 1)
        node = np.concatenate([view.gpu_node.take(free_ids), view.gpu_node.take(busy_ids)])
        when = np.concatenate([np.zeros(len(free_ids)), left])
        order = np.lexsort((when, node))
        node, when = node[order], when[order]
        first = np.flatnonzero(np.concatenate([[True], node[1:] != node[:-1]]))  # each node's first position
        rank = np.arange(len(node)) - np.repeat(first, np.diff(np.append(first, len(node))))
        ready = when[rank % p == p - 1]
        if not len(ready):  # no node holds a pod beside the pods ahead: the GPU count alone decides
            return 0.0
        kth = min(n_pods, len(ready)) - 1
        return float(np.partition(ready, kth)[kth])

    def _wait_within(self, job: JobRequest, view: ClusterView, n_free: int, factor: int, ceiling: float) -> bool:
        """Whether ``expected_wait_s(job, view, n_free) * factor <= ceiling`` follows from the GPUs
        remembered as freeing up soonest (:meth:`_remember_soonest`) alone; False: not shown.

        The expected wait is the ``need``-th smallest time until free over the busy GPUs, so it is
        at most the ``need``-th smallest over any ``need`` of them: if ``need`` remembered GPUs
        are busy and each one's time until free passes, the wait passes (``x * factor`` is
        monotone in ``x``). Each time until free is :attr:`ClusterView.gpu_free_in_s`'s value,
        computed for that GPU alone with the same IEEE operations on plain floats. The GPUs are
        a hint: any GPUs give a correct answer (a GPU idle now or outside the view is skipped;
        a NaN gives False), the soonest ones give True more often.
        """
        need = max(job.num_gpus - n_free, 1) + job.gpus_ahead
        if need > len(self._soonest):
            return False
        slots, n_gpus, now = view.slots, view.n_gpus, view.now_s
        work, rate, updated = view.job_work_left_s.item, view.job_rate.item, view.job_updated_s.item
        passed = 0
        for g in self._soonest:
            if g >= n_gpus:
                continue
            busy, free_in = False, 0.0  # the row maximum, empty slots at 0
            for h in slots[g].tolist():
                if h < 0:
                    continue
                busy = True
                r = rate(h)
                left = work(h) - r * (now - updated(h))
                x = max(left, 0.0) / max(r, 1e-6)  # np.maximum's values for numbers (a NaN stays NaN)
                if x != x:
                    return False
                if x > free_in:
                    free_in = x
            if busy and free_in * factor <= ceiling:
                passed += 1
                if passed >= need:
                    return True
        return False

    def _remember_soonest(self, view: ClusterView) -> None:
        """Remember the (up to) 8 busy GPUs of ``view`` that free up soonest, soonest first, for
        :meth:`_wait_within`."""
        busy = (view.njobs > 0).nonzero()[0]
        free_in = view.gpu_free_in_s[busy]
        if len(busy) > _SOONEST:
            pick = free_in.argpartition(_SOONEST - 1)[:_SOONEST]
            busy, free_in = busy[pick], free_in[pick]
        self._soonest = busy[free_in.argsort(kind="stable")].tolist()

    def _place(self, job: JobRequest, view: ClusterView, mask: np.ndarray, reason: np.ndarray) -> Placement | Wait:
        """Free GPUs first; otherwise co-locate only where it beats waiting (module docstring)."""
        njobs = view.njobs
        k = job.num_gpus
        if self.price_arrivals and job.job_id not in self._arrived:
            self._note_arrival(job, view.now_s)
        if not np.count_nonzero(mask):  # no eligible GPU (the most common wait): no free or shareable ones to look for
            if self.waive_lockout and k == 1 and self._avoiding[job.type_id]:
                waived = self._place_locked_out(job, view, reason)
                if waived is not None:
                    return waived
            return Wait(job.job_id, _wait_reason(job, mask, reason))
        share_used = view.gpu_share_used_milli
        if k == 1 and job.gpu_milli < 1000.0 and share_used is not None:  # a share (NaN compares False: no share)
            packed = mask & (share_used > 0.0)
            if packed.any():  # best fit: the GPU with the least share left (module docstring: shares)
                g = int(np.where(packed, share_used, -1.0).argmax())
                return Placement(job.job_id, (g,), "packed beside other shares (best fit; shares do not interfere)")
        free = mask & (njobs == 0)
        n_free = int(np.count_nonzero(free))
        if n_free >= k:
            # one GPU: choose_gpus's pick among equal utilities is the lowest id, the first free one
            gpus = (int(free.argmax()),) if k == 1 else choose_gpus(k, free, np.ones(view.n_gpus), view,
                                                                   pod_gpus=job.pod_gpus)
            if gpus is not None:
                if k > 1 and self.price_arrivals:  # the arrival price against holding (module docstring)
                    blocked = self.arrival_cost_s(job, view, gpus)
                    if blocked > 0.0:
                        hold = self.expected_wait_s(job, view, 0)
                        if blocked > hold * (1 + job.jobs_behind):
                            return _waits(job, hold)
                return Placement(job.job_id, gpus, "free GPU")
        shared = (mask & (njobs > 0)).nonzero()[0]  # flatnonzero of a 1-D array, without its Python wrappers
        if n_free >= k and not len(shared):  # free GPUs enough in number, not as pods on single nodes
            return Wait(job.job_id, pod_wait_reason(job))
        if n_free + len(shared) < k:
            return Wait(job.job_id, _wait_reason(job, mask, reason))
        first = view.slots[:, 0].take(shared)  # the occupant of each shareable GPU (slot contract of ClusterView)
        # change of the two jobs' summed completion times versus both running on as now; waiting
        # ``W`` for a free GPU would add ``W`` to it (the new job starts later)
        a, b, k_p, t_new, t_part, own, part = self._pair_terms(job.type_id, job.remaining_s, first, view)
        if self.queue_pressure and job.jobs_queued > 0:
            # the queue's share (module docstring: queue pressure): while both run, the pair does
            # a + k_p b GPU-seconds of work a second on the partner's GPUs instead of k_p, and each
            # queued job starts that much earlier, spread over the cluster's GPUs
            gained = a - k_p * (1.0 - b)
            np.maximum(gained, 0.0, out=gained)  # a pair below the partner alone: priced by its delays
            part = part - (job.jobs_queued / view.n_gpus) * gained * np.minimum(t_new, t_part)
        if job.pod_gpus > 1 and k > 1:  # pods on single nodes: the GPUs are chosen as pods, then priced
            return self._place_pods(job, view, free, n_free, shared, own, part, a + b >= 1.0)
        need = k - n_free
        if self.partner_once and need > 1:  # a partner priced once, spread over its GPUs taken (module docstring)
            _, inv, counts = np.unique(first, return_inverse=True, return_counts=True)
            part = part / np.minimum(counts[inv], need)
        # A gang with nobody blocked behind it: its own delay (that of its slowest shared GPU) and
        # its wait count once, not once per shared GPU (module docstring: a gang's delay and wait).
        once = need > 1 and job.jobs_behind <= 0
        base = own + part
        # A pair predicted to progress less than taking turns on the GPU (a + b < 1) is formed for
        # the two jobs' own sake, and for the queue's only when the head would otherwise leave
        # free GPUs idle (module docstring: a gang head stuck behind bad partners).
        good = a + b >= 1.0
        if once:
            order, cost = _gang_choice(own, np.where(good, part, np.inf), need)
        else:
            good_base = np.where(good, base, np.inf)
            order = _smallest(good_base, need)
            cost = float(good_base[order[0]] if need == 1 else good_base[order].sum())  # a one-element sum is the element
        wait = None
        if cost < 0:  # sharing beats even an immediate free GPU: no need to estimate the wait
            gain = -cost
            reason = _saving(gain)
        else:
            # Waiting also holds back the queue: under FIFO no job behind starts before the head,
            # so each of them starts up to ``W`` later (module docstring: all of them count).
            wait = self.expected_wait_s(job, view, n_free, free)
            credit = self._wait_credit(job, wait, good, need, n_free)
            if once:  # the gang's wait once, spread over its shared GPUs (blocked = 0 here)
                order, value = _gang_choice(own, part - credit / need, need)
                gain = -value
            else:
                delta = base - credit
                order = _smallest(delta, need)
                gain = -float(delta[order[0]] if need == 1 else delta[order].sum())
            if gain <= 0:
                return _waits(job, wait)
            reason = _saving(gain, wait)
        best = shared[order]
        if k == 1:  # one GPU, the one chosen (n_free = 0 here): choose_gpus's pick without its utilities
            return Placement(job.job_id, (int(best[0]),), reason)
        chosen = np.zeros(view.n_gpus, dtype=bool)
        chosen[best] = True
        chosen |= free
        # no pod rule, or pods of one GPU (jobs of pods of several: _place_pods): any GPUs, never None
        gpus = choose_gpus(k, chosen, self.utility(job, view, chosen), view, pod_gpus=job.pod_gpus)
        if self.price_arrivals:  # the arrival price on top of the pair prices (module docstring)
            blocked = self.arrival_cost_s(job, view, gpus)
            if blocked >= gain:
                return _waits(job, self.expected_wait_s(job, view, n_free, free) if wait is None else wait)
        return Placement(job.job_id, gpus, reason)

    def _note_arrival(self, job: JobRequest, now_s: float) -> None:
        """Remember that ``job`` was first asked about at ``now_s`` (s), with its needs when it takes
        one GPU, and forget the arrivals older than :data:`ARRIVAL_WINDOW_S`."""
        self._forget_arrivals(now_s)
        needs = _needs(job)
        self._arrivals.append((now_s, job.job_id, needs))
        self._arrived[job.job_id] = now_s
        if needs is not None:
            self._arriving[needs] = self._arriving.get(needs, 0) + 1
        if self.on_arrival is not None:
            self.on_arrival(now_s, job)

    def remember_arrivals(self, arrivals: Iterable[tuple[float, JobRequest]]) -> int:
        """Take back arrivals noted before (a restarted driver's log: ``(time s, job)`` pairs, as
        :attr:`on_arrival` was given them, in any order): each job is remembered at the earliest
        of its times given and its own (a job met again while the log could not be read keeps
        the earlier meeting), among the others in order of time, as if the reserve phase had
        met it then. Nothing is forgotten here (the next arrival noted forgets what is then too
        old). Returns how many jobs it took back or moved earlier."""
        known = self._arrived
        taken: dict[Hashable, tuple[float, Hashable, _Needs | None]] = {}
        earlier: dict[Hashable, float] = {}
        for t, job in sorted(arrivals, key=lambda a: a[0]):  # a job given twice: its first time
            job_id = job.job_id
            if job_id in taken or job_id in earlier:
                continue
            if job_id not in known:
                taken[job_id] = (t, job_id, _needs(job))
            elif t < known[job_id]:
                earlier[job_id] = t
        if not taken and not earlier:
            return 0
        entries = [(earlier.get(job_id, t), job_id, needs) for t, job_id, needs in self._arrivals] if earlier \
            else list(self._arrivals)
        # stable: equal times keep their order
        self._arrivals = deque(sorted([*entries, *taken.values()], key=lambda e: e[0]))
        known.update(earlier)
        for t, job_id, needs in taken.values():
            known[job_id] = t
            if needs is not None:
                self._arriving[needs] = self._arriving.get(needs, 0) + 1
        return len(taken) + len(earlier)

    def _forget_arrivals(self, now_s: float) -> None:
        """Forget the arrivals first asked about before ``now_s - ARRIVAL_WINDOW_S`` (a job of
        several GPUs keeps its time in ``_arrived``: it bounds how long the price holds it)."""
        arrivals, arrived, arriving = self._arrivals, self._arrived, self._arriving
        while arrivals and arrivals[0][0] < now_s - ARRIVAL_WINDOW_S:
            _, gone, one = arrivals.popleft()
            if one is not None:
                left = arriving[one] - 1
                if left:
                    arriving[one] = left
                else:
                    del arriving[one]
                if arrived.get(gone, now_s) < now_s - ARRIVAL_WINDOW_S:
                    del arrived[gone]

    def arrival_cost_s(self, job: JobRequest, view: ClusterView, gpus: tuple[int, ...]) -> float:
        """What the one-GPU jobs expected to arrive while ``job`` holds ``gpus`` would wait
        (job-seconds) because no GPU would have room for them: ``lambda_b T**2 / 2``.

        ``T`` is the job's remaining work at dedicated speed (s), the time it holds the GPUs;
        ``lambda_b`` (jobs/s) the rate of the one-GPU jobs first asked about within
        :data:`ARRIVAL_WINDOW_S` (their count less one, over the time since the oldest arrival
        remembered: a single arrival is no stream) whose needs (type, memory, share) would find
        no eligible GPU once ``job`` holds ``gpus``: none among the others (:meth:`eligible` on
        ``view``) and, for
        a whole-GPU job, none beside ``job`` on ``gpus`` (below the co-location limit, memory left
        beside both, a pair that fits and is not banned); a share never sits beside a whole-GPU
        pod. A Poisson stream of rate ``lambda`` meeting a blocked period of length ``T`` waits
        ``lambda T**2 / 2`` in all (each arrival waits the rest of the period, ``T / 2`` on
        average). 0 when an arrival would find room, when fewer than one is expected while the job
        runs (``lambda_b T < 1``: no stream to block), and once ``job`` has waited
        :data:`ARRIVAL_HOLD_AT_MOST` ``x T`` since it was first asked about: a steady stream would
        meet the same blocked period whenever the job starts, so holding it pays only until a
        lull, and never makes its completion time more than three times ``T``. Both drivers
        remember the arrivals the same way: a job is noted the first time the reserve phase is
        asked about it.

        Args:
            job: the job of several GPUs asking.
            view: the cluster now.
            gpus: the GPUs it would take.
        """
        now = view.now_s
        if now - self._arrived.get(job.job_id, now) >= ARRIVAL_HOLD_AT_MOST * job.remaining_s:
            return 0.0
        # the arrivals within the window: the counts less the expired ones not yet forgotten (they
        # are forgotten when the next arrival is noted, so that asking changes nothing)
        recent = dict(self._arriving)
        oldest = None
        for t, _, needs in self._arrivals:  # in order of arrival
            if t >= now - ARRIVAL_WINDOW_S:
                oldest = t
                break
            if needs is not None:
                recent[needs] -= 1
        recent = {needs: n for needs, n in recent.items() if n > 0}
        if not recent or oldest is None:
            return 0.0
        span = max(now - oldest, 3600.0)
        if (sum(recent.values()) - 1) / span * job.remaining_s < 1.0:  # not one expected even if all blocked
            return 0.0
        taken = np.zeros(view.n_gpus, dtype=bool)
        taken[list(gpus)] = True
        njobs, left = view.njobs, view.gpu_mem_total_gib - view.gpu_mem_used_gib
        beside_ok = taken & (njobs + 1 < self.limit)
        blocked = 0
        for (t, mem, milli), count in recent.items():
            mask = self.eligible(JobRequest(-1, "", t, 1, mem, 0.0, gpu_milli=math.nan if milli is None else milli), view)[0]
            if (mask & ~taken).any():
                continue  # room on a GPU the job does not take
            if milli is None and self.model.fits[t, job.type_id] and not self.avoided[t, job.type_id] and \
                    (mask & beside_ok & (left - job.mem_gib >= mem - 1e-9)).any():
                continue  # room beside one of the job's pods
            blocked += count
        if not blocked:
            return 0.0
        # the rate over the time since the oldest arrival remembered, that one not counted (the
        # stream is observed from it: n events after it over that time; at least an hour)
        rate = (blocked - 1) / span
        if rate * job.remaining_s < 1.0:  # not one arrival expected while it runs: no stream to block
            return 0.0
        return rate * job.remaining_s ** 2 / 2.0

    def lockout_s(self, type_id: int, view: ClusterView, *, exclude: int = -1, also: tuple[int, ...] = ()) -> float:
        """How long a job of ``type_id`` is locked out by the bans: the time (s) until some GPU of
        the cluster holds no job of a type banned beside it, from the banned jobs' remaining work at
        dedicated speed (a lower bound where a partner runs slower; the extender's view has no
        rates, so both drivers use the same formula); 0 when one holds none now (a GPU without a
        banned partner, full or not, ends a lockout as its jobs leave).

        Args:
            exclude: a handle not counted (the job itself, when it is on a GPU).
            also: types counted as banned beside ``type_id`` besides the policy's bans (an undo
                about to ban them).
        """
        banned_t = self.avoided[type_id]
        if also:
            banned_t = banned_t.copy()
            banned_t[list(also)] = True
        slots = view.slots
        banned = view.occupied & banned_t[view.slot_types]
        if exclude >= 0:
            banned &= slots != exclude
        if not banned.any(axis=1).all():
            return 0.0
        hold = np.where(banned, view.remaining_s(np.where(banned, slots, 0)), 0.0)
        return float(hold.max(axis=1).min())

    def pair_cost_s(self, type_id: int, remaining_s: float, partners: np.ndarray, view: ClusterView, *,
                    alone: bool = False) -> np.ndarray:
        """The change of completion times (job-seconds) of a job of ``type_id`` with
        ``remaining_s`` of work co-located with each of ``partners`` (handles, shape ``(P,)``,
        each alone on its GPU), against both running as now: ``d_n + d_p`` of the module
        docstring (:func:`finish_times`, a gang partner at its slowest GPU), shape ``(P,)``.
        ``alone``: against each partner at dedicated speed (the lockout rule's price: the
        extender's view has no rates, so both drivers use the same formula)."""
        own, part = self._pair_terms(type_id, remaining_s, partners, view, alone=alone)[5:]
        return own + part

    def _pair_terms(self, type_id: int, remaining_s: float, partners: np.ndarray, view: ClusterView, *,
                    alone: bool = False) -> tuple[np.ndarray, ...]:
        """The pricing terms of a job of ``type_id`` beside each of ``partners`` (handles, shape
        ``(P,)``, each alone on its GPU), each of shape ``(P,)``: ``a``, ``b`` (predicted normalised
        throughputs, floored at 1e-3), ``k_p`` (the partners' GPUs), the finish times ``t_new``,
        ``t_part`` (s from now, :func:`finish_times`), the job's own delay ``own = t_new - R_n`` and
        the partner's ``part = k_p (t_part - R_p / rate_p)`` (job-seconds): a partner at its current
        rate (``alone``: at dedicated speed), a gang already slowed to ``rate`` running at
        ``min(b, rate)``; with ``slowdown_ends``, a gang slowed by other jobs (the last leaving
        at ``tau``, :meth:`_slowed_until`) runs at ``min(b, rate)`` until ``tau``, then at ``b``
        until ``t_new``, and its delay is measured against running at ``rate`` until ``tau`` and
        at dedicated speed after (module docstring)."""
        pred = self.predicted()
        # gathers with take and in-place maxima: the values of the indexing and np.maximum they
        # replace, with fewer temporaries (one co-location decision makes some 40 array operations)
        occ_t = view.job_type.take(partners)
        a = pred[type_id].take(occ_t)
        np.maximum(a, 1e-3, out=a)
        b = pred[:, type_id].take(occ_t)
        np.maximum(b, 1e-3, out=b)
        # a gang partner holds all its GPUs while it is slowed: its delay weighs its GPU count
        k_p = view.job_num_gpus.take(partners)
        if alone:
            rate = np.ones(len(partners))
        else:
            rate = view.job_rate.take(partners)
            np.maximum(rate, 1e-6, out=rate)
        r_p = view.remaining_s(partners)
        r_p_now = r_p / rate  # the partner's time left at that rate
        t_new, t_part = finish_times(remaining_s, r_p_now, a, np.minimum(b, rate) / rate)
        part = k_p * (t_part - r_p_now)
        if self.slowdown_ends and not alone:
            slowed = ((k_p > 1) & (rate < 1.0)).nonzero()[0]
            if len(slowed):
                part = part.copy()
                gangs, of = np.unique(partners.take(slowed), return_inverse=True)  # a gang is the first job on each of its GPUs
                tau = np.array([self._slowed_until(h, view) for h in gangs.tolist()]).take(of)
                on = tau > 0.0
                if on.any():
                    i = slowed[on]
                    tau, r, rp, bb, tn = tau[on], rate.take(i), r_p.take(i), b.take(i), t_new.take(i)
                    without = _finish_in_phases(rp, tau, r, 0.0, 1.0)
                    first = tn <= tau  # the new job leaves before the gang's other partners
                    with_ = np.where(first, _finish_in_phases(rp, tn, np.minimum(r, bb), tau - tn, r),
                                     _finish_in_phases(rp, tau, np.minimum(r, bb), tn - tau, bb))
                    part[i] = k_p.take(i) * (with_ - without)
        return a, b, k_p, t_new, t_part, t_new - remaining_s, part

    @staticmethod
    def _slowed_until(h: int, view: ClusterView) -> float:
        """When (s from now) the last other job on the GPUs of job ``h`` leaves, at its current
        rate; 0 when none shares them."""
        on = (view.slots == h).any(axis=1)
        others = view.slots[on]
        others = others[(others >= 0) & (others != h)]
        if not len(others):
            return 0.0
        return float((view.remaining_s(others) / np.maximum(view.job_rate.take(others), 1e-6)).max())

    def _place_locked_out(self, job: JobRequest, view: ClusterView, reason: np.ndarray) -> Placement | None:
        """A one-GPU job with no eligible GPU: the GPU holding one job whose only bar is a ban,
        when the job is locked out (:meth:`lockout_s`) longer than the cheapest such pair costs
        (:meth:`pair_cost_s` at dedicated speed, as :meth:`keeps` prices it, so a pair placed is
        a pair kept); ``None``: it waits (module docstring, reserve step 0)."""
        cand = ((reason == _POLICY) & (view.njobs == 1)).nonzero()[0]  # a pair (only pairs are priced)
        if not len(cand):
            return None
        lock = self.lockout_s(job.type_id, view)
        if lock <= 0:
            return None
        cost = self.pair_cost_s(job.type_id, job.remaining_s, view.slots[:, 0].take(cand), view, alone=True)
        i = int(cost.argmin())
        if not cost[i] < lock:
            return None
        return Placement(job.job_id, (int(cand[i]),), f"ban set aside: {_LOCKED_OUT} ({lock:.0f}s), "
                                                        f"the pair costs {float(cost[i]):.0f} job-seconds")

    def keeps(self, evict: int, avoid: tuple[int, ...], view: ClusterView) -> bool:
        """Whether an undo's newest job (handle ``evict``, alone with its partner on one GPU) stays:
        with the undo's ban in force it would be locked out (:meth:`lockout_s`) longer than its
        pair costs beside its partner at dedicated speed (:meth:`pair_cost_s`), the test
        :meth:`reserve` places a locked-out job by. Asked by the driver when it carries the undo
        out (the simulator at the session's end, the extender before it evicts).
        ``avoid``: the undo's types in placement order, the newest's last. False for a job of
        several GPUs or with ``waive_lockout`` off."""
        if not self.waive_lockout or not 0 <= evict < len(view.job_num_gpus) or int(view.job_num_gpus[evict]) != 1:
            return False
        on = (view.slots == evict).any(axis=1).nonzero()[0]
        if len(on) != 1 or view.njobs.item(int(on[0])) != 2:  # one GPU, one partner (only pairs are priced)
            return False
        partners = np.array([h for h in view.occupants(int(on[0])).tolist() if h != evict][:1], dtype=np.int64)
        if not len(partners):
            return False
        lock = self.lockout_s(avoid[-1], view, exclude=evict, also=tuple(avoid[:-1]))
        if lock <= 0:
            return False
        cost = self.pair_cost_s(int(view.job_type[evict]), float(view.remaining_s(np.array([evict]))[0]), partners, view,
                                alone=True)
        return bool(cost[0] < lock)

    def _wait_credit(self, job: JobRequest, wait: float, good: np.ndarray, need: int, n_free: int) -> np.ndarray:
        """What waiting ``wait`` s costs, per shared GPU of the choice (job-seconds; shape of ``good``):
        ``W (1 + B / need)`` for a pair not below taking turns (``good``), the job's own wait only
        for one below, the queue's too when the job would leave free GPUs idle (module docstring)."""
        blocked = job.jobs_behind
        bad_weight = (1.0 + blocked / need if n_free else 1.0) if self.bad_pairs_when_waiting else 0.0
        return wait * np.where(good, 1.0 + blocked / need, bad_weight)

    def _place_pods(self, job: JobRequest, view: ClusterView, free: np.ndarray, n_free: int, shared: np.ndarray,
                    own: np.ndarray, part: np.ndarray, good: np.ndarray) -> Placement | Wait:
        """The co-location rule (module docstring) for a job of pods of ``p = job.pod_gpus > 1``
        GPUs, each pod on one node.

        The GPUs are chosen first, as pods (:func:`~iadeep.policy._base.choose_gpus`): the fewest
        shared GPUs, free ones first, then the cheapest ``own + part`` of a pair not below taking
        turns, pairs below it last. The rule then prices exactly the shared GPUs chosen (``need``
        of them) as it prices the cheapest ``need`` shared GPUs of a job without pods, so free
        GPUs on one node and shareable ones on another are never priced as one pod.

        Args: ``free`` the eligible free GPUs (shape ``(G,)``, boolean), ``n_free`` their count;
        ``shared`` the eligible occupied GPU ids, shape ``(S,)``, and per position of ``shared``
        the job's own delay ``own``, the partner's ``part`` (job-seconds) and ``good``
        (``a + b >= 1``).
        """
        base = own + part
        # ranks as utilities (higher first): a free GPU 0, a good shared GPU -(1e12 + base), a bad one
        # -(2e12 + base); the delays are clipped far below the steps, so fewer shared GPUs always win
        rank = np.zeros(view.n_gpus)
        rank[shared] = -(np.where(good, 1e12, 2e12) + np.clip(base, -1e11, 1e11))
        cand = free.copy()
        cand[shared] = True
        gpus = choose_gpus(job.num_gpus, cand, rank, view, pod_gpus=job.pod_gpus)
        if gpus is None:
            return Wait(job.job_id, pod_wait_reason(job))
        chosen = np.array(gpus)
        pos = np.searchsorted(shared, chosen[view.njobs[chosen] > 0])  # the shared ones, as positions of ``shared``
        need = len(pos)
        if not need:  # free GPUs alone make the pods (the caller tried them first: not reached)
            return Placement(job.job_id, gpus, "free GPU")
        once = need > 1 and job.jobs_behind <= 0  # a gang's delay and wait once (module docstring)
        if self.partner_once and need > 1:  # each partner's price once, however many of its GPUs are shared
            _, at = np.unique(view.slots[:, 0].take(shared.take(pos)), return_index=True)
            cost = float(own[pos].max() if once else own[pos].sum()) + float(part[pos][at].sum())
        else:
            cost = float(own[pos].max() + part[pos].sum()) if once else float(base[pos].sum())
        # the arrival price (module docstring) only adds to the cost: computed where it could turn
        # a placement into a wait, so the many waits never pay for it
        blocked = None
        if cost < 0 and good[pos].all():  # sharing beats even an immediate free GPU
            blocked = self.arrival_cost_s(job, view, gpus) if self.price_arrivals else 0.0
            if cost + blocked < 0:
                return Placement(job.job_id, gpus, _saving(-(cost + blocked)))
        wait = self.expected_wait_s(job, view, n_free, free)
        credit = self._wait_credit(job, wait, good[pos], need, n_free)
        gain = float(credit.sum() / need if once else credit.sum()) - cost
        if gain > 0 and self.price_arrivals:
            gain -= self.arrival_cost_s(job, view, gpus) if blocked is None else blocked
        return Placement(job.job_id, gpus, _saving(gain, wait)) if gain > 0 else _waits(job, wait)

    def post_filter(self, job: JobRequest, view: ClusterView, wait: Wait) -> Preemption | Wait:
        """Head-of-line preemption (module docstring), else ``wait`` (its ``expected_wait_s``: the
        expected wait when :meth:`reserve` computed it).

        A wait without ``expected_wait_s`` does not depend on time (too few eligible GPUs, a
        question of which jobs sit where); the returned wait then carries the queueing hint
        :attr:`~iadeep.policy.Wait.holds_up_to_behind`. As time passes with the cluster unchanged,
        the expected wait ``W`` shrinks (every GPU's time until free falls with the clock), a
        victim's hold time shrinks and its preemption budget only shrinks (its charges never fall,
        its remaining work falls as it runs): none of that turns
        this rule from waiting to preempting; only more jobs behind (a larger ``B``) can (with
        ``preempt_unblocked`` too: ``B = 0`` is the same rule).
        """
        wait_s = wait.expected_wait_s
        stable = wait_s is None

        def holds(behind: int) -> Wait:
            return Wait(wait.job_id, wait.reason, behind) if stable else wait  # dataclasses.replace's value, cheaper

        if not self.preempt or job.gpus_ahead:
            return holds(ANY_BEHIND)
        if job.jobs_behind <= 0 and not self.preempt_unblocked:
            return holds(0)
        slots = view.slots
        njobs = view.njobs
        alone = (njobs == 1).nonzero()[0]
        if len(alone) == 0:
            return holds(ANY_BEHIND)
        free = self.eligible(job, view)[0] & (njobs == 0)
        n_free = int(np.count_nonzero(free))
        run_s = job.remaining_s  # the head at dedicated speed on free GPUs
        c = self.checkpoint_cost_s
        # the jobs behind that could start once the head is out of the way: as many as there are
        # GPUs with room for one more job (the same notion of "blocked" as the placement rule)
        # (with pairs, the GPUs holding one job)
        roomy = len(alone) if self.limit == 2 else int(np.count_nonzero((njobs > 0) & (njobs < self.limit)))
        b = min(job.jobs_behind, roomy)
        ceiling = (run_s + c) + run_s * b
        if wait_s is None:
            # Most calls end at the check below (93 % on the first 20,000 jobs). An upper bound of
            # the expected wait that passes it decides the same without every GPU's time until free
            # (measured: that computation was 60 us of a 100 us call).
            if not (job.pod_gpus and job.num_gpus > 1) and self._wait_within(job, view, n_free, 1 + b, ceiling):
                return holds(ANY_BEHIND if job.jobs_behind >= roomy else job.jobs_behind)
            w = self.expected_wait_s(job, view, n_free, free)
            self._remember_soonest(view)
        else:
            w = wait_s
        if w * (1 + b) <= ceiling:  # decided before the per-GPU loop below
            return holds(ANY_BEHIND if job.jobs_behind >= roomy else job.jobs_behind)
        owner = slots[alone, 0]
        # each lone job's remaining work and hold time, for all of them at once (the same values as
        # one by one); a job that frees its GPUs sooner than the head would is never preempted, so
        # only the others are looked at below (measured: a call that reached the loop took 0.5-1.1 ms
        # when it went over every lone GPU)
        left = view.remaining_s(owner)
        hold = left / np.maximum(view.job_rate.take(owner), 1e-3)
        looked = (~(hold <= run_s + c)).nonzero()[0]
        # a victim must sit alone on every one of its GPUs (so that they all free up)
        gpus_of: dict[int, list[int]] = {}
        hold_of: dict[int, tuple[float, float]] = {}
        alone_ids, owners, lefts, holds_s = alone.tolist(), owner.tolist(), left.tolist(), hold.tolist()
        for i in looked.tolist():  # a job's GPUs are all here or none: its hold time decides
            h = owners[i]
            gpus_of.setdefault(h, []).append(alone_ids[i])
            hold_of[h] = (lefts[i], holds_s[i])
        best: tuple[int, float, int] | None = None  # (GPUs, -hold_s, handle): fewest GPUs, then longest hold
        usable = fits_when_empty(job, view)  # a freed GPU must suit the head (memory, GPU model)
        for h, gs in gpus_of.items():
            if len(gs) != int(view.job_num_gpus[h]) or n_free + len(gs) < job.num_gpus:
                continue
            if not usable[gs].all():
                continue
            left_s, hold_s = hold_of[h]
            if self._preempted.get(view.job_key(h), 0.0) + run_s + c > left_s:  # the victim's preemption budget (docstring)
                continue
            if best is None or (len(gs), -hold_s, h) < best:
                best = (len(gs), -hold_s, h)
        if best is None:  # no victim qualifies: more jobs behind would not make one
            return holds(ANY_BEHIND)
        victim = best[2]
        freed = free.copy()
        freed[gpus_of[victim]] = True
        gpus = choose_gpus(job.num_gpus, freed, np.ones(view.n_gpus), view, pod_gpus=job.pod_gpus)
        if gpus is None:  # the GPUs freed do not split into the head's pods: no preemption
            return wait
        if self.price_arrivals and job.num_gpus > 1 and self.arrival_cost_s(job, view, gpus) > w * (1 + b) - ceiling:
            return wait  # the arrivals it would leave no room for cost more (module docstring); it changes with time
        key = view.job_key(victim)  # the same job in later views (the extender renumbers handles)
        self._preempted[key] = self._preempted.get(key, 0.0) + run_s + c
        return Preemption(job.job_id, gpus, (victim,), f"preempted a job holding {best[0]} GPU(s) for {-best[1]:.0f}s: "
                          f"the head would wait {w:.0f}s with {b} job(s) behind it")

    def tune(self, gpu: int, view: ClusterView, measure: Measure) -> TuningDecision | None:
        """Tune batch sizes of co-located jobs; learn from every measurement; undo a co-location
        whose best measured progress is below ``undo_below`` (:func:`iadeep.policy.undo_rule`: the
        decision names the newest job to evict and the types to ban, which the driver applies when
        the session ends)."""
        if view.njobs.item(gpu) < 2 or _shares_only(gpu, view):  # nothing to tune (module docstring)
            return super().tune(gpu, view, measure)
        decision = self.tuner.tune(gpu, view, self.predicted, measure)  # computed only if a ranking needs it
        if self.learner.types == self.model.types:  # a type id is the learner's position: no sample objects
            observe = self.learner.observe_ids
            for _, _, t, p, y in decision.samples:
                observe(t, p, y)
        else:  # a learner restored with other types: by type
            types = self.model.types
            for _, _, t, p, y in decision.samples:
                self.learner.observe(InterferenceSample(types[t], types[p], y))
        # even the best configuration progresses less than taking turns would: undo (the rule both
        # drivers share; the driver bans the types when the session ends, and evicts unless
        # keeps() says the newest job stays)
        occupants = view.occupants(gpu).tolist()  # placement order (ClusterView's slot contract)
        undo = undo_rule(decision.progress, occupants, [int(view.job_base_type[h]) for h in occupants],  # as submitted
                         self.undo_below)
        if undo is not None:
            return replace(decision, type_ids={}, evict=(undo.evict,), avoid=undo.avoid, reason=undo.reason)
        return decision
