"""Settings of the node coordinator, from ``IADEEP_COORDINATOR_*`` variables (``__`` nests)::

    IADEEP_COORDINATOR_NODE=gpu-node-3              # the downward API's spec.nodeName in the DaemonSet
    IADEEP_COORDINATOR_TUNER_URL=http://iadeep-tuner.iadeep-system:8890
    IADEEP_COORDINATOR_THROUGHPUTS_FILE=/etc/iadeep/simulation_throughputs.json
    IADEEP_COORDINATOR_ROUND__DEADLINE_S=30
    IADEEP_ETCD_ENDPOINTS=...                       # the state store, as for every service

etcd is configured through :class:`iadeep.state.StateSettings` (``IADEEP_ETCD_*``), nested here
as ``etcd``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep._serving import HttpUrl, LogLevel, node_name
from iadeep.state import StateSettings
from iadeep.tuner import DEFAULT_TRIALS

__all__ = ["CoordinatorSettings", "RoundSettings"]


class RoundSettings(BaseModel):
    """One round of a session: write the trial's batch sizes, wait for the jobs' reports, tell.

    Attributes:
        deadline_s: longest wait for every job's measurement; a round past it ends the session
            with the best configuration measured so far (a job that stopped reporting).
        reports: reports per job averaged into one measurement, counted from after every job
            switched (the SDK reports once per second, so a round takes about ``reports + 1`` s).
        warm_start: predicted-best configurations handed to the tuner to measure first (default
            :data:`iadeep.tuner.DEFAULT_TRIALS`, as the simulator's sessions).
    """

    deadline_s: float = Field(30.0, gt=0)
    reports: int = Field(1, ge=1)
    warm_start: int = Field(DEFAULT_TRIALS, ge=0)


class CoordinatorSettings(BaseSettings):
    """The node coordinator.

    Attributes:
        node: this node's name (whose GPUs' tuning requests it follows); required unless
            ``all_nodes``.
        all_nodes: follow the tuning requests of every node (one process for a set of emulated
            nodes, e.g. the kwok nodes of a live experiment; on real nodes the DaemonSet runs one
            coordinator per node).
        tuner_url: the tuner service's base URL; required.
        throughputs_file: Gavel ``simulation_throughputs.json`` (isolated steps/s per job type:
            a report's steps/s divided by it is the normalised throughput); required.
        gpu_type: which GPU's measurements.
        host / port: the health and metrics endpoint (``/healthz``, ``/readyz``, ``/metrics``).
        idle_s: a watch of the tuning requests idle this long is reopened (and the requests
            listed again): the bound on every wait for etcd.
        retry_backoff_s: first back-off after etcd or the tuner failed (doubles up to 30 s).
        round: round timing.
        clock_file: a live replay's shared clock (:class:`iadeep.emulator.HeldClock`): the records'
            and measurements' times are read on it (the GPU emulator's reports are), and it is
            held through each session, so that a session's wall time takes no emulated time;
            ``None`` (default): wall time.
        etcd: the state store.
        log_level: Python logging level.
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_COORDINATOR_", env_nested_delimiter="__", extra="ignore")

    node: str = ""
    all_nodes: bool = False
    tuner_url: HttpUrl
    throughputs_file: Path
    gpu_type: str = "v100"
    host: str = "127.0.0.1"
    port: int = Field(8891, ge=0, le=65535)
    idle_s: float = Field(5.0, gt=0)
    retry_backoff_s: float = Field(0.5, gt=0)
    round: RoundSettings = Field(default_factory=RoundSettings)
    clock_file: Path | None = None
    etcd: StateSettings = Field(default_factory=StateSettings)
    log_level: LogLevel = "INFO"

    @model_validator(mode="after")
    def _one_scope(self) -> CoordinatorSettings:
        if self.node and self.all_nodes:
            raise ValueError("set either node (this node's name) or all_nodes (every node's requests), not both")
        if not self.node and not self.all_nodes:
            raise ValueError("set node (this node's name) or all_nodes (every node's requests)")
        if self.node:
            node_name(self.node)  # a Kubernetes node name, or ValueError naming it
        return self
