"""Trace-driven discrete-event simulator: the offline driver of the policy core."""

from iadeep.sim._config import ClusterSpec, SimSettings
from iadeep.sim._engine import Simulator, simulate
from iadeep.sim._result import JOB_COLUMNS, SimResult, summarise

__all__ = ["ClusterSpec", "JOB_COLUMNS", "SimResult", "SimSettings", "Simulator", "simulate", "summarise"]
