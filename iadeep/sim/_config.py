"""Simulator configuration: the cluster shape and the simulation settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from iadeep.sim._queue import QUEUES, KubeQueueSettings, SchedulingQueue, make_queue

import numpy as np

__all__ = ["ClusterSpec", "GANG_PLACEMENTS", "NodeGroup", "SimSettings"]

#: How a multi-GPU job is placed (:attr:`SimSettings.gang_placement`).
GANG_PLACEMENTS = ("pods", "any-gpus")


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one shape in a (possibly heterogeneous) cluster.

    Attributes:
        count: number of such nodes (>= 1).
        gpus_per_node: GPUs on each (>= 1).
        gpu_mem_gib: memory of each GPU (GiB, > 0).
        gpu_model: GPU model name as the trace writes it (e.g. ``"V100M32"``, ``"P100"``, ``"T4"``);
            ``""`` = unnamed.
        name: node-name prefix (``"<name>-00"``, ...); default: the model (lower case) or ``"node"``.
    """

    count: int
    gpus_per_node: int
    gpu_mem_gib: float
    gpu_model: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if self.count < 1 or self.gpus_per_node < 1 or not self.gpu_mem_gib > 0:
            raise ValueError(f"invalid node group {self}: count, gpus_per_node and gpu_mem_gib must be positive")


@dataclass(frozen=True)
class ClusterSpec:
    """A GPU cluster: ``nodes`` identical nodes, or several :class:`NodeGroup` s.

    Defaults follow the IADeep paper's testbed: 5 nodes x 4 RTX 3090 (24 GiB) = 20 GPUs.

    Attributes:
        nodes: number of nodes (with ``groups``: their total, filled in).
        gpus_per_node: GPUs on each node (with ``groups``: the largest).
        gpu_mem_gib: memory of each GPU (GiB) (with ``groups``: the largest).
        gpu_model: GPU model of every node (``""`` = unnamed); ignored with ``groups``.
        groups: node groups of a heterogeneous cluster (:func:`iadeep.sim.load_cluster` reads
            them from a file); empty = homogeneous.
    """

    nodes: int = 5
    gpus_per_node: int = 4
    gpu_mem_gib: float = 24.0
    gpu_model: str = ""
    groups: tuple[NodeGroup, ...] = ()

    def __post_init__(self) -> None:
        if self.groups:
            object.__setattr__(self, "groups", tuple(self.groups))
            object.__setattr__(self, "nodes", sum(g.count for g in self.groups))
            object.__setattr__(self, "gpus_per_node", max(g.gpus_per_node for g in self.groups))
            object.__setattr__(self, "gpu_mem_gib", max(g.gpu_mem_gib for g in self.groups))
            return
        if self.nodes < 1 or self.gpus_per_node < 1 or self.gpu_mem_gib <= 0:
            raise ValueError(f"invalid cluster {self}: nodes, gpus_per_node and gpu_mem_gib must be positive")

    def node_groups(self) -> tuple[NodeGroup, ...]:
        """The groups (one for a homogeneous cluster)."""
        return self.groups or (NodeGroup(self.nodes, self.gpus_per_node, self.gpu_mem_gib, self.gpu_model, "node"),)

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster."""
        return sum(g.count * g.gpus_per_node for g in self.node_groups())

    def node_names(self) -> tuple[str, ...]:
        """``node-00``, ``node-01``, ... (homogeneous); ``<group name>-00``, ... per group."""
        names: list[str] = []
        for g in self.node_groups():
            prefix = g.name or (g.gpu_model.lower() if g.gpu_model else "node")
            width = max(2, len(str(g.count - 1)))
            names += [f"{prefix}-{i:0{width}d}" for i in range(g.count)]
        if len(set(names)) != len(names):  # two groups with the same prefix: number them apart
            names = [f"{n}.{k}" for k, n in enumerate(names)]
        return tuple(names)

    def gpu_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-GPU ``(node index, index on the node, memory GiB, model name)``, each shape ``(G,)``."""
        node, local, mem, model = [], [], [], []
        k = 0
        for g in self.node_groups():
            for _ in range(g.count):
                node += [k] * g.gpus_per_node
                local += list(range(g.gpus_per_node))
                mem += [float(g.gpu_mem_gib)] * g.gpus_per_node
                model += [g.gpu_model] * g.gpus_per_node
                k += 1
        return (np.asarray(node, dtype=np.int64), np.asarray(local, dtype=np.int64),
                np.asarray(mem, dtype=np.float64), np.asarray(model, dtype=object))

    def describe(self) -> str:
        """``"5 nodes x 4 GPUs x 24.0 GiB"``, or one such part per group joined by ``" + "``."""
        return " + ".join(f"{g.count} x {g.gpus_per_node} {g.gpu_model or 'GPUs'} x {g.gpu_mem_gib:g} GiB"
                          for g in self.node_groups())


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
        gang_placement: ``"pods"`` (default): a job runs as a gang of equal pods, each pod's GPUs
            on one node, the pods on any nodes, as the live system runs it (an Indexed Job); a job
            that fits one node is one pod on one node. Pod size: :func:`iadeep.policy.pod_size`
            over the nodes with GPUs of a model the job accepts. ``"any-gpus"``: any GPUs of the
            cluster (kept on as few nodes as the policy's GPU choice manages), the model of
            simulators that place a job's GPUs one by one, for comparing with them.
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
    gang_placement: str = "pods"

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise ValueError(f"unknown queue {self.queue!r}; known: {', '.join(QUEUES)}")
        if self.gang_placement not in GANG_PLACEMENTS:
            raise ValueError(f"unknown gang_placement {self.gang_placement!r}; known: {', '.join(GANG_PLACEMENTS)}")

    def make_queue(self) -> SchedulingQueue:
        """A fresh queue as these settings describe (``backfill=True`` turns ``fifo`` into ``backfill``)."""
        name = "backfill" if self.backfill and self.queue == "fifo" else self.queue
        return make_queue(name, backfill_depth=self.backfill_depth, kube=self.kube)
