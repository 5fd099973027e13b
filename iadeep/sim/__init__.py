"""Trace-driven discrete-event simulator: the offline driver of the policy core."""

from iadeep.sim._config import ClusterSpec, SimSettings
from iadeep.sim._engine import Simulator, simulate
from iadeep.sim._queue import QUEUES, FifoQueue, KubeQueue, KubeQueueSettings, SchedulingQueue, make_queue
from iadeep.sim._result import JOB_COLUMNS, SimResult, summarise

__all__ = ["ClusterSpec", "FifoQueue", "JOB_COLUMNS", "KubeQueue", "KubeQueueSettings", "QUEUES", "SchedulingQueue",
           "SimResult", "SimSettings", "Simulator", "make_queue", "simulate", "summarise"]
