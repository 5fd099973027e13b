"""Simulator configuration: the cluster shape and the simulation settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from iadeep.sim._queue import QUEUES, KubeQueueSettings, SchedulingQueue, make_queue

__all__ = ["ClusterSpec", "SimSettings"]


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous GPU cluster.

    Defaults follow the IADeep paper's testbed: 5 nodes x 4 RTX 3090 (24 GiB) = 20 GPUs.

    Attributes:
        nodes: number of nodes.
        gpus_per_node: GPUs on each node.
        gpu_mem_gib: memory of each GPU (GiB).
    """

    nodes: int = 5
    gpus_per_node: int = 4
    gpu_mem_gib: float = 24.0

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1 or self.gpu_mem_gib <= 0:
            raise ValueError(f"invalid cluster {self}: nodes, gpus_per_node and gpu_mem_gib must be positive")

    @property
    def total_gpus(self) -> int:
        """``nodes x gpus_per_node``."""
        return self.nodes * self.gpus_per_node

    def node_names(self) -> tuple[str, ...]:
        """``node-00``, ``node-01``, ..."""
        width = max(2, len(str(self.nodes - 1)))
        return tuple(f"node-{i:0{width}d}" for i in range(self.nodes))


@dataclass(frozen=True)
class SimSettings:
    """Simulation settings.

    Attributes:
        seed: seeds measurement noise (same seed, same results).
        trial_s: simulated time one tuning trial takes (s); IADeep measures each configuration for
            tens of iterations, i.e. tens of seconds.
        measurement_noise: relative standard deviation of the multiplicative log-normal noise on
            measured throughput (0.05 = 5 %).
        backfill: let queued jobs behind a waiting head start when they can (FIFO otherwise);
            the same as ``queue="backfill"``.
        backfill_depth: how many queued jobs behind the head are tried per scheduling pass.
        queue: the scheduling queue (:mod:`iadeep.sim._queue`): ``fifo``, ``backfill`` or
            ``kube`` (kube-scheduler's queue with backoff, as the live system queues).
        kube: backoff timing of the ``kube`` queue (kube-scheduler's defaults; see
            :meth:`KubeQueueSettings.from_scheduler_config`).
        restart_penalty_s: work (s at dedicated speed) added to a job evicted and re-queued, for
            checkpoint and restart.
        record_timeline: keep the queue-length/utilisation time series (for plots).
        tuning: call the policy's tuning after co-location changes (off: jobs keep their
            submitted batch sizes and nothing is undone, as on a live cluster without the node
            coordinator and tuner; used by the simulator-live parity check).
    """

    seed: int = 0
    trial_s: float = 20.0
    measurement_noise: float = 0.05
    backfill: bool = False
    backfill_depth: int = 32
    restart_penalty_s: float = 30.0
    record_timeline: bool = True
    tuning: bool = True
    queue: str = "fifo"
    kube: KubeQueueSettings = field(default_factory=KubeQueueSettings)

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise ValueError(f"unknown queue {self.queue!r}; known: {', '.join(QUEUES)}")

    def make_queue(self) -> SchedulingQueue:
        """A fresh queue as these settings describe (``backfill=True`` turns ``fifo`` into ``backfill``)."""
        name = "backfill" if self.backfill and self.queue == "fifo" else self.queue
        return make_queue(name, backfill_depth=self.backfill_depth, kube=self.kube)
