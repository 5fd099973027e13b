"""Emulated GPU execution: how far each running job has got, at the rate its co-located set allows.

Notations: a job's *work* is seconds of run time on dedicated GPUs at its submitted batch size
(the trace's duration; pod annotation ``iadeep.io/duration-s``), as in the simulator. Emulated
time runs ``speedup`` times faster than wall time. A job on GPU ``g`` with co-located set ``S``
(the jobs on ``g``) progresses at

    r_g = min(n(type, S) x gain, 1)    work seconds per emulated second,

where ``n`` is the interference model's normalised throughput of the job's type among the types
of ``S`` (:meth:`InterferenceModel.normalised`: Gavel's measured pairs, slowdowns compounding
beyond two) and ``gain`` the goodput gain of a changed batch size (:func:`iadeep.goodput.progress`;
1 while the job runs at its submitted batch size). A gang (multi-GPU job) advances at the rate of
its slowest GPU. This is exactly the simulator's rate rule (:mod:`iadeep.sim._rates`); like the
simulator, true rates carry no noise and only *measurements* (:meth:`EmulatedGpus.measure`) do:
multiplicative log-normal noise of relative standard deviation ``measurement_noise``.

:class:`EmulatedGpus` is plain bookkeeping without I/O and without a clock of its own: every
method takes the wall time ``now_s`` (Unix seconds). The service (:mod:`._service`) feeds it the
pods it sees and completes the pods whose work is done.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from iadeep.goodput import gain_matrix, progress
from iadeep.interference import InterferenceModel

__all__ = ["EmulatedGpus", "EmulatedJob", "RateChange"]


@dataclass
class EmulatedJob:
    """One running job.

    Attributes:
        uid: pod UID.
        node: its node.
        gpus: its GPU indices on the node (gang order).
        type_id: current type (model family, batch size) in the interference model.
        base_type_id: type as submitted (the goodput gain is relative to it).
        work_left_s: work still to do (s at dedicated speed) as of ``updated_s``.
        speedup: emulated seconds per wall second.
        started_s: wall time it started (Unix s).
        updated_s: wall time of ``work_left_s``.
        rate: current progress rate (work per emulated second).
        version: increases with every rate change (stale completion entries are skipped).
        done_s: wall time its work reached zero (``None`` while work is left). Kept exact however
            late the job is brought up to date: the service stops a done job only when its
            completer gets to it, and a sync after the finish must not move the finish.
    """

    uid: str
    node: str
    gpus: tuple[int, ...]
    type_id: int
    base_type_id: int
    work_left_s: float
    speedup: float
    started_s: float
    updated_s: float
    rate: float = 0.0
    version: int = 0
    done_s: float | None = None


@dataclass(frozen=True)
class RateChange:
    """A job whose rate changed: ``rate`` work per emulated second, ``normalised`` its normalised throughput."""

    uid: str
    rate: float
    normalised: float


@dataclass
class EmulatedGpus:
    """The emulated GPUs of every node and the jobs running on them.

    Args:
        model: the interference model (the simulator's ground truth).
        seed: seeds the measurement noise.
        measurement_noise: relative standard deviation of measured throughput (0.05 = 5 %).
    """

    model: InterferenceModel
    seed: int = 0
    measurement_noise: float = 0.05
    jobs: dict[str, EmulatedJob] = field(default_factory=dict)
    on_gpu: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._gain = gain_matrix(self.model.types, self.model.isolated_steps_per_s)
        self._rng = np.random.default_rng(self.seed)
        self._due: list[tuple[float, int, str]] = []  # heap of (wall finish time, version, uid)

    # -- changes of the co-located sets -------------------------------------------------------
    def _sync(self, job: EmulatedJob, now_s: float) -> None:
        elapsed = max(now_s - job.updated_s, 0.0) * job.speedup
        done = job.rate * elapsed
        if job.done_s is None and job.rate > 0 and done >= job.work_left_s:
            job.done_s = job.updated_s + job.work_left_s / (job.rate * job.speedup)
        job.work_left_s = max(job.work_left_s - done, 0.0)
        job.updated_s = max(now_s, job.updated_s)

    def _rerate(self, uids: Iterable[str], now_s: float) -> list[RateChange]:
        out = []
        for uid in sorted(set(uids)):
            job = self.jobs.get(uid)
            if job is None:
                continue
            self._sync(job, now_s)
            gain = float(self._gain[job.type_id, job.base_type_id])
            norm = min(self._normalised(job, g) for g in job.gpus)
            rate = progress(norm, gain)  # the gang's slowest GPU (progress is increasing in norm)
            job.rate = rate
            job.version += 1
            if rate > 0:
                heapq.heappush(self._due, (self.finish_time(job), job.version, uid))
            out.append(RateChange(uid, rate, norm))
        return out

    def _normalised(self, job: EmulatedJob, g: int) -> float:
        occupants = self.on_gpu[(job.node, g)]
        return float(self.model.normalised([self.jobs[u].type_id for u in occupants])[occupants.index(job.uid)])

    def finish_time(self, job: EmulatedJob) -> float:
        """Wall time (Unix s) the job's work is done at its current rate (inf when it makes no
        progress); once done, the exact time its work reached zero, whenever it was synced since."""
        if job.done_s is not None:
            return job.done_s
        if job.rate <= 0:
            return float("inf")
        return job.updated_s + job.work_left_s / (job.rate * job.speedup)

    def start(self, uid: str, node: str, gpus: Iterable[int], type_id: int, work_s: float, *, now_s: float,
              speedup: float, base_type_id: int | None = None) -> list[RateChange]:
        """A job starts on ``gpus`` of ``node``; returns the rate changes it causes (its own first
        among them). Starting a job that already runs changes nothing.

        Raises:
            ValueError: no GPUs, negative work or a non-positive speedup.
        """
        gpus = tuple(int(g) for g in gpus)
        if not gpus or work_s < 0 or speedup <= 0:
            raise ValueError(f"job {uid}: need GPUs, work >= 0 and speedup > 0 (got {gpus}, {work_s}, {speedup})")
        if uid in self.jobs:
            return []
        partners: set[str] = set()
        for g in gpus:
            partners.update(self.on_gpu.get((node, g), ()))
        for p in partners:
            self._sync(self.jobs[p], now_s)
        self.jobs[uid] = EmulatedJob(uid, node, gpus, int(type_id), int(type_id if base_type_id is None else base_type_id),
                                     float(work_s), float(speedup), now_s, now_s)
        for g in gpus:
            self.on_gpu.setdefault((node, g), []).append(uid)
        return self._rerate([uid, *partners], now_s)

    def stop(self, uid: str, *, now_s: float) -> list[RateChange]:
        """A job left its GPUs (done, failed or deleted); returns its partners' rate changes."""
        job = self.jobs.pop(uid, None)
        if job is None:
            return []
        partners: set[str] = set()
        for g in job.gpus:
            occ = self.on_gpu.get((job.node, g), [])
            if uid in occ:
                occ.remove(uid)
            partners.update(occ)
            if not occ:
                self.on_gpu.pop((job.node, g), None)
        return self._rerate(partners, now_s)

    def set_type(self, uid: str, type_id: int, *, now_s: float) -> list[RateChange]:
        """A job changed batch size (a tuner's decision): its GPU's rates change."""
        job = self.jobs.get(uid)
        if job is None or job.type_id == type_id:
            return []
        partners: set[str] = {uid}
        for g in job.gpus:
            partners.update(self.on_gpu.get((job.node, g), ()))
        for p in partners:
            self._sync(self.jobs[p], now_s)
        job.type_id = int(type_id)
        return self._rerate(partners, now_s)

    # -- completion and measurement ----------------------------------------------------------
    def next_due(self) -> float | None:
        """Wall time of the earliest completion (``None``: no job will finish at current rates)."""
        while self._due:
            t, version, uid = self._due[0]
            job = self.jobs.get(uid)
            if job is not None and job.version == version:
                return t
            heapq.heappop(self._due)
        return None

    def due(self, now_s: float) -> list[str]:
        """UIDs of the jobs whose work is done by ``now_s`` (they keep running until :meth:`stop`)."""
        out = []
        while self._due and self._due[0][0] <= now_s:
            _, version, uid = heapq.heappop(self._due)
            job = self.jobs.get(uid)
            if job is not None and job.version == version:
                out.append(uid)
        return out

    def progress_of(self, uid: str, now_s: float) -> float:
        """Work left (s at dedicated speed) of a running job at ``now_s``.

        Raises:
            KeyError: not running.
        """
        job = self.jobs[uid]
        self._sync(job, now_s)
        return job.work_left_s

    def measure(self, uid: str) -> float:
        """A noisy measurement of the job's throughput (steps/s at its current batch size), as a
        training job would report it: isolated steps/s x normalised throughput x log-normal noise.

        Raises:
            KeyError: not running.
        """
        job = self.jobs[uid]
        norm = min(self._normalised(job, g) for g in job.gpus)
        steps = float(self.model.isolated_steps_per_s[job.type_id]) * norm
        return steps * float(self._rng.lognormal(0.0, self.measurement_noise))
