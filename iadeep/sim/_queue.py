"""Scheduling queues of the simulator: which queued jobs the engine tries, in which order, and when.

The engine (:class:`~iadeep.sim.Simulator`) runs one scheduling pass after each batch of
simultaneous events. It asks its queue for the jobs to try (:meth:`SchedulingQueue.candidates`, a
lazy iterator), asks the policy about each and tells the queue the outcome (:meth:`placed` /
:meth:`failed`). Cluster events (a job ended or was evicted, a node was added) are reported with
:meth:`cluster_event`; :meth:`next_wakeup` says when the queue wants a pass without any event
(a backoff expires), and the engine schedules one then.

Three queues:

- :class:`FifoQueue` (``fifo``): strict FIFO, only the head is tried; with ``depth`` > 0
  (``backfill``) up to ``depth`` jobs behind a waiting head are tried too.
- :class:`KubeQueue` (``kube``): kube-scheduler's scheduling queue (kubernetes/kubernetes
  ``pkg/scheduler/backend/queue/scheduling_queue.go``). The *active queue* is ordered by priority,
  then by the time the pod entered the queue (its creation time: the ``PrioritySort`` plugin);
  every active pod is tried. A pod that fails filtering goes to the *unschedulable pods* and waits
  for a relevant cluster event (here: a pod ended or was deleted, a node was added); the event
  moves it to the *backoff queue* until its backoff has expired, then to the active queue. Its
  backoff after ``n`` failed attempts is ``initial x 2^(n-1)`` capped at ``max``
  (``podInitialBackoffSeconds`` = 1 s and ``podMaxBackoffSeconds`` = 10 s by default in
  ``KubeSchedulerConfiguration``); once the active queue is empty, the pods still backing off are
  tried too, soonest expiry first (``SchedulerPopFromBackoffQ``, on by default since Kubernetes
  1.33: :attr:`KubeQueueSettings.pop_from_backoff`), so a backoff delays a pod only while others
  are active; an unschedulable pod without any event is retried after
  ``podMaxInUnschedulablePodsDuration`` (5 min). Later pods are tried meanwhile: a pod that does
  not fit never blocks the pods behind it, so :meth:`blocking` is 0 (the policy's charge for the
  FIFO queue a waiting job holds back does not apply). Older pods do get a freed GPU first (an
  event wakes every unschedulable pod and the active queue pops by priority, then creation time),
  so :meth:`gpus_ahead` is the GPUs that the pending pods with a higher priority or an earlier
  creation time need: what the extender computes from the pods it follows
  (:class:`iadeep.extender.PendingPods`), so the policy sees the same in both drivers. A job
  evicted and queued again (:meth:`requeue`) is its Job's replacement pod: it queues by its new
  creation time, behind the pods created before the eviction.

Handles are the engine's job indices (non-negative ints).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["SchedulingQueue", "FifoQueue", "KubeQueue", "KubeQueueSettings", "QUEUES", "make_queue"]

#: Queue names accepted by :func:`make_queue` (and ``--queue``).
QUEUES = ("fifo", "backfill", "kube")


class SchedulingQueue(Protocol):
    """What the engine asks of a queue (see the module docstring for the order of calls)."""

    def add(self, h: int, created_s: float, now_s: float, *, priority: int = 0, gpus: int = 1) -> None:
        """A job arrived (``created_s``: its creation time; ``priority``: higher is tried first;
        ``gpus``: how many GPUs it needs)."""

    def requeue(self, h: int, now_s: float, *, here: bool = False) -> None:
        """A running job was evicted and queued again: at the head, or with ``here`` (a job
        preempted by the candidate just placed) at that candidate's place, ahead of the jobs behind
        it; it is tried in the same pass."""

    def candidates(self, now_s: float) -> Iterator[int]:
        """Jobs to try now, in order; lazy: the outcome of each is reported before the next is drawn."""

    def placed(self, h: int, now_s: float) -> None:
        """The last candidate started (it leaves the queue)."""

    def failed(self, h: int, now_s: float) -> None:
        """The last candidate could not start."""

    def blocking(self, h: int) -> int:
        """Jobs that cannot start while ``h`` waits (the policy's ``jobs_behind``)."""

    def gpus_ahead(self, h: int) -> int:
        """GPUs needed by waiting jobs that get freed GPUs before the candidate ``h`` (the
        policy's ``gpus_ahead``)."""

    def cluster_event(self, kind: str, now_s: float) -> None:
        """A cluster event: ``"pod_ended"`` or ``"node_added"``."""

    def next_wakeup(self, now_s: float) -> float | None:
        """The next time (s) a pass is wanted without any event (``None``: not before an event)."""

    def __len__(self) -> int:
        """Jobs waiting (all sub-queues)."""


class FifoQueue:
    """Strict FIFO; with ``depth`` > 0, backfill: up to ``depth`` jobs behind a waiting head are tried.

    Args:
        depth: jobs behind the head tried per pass (0: strict FIFO).
    """

    def __init__(self, depth: int = 0):
        self.depth = depth
        self.jobs: list[int] = []
        self.gpus: dict[int, int] = {}
        self._pos = 0
        self._ahead = 0  # GPUs of this pass's candidates that could not start (all ahead of the next)

    def add(self, h: int, created_s: float, now_s: float, *, priority: int = 0, gpus: int = 1) -> None:
        self.jobs.append(h)
        self.gpus[h] = int(gpus)

    def requeue(self, h: int, now_s: float, *, here: bool = False) -> None:
        self.jobs.insert(self._pos if here else 0, h)

    def candidates(self, now_s: float) -> Iterator[int]:
        self._pos = 0
        self._ahead = 0
        while self._pos < len(self.jobs) and self._pos <= self.depth:
            yield self.jobs[self._pos]

    def placed(self, h: int, now_s: float) -> None:
        self.jobs.pop(self._pos)

    def failed(self, h: int, now_s: float) -> None:
        self._pos += 1
        self._ahead += self.gpus.get(h, 1)

    def gpus_ahead(self, h: int) -> int:
        return self._ahead

    def blocking(self, h: int) -> int:
        pos = self._pos if self._pos < len(self.jobs) and self.jobs[self._pos] == h else self.jobs.index(h)
        return len(self.jobs) - pos - 1

    def cluster_event(self, kind: str, now_s: float) -> None:
        pass

    def next_wakeup(self, now_s: float) -> float | None:
        return None

    def __len__(self) -> int:
        return len(self.jobs)


@dataclass(frozen=True)
class KubeQueueSettings:
    """kube-scheduler's queue timing (``KubeSchedulerConfiguration``, ``kubescheduler.config.k8s.io/v1``).

    Attributes:
        initial_backoff_s: ``podInitialBackoffSeconds`` (default 1 s).
        max_backoff_s: ``podMaxBackoffSeconds`` (default 10 s).
        max_unschedulable_s: how long a pod stays unschedulable without any event before it is
            retried (kube-scheduler's ``podMaxInUnschedulablePodsDuration``, 5 min; not part of
            the configuration file).
        pop_from_backoff: when the active queue is empty, the scheduler pops the pods of the
            backoff queue before their backoff expires, soonest expiry first (the feature gate
            ``SchedulerPopFromBackoffQ``, KEP-5142: beta and on by default since Kubernetes 1.33;
            ``pkg/scheduler/backend/queue/active_queue.go``). A backoff then only orders pods
            behind the active ones; off: every pod waits out its backoff, as before 1.33.
    """

    initial_backoff_s: float = 1.0
    max_backoff_s: float = 10.0
    max_unschedulable_s: float = 300.0
    pop_from_backoff: bool = True

    def __post_init__(self) -> None:
        if not (0 < self.initial_backoff_s <= self.max_backoff_s) or self.max_unschedulable_s <= 0:
            raise ValueError(f"invalid kube queue timing {self}: need 0 < initial backoff <= max backoff, "
                             "max unschedulable time > 0")

    @classmethod
    def from_scheduler_config(cls, config: Mapping[str, Any] | str | Path | None) -> KubeQueueSettings:
        """Read ``podInitialBackoffSeconds`` / ``podMaxBackoffSeconds`` from a KubeSchedulerConfiguration
        (a mapping or a YAML file); absent fields keep kube-scheduler's defaults.

        Raises:
            ValueError: the file is not a KubeSchedulerConfiguration or a field is not a positive number.
        """
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            import yaml

            path = Path(config)
            try:
                config = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise ValueError(f"cannot read the scheduler configuration {path}: {exc}") from None
            if not isinstance(config, Mapping):
                raise ValueError(f"{path}: not a KubeSchedulerConfiguration (a YAML mapping)")
        if config.get("kind", "KubeSchedulerConfiguration") != "KubeSchedulerConfiguration":
            raise ValueError(f"not a KubeSchedulerConfiguration: kind {config.get('kind')!r}")
        out = {}
        for key, name in (("podInitialBackoffSeconds", "initial_backoff_s"), ("podMaxBackoffSeconds", "max_backoff_s")):
            if key in config:
                v = config[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                    raise ValueError(f"scheduler configuration field {key}: expected a positive number, got {v!r}")
                out[name] = float(v)
        return cls(**out)


class KubeQueue:
    """kube-scheduler's active queue, backoff queue and unschedulable pods (module docstring).

    Args:
        settings: backoff timing.
    """

    def __init__(self, settings: KubeQueueSettings = KubeQueueSettings()):
        self.settings = settings
        self.active: list[tuple[int, float, int, int]] = []  # heap of (-priority, created, seq, h)
        self.backoff: dict[int, float] = {}  # h -> time its backoff expires
        self.unschedulable: dict[int, float] = {}  # h -> time it became unschedulable
        self.attempts: dict[int, int] = {}
        self.key: dict[int, tuple[int, float]] = {}  # h -> (-priority, created)
        self.last_failed: dict[int, float] = {}
        self.gpus: dict[int, int] = {}
        self._seq = 0
        self._current: int | None = None
        # gpus_ahead within a pass: the pods waiting outside the active queue when the pass began,
        # sorted by key with cumulative GPUs, plus the candidates of this pass that failed (popped
        # in key order, so all of them are ahead of the next candidate)
        self._idle_keys: list[tuple[int, float]] = []
        self._idle_gpus: list[int] = []
        self._failed_gpus = 0

    def _push_active(self, h: int) -> None:
        self._seq += 1
        p, c = self.key[h]
        heapq.heappush(self.active, (p, c, self._seq, h))

    def backoff_s(self, h: int) -> float:
        """Backoff of ``h`` after its failed attempts: ``initial x 2^(attempts-1)``, at most ``max`` (s)."""
        n = self.attempts.get(h, 0)
        if n <= 0:
            return 0.0
        s = self.settings
        return min(s.initial_backoff_s * 2.0 ** min(n - 1, 62), s.max_backoff_s)

    def add(self, h: int, created_s: float, now_s: float, *, priority: int = 0, gpus: int = 1) -> None:
        self.key[h] = (-int(priority), float(created_s))
        self.gpus[h] = int(gpus)
        self.attempts[h] = 0
        self._push_active(h)

    def requeue(self, h: int, now_s: float, *, here: bool = False) -> None:
        # kube-scheduler has no place in line to keep: an evicted pod is gone and its Job's
        # replacement pod is a new pod, created now (the Job controller makes it once the
        # evicted one has failed), ordered by its priority and that creation time like every other
        self.key[h] = (self.key[h][0], float(now_s))
        self.attempts[h] = 0
        self._push_active(h)

    def _flush(self, now_s: float) -> None:
        """Backoffs that expired go active; pods unschedulable too long go to backoff/active."""
        for h, t in list(self.unschedulable.items()):
            if now_s - t >= self.settings.max_unschedulable_s:
                del self.unschedulable[h]
                self._to_backoff_or_active(h, now_s)
        for h, t in list(self.backoff.items()):
            if t <= now_s:
                del self.backoff[h]
                self._push_active(h)

    def _to_backoff_or_active(self, h: int, now_s: float) -> None:
        until = self.last_failed.get(h, -math.inf) + self.backoff_s(h)
        if until > now_s:
            self.backoff[h] = until
        else:
            self._push_active(h)

    def candidates(self, now_s: float) -> Iterator[int]:
        self._flush(now_s)
        idle = sorted((self.key[h], self.gpus.get(h, 1)) for h in (*self.backoff, *self.unschedulable))
        self._idle_keys = [k for k, _ in idle]
        self._idle_gpus = list(itertools.accumulate(g for _, g in idle))
        self._failed_gpus = 0
        while self.active or (self.settings.pop_from_backoff and self.backoff):
            if self.active:
                _, _, _, h = heapq.heappop(self.active)
            else:  # SchedulerPopFromBackoffQ: an idle scheduler takes the pod whose backoff ends first
                h = min(self.backoff, key=lambda x: (self.backoff[x], self.key[x]))
                del self.backoff[h]
            self._current = h
            yield h

    def placed(self, h: int, now_s: float) -> None:
        self._current = None
        for d in (self.attempts, self.last_failed):  # the key stays until an eviction (:meth:`requeue`)
            d.pop(h, None)

    def failed(self, h: int, now_s: float) -> None:
        self._current = None
        self._failed_gpus += self.gpus.get(h, 1)
        self.attempts[h] = self.attempts.get(h, 0) + 1
        self.last_failed[h] = now_s
        self.unschedulable[h] = now_s

    def blocking(self, h: int) -> int:
        return 0

    def gpus_ahead(self, h: int) -> int:
        i = bisect.bisect_left(self._idle_keys, self.key[h])
        return (self._idle_gpus[i - 1] if i else 0) + self._failed_gpus

    def cluster_event(self, kind: str, now_s: float) -> None:
        if kind not in ("pod_ended", "node_added"):
            raise ValueError(f"unknown cluster event {kind!r}")
        for h in sorted(self.unschedulable, key=lambda x: self.key[x]):
            self._to_backoff_or_active(h, now_s)
        self.unschedulable.clear()

    def next_wakeup(self, now_s: float) -> float | None:
        times = list(self.backoff.values())
        times += [t + self.settings.max_unschedulable_s for t in self.unschedulable.values()]
        return min(times) if times else None

    def __len__(self) -> int:
        return len(self.active) + len(self.backoff) + len(self.unschedulable) + (self._current is not None)


def make_queue(name: str, *, backfill_depth: int = 32, kube: KubeQueueSettings = KubeQueueSettings()) -> SchedulingQueue:
    """A queue by name (:data:`QUEUES`).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name == "fifo":
        return FifoQueue(0)
    if name == "backfill":
        return FifoQueue(backfill_depth)
    if name == "kube":
        return KubeQueue(kube)
    raise ValueError(f"unknown queue {name!r}; known: {', '.join(QUEUES)}")
