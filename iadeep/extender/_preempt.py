"""Preemption in the extender: the victims' pods are evicted and their GPUs held for the preemptor.

The policy decides (a :class:`iadeep.policy.Preemption` from its post-filter phase, iadeep's head-of-line rule with
``preempt_unblocked``); this module keeps what kube-scheduler keeps for its own preemptions, a
*nomination* (``status.nominatedNodeName``, KEP-1923's "nominated pods"): until the preemptor is
bound, or the nomination expires, every other pod is placed as if the preemptor already ran on
the GPUs it was given (the same view the simulator gives the next job, where the preemptor starts
at once). The preemptor itself fails filtering while a victim still holds one of those GPUs; once
the victims' reservations are released (their pods ended: :class:`~iadeep.extender.PodFollower`),
kube-scheduler retries it on that pod event and it passes.

The victims' pods are evicted through the Eviction API (``policy/v1`` ``Eviction``, the
``pods/eviction`` subresource: PodDisruptionBudgets apply, and the API server marks the pod with
the ``DisruptionTarget`` condition). Its Job replaces the pod without counting a failure when its
``podFailurePolicy`` ignores that condition (what the kubernetes backend's Jobs carry), and the
replacement resumes from the job's checkpoint (:class:`iadeep.state.JobCheckpoint`, written by
whatever stops the pod: the GPU emulator, or a training job's SDK).

Nominations live in the extender's memory (one extender decides; a restarted extender forgets
them, as kube-scheduler forgets nominations on restart, and the preemptor is placed as any pod).
"""

from __future__ import annotations

import threading
import time
from collections import ChainMap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iadeep.extender._view import Snapshot, ViewBase
from iadeep.podspec import TypeResolver
from iadeep.state import GpuState, JobRecord

__all__ = ["Nomination", "Nominations", "with_nominations"]


@dataclass(frozen=True)
class Nomination:
    """GPUs held for a preemptor.

    Attributes:
        pod_uid: the preemptor's pod.
        job: its job record (the other pods see it on ``gpus``).
        type_id: its job type.
        gpus: ``(node, GPU index)`` it was given.
        victims: pod UIDs evicted for it.
        expires_at: monotonic seconds.
    """

    pod_uid: str
    job: JobRecord
    type_id: int
    gpus: tuple[tuple[str, int], ...]
    victims: tuple[str, ...]
    expires_at: float

    def waiting(self, snapshot: Snapshot) -> bool:
        """Whether a victim still holds one of the nominated GPUs (its reservation not yet released)."""
        return any(v in st.pods for key in self.gpus if (st := snapshot.gpu_states.get(key)) is not None
                   for v in self.victims)


class Nominations:
    """The live nominations, by preemptor pod UID (thread-safe).

    Args:
        hold_s: how long GPUs stay held for a preemptor that is not bound (wall seconds).
        clock: monotonic clock, injectable.
    """

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic):
        self.hold_s = hold_s
        self.clock = clock
        self._by_pod: dict[str, Nomination] = {}
        self._lock = threading.Lock()
        self.made = 0

    def add(self, pod_uid: str, job: JobRecord, type_id: int, gpus: Sequence[tuple[str, int]],
            victims: Sequence[str]) -> Nomination:
        """Hold ``gpus`` for ``pod_uid`` for ``hold_s`` from now."""
        nom = Nomination(pod_uid, job, type_id, tuple(gpus), tuple(victims), self.clock() + self.hold_s)
        with self._lock:
            self._by_pod[pod_uid] = nom
            self.made += 1
        return nom

    def _live(self) -> dict[str, Nomination]:
        now = self.clock()
        for uid in [u for u, n in self._by_pod.items() if n.expires_at <= now]:
            del self._by_pod[uid]
        return self._by_pod

    def get(self, pod_uid: str) -> Nomination | None:
        """The pod's live nomination, if any."""
        with self._lock:
            return self._live().get(pod_uid) if self._by_pod else None

    def others(self, pod_uid: str) -> list[Nomination]:
        """Live nominations of pods other than ``pod_uid``."""
        if not self._by_pod:
            return []
        with self._lock:
            return [n for u, n in self._live().items() if u != pod_uid]

    def is_nominated(self, pod_uid: str) -> bool:
        """Whether ``pod_uid`` is a preemptor with live GPUs held (never a victim: it is not running)."""
        return self.get(pod_uid) is not None

    def drop(self, pod_uid: str) -> None:
        """The preemptor was bound (or is gone): its GPUs are no longer held."""
        if self._by_pod:
            with self._lock:
                self._by_pod.pop(pod_uid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live())


def with_nominations(base: ViewBase, snapshot: Snapshot, nominations: Sequence[Nomination], types: TypeResolver, *,
                     now_s: float) -> ViewBase:
    """``base`` where each nominated pod occupies its GPUs (memory and a co-location slot), as
    kube-scheduler counts nominated pods when it filters others; ``base`` itself without any."""
    if not nominations:
        return base
    states: dict[tuple[str, int], GpuState] = {}
    jobs: dict[str, JobRecord] = {}
    type_ids: dict[str, int] = {}
    for n in nominations:
        for key in n.gpus:
            old = states.get(key) or snapshot.gpu_states.get(key) or GpuState(key[0], key[1])
            if n.pod_uid not in old.pods:
                states[key] = GpuState(key[0], key[1], old.mem_used_gib + n.job.mem_gib, (*old.pods, n.pod_uid))
        jobs[n.pod_uid] = n.job
        type_ids[n.pod_uid] = n.type_id
    return base.with_gpu_states(states, ChainMap(jobs, snapshot.jobs), types, now_s=now_s, type_ids=type_ids)

