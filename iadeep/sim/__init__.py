"""Trace-driven discrete-event simulator: the offline driver of the policy core."""

from iadeep.sim._clusterfile import (
    GPU_MEM_GIB,
    ClusterFileError,
    PhillyConsistency,
    cluster_from_openb,
    cluster_from_philly,
    dump_cluster,
    load_cluster,
    philly_consistency,
)
from iadeep.sim._config import GANG_PLACEMENTS, ClusterSpec, NodeGroup, SimSettings
from iadeep.sim._engine import Simulator, simulate
from iadeep.sim._errors import InfeasibleJobError
from iadeep.sim._feasible import feasibility, gpu_model_mask
from iadeep.sim._queue import QUEUES, FifoQueue, KubeQueue, KubeQueueSettings, SchedulingQueue, make_queue
from iadeep.sim._result import JOB_COLUMNS, RunRecord, SimResult, summarise
from iadeep.sim._speeds import gavel_type_of, type_speeds

__all__ = ["ClusterFileError", "GANG_PLACEMENTS", "GPU_MEM_GIB", "PhillyConsistency", "cluster_from_openb", "cluster_from_philly",
           "dump_cluster", "load_cluster", "philly_consistency", "ClusterSpec", "FifoQueue", "InfeasibleJobError", "JOB_COLUMNS",
           "KubeQueue", "KubeQueueSettings", "NodeGroup", "QUEUES", "RunRecord", "SchedulingQueue", "SimResult", "SimSettings", "Simulator",
           "feasibility", "gavel_type_of", "gpu_model_mask", "make_queue", "simulate", "summarise", "type_speeds"]
