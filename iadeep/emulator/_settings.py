"""Settings of the GPU emulator (``iadeep emulator serve``), from ``IADEEP_EMULATOR_*`` variables::

    IADEEP_EMULATOR_SPEEDUP=1000
    IADEEP_EMULATOR_NODE_SELECTOR=iadeep.io/emulated-gpus=true
    IADEEP_EMULATOR_KUBE__KUBECONFIG=/path/to/kubeconfig
    IADEEP_EMULATOR_PORT=8893

etcd through the state store's own settings (``IADEEP_ETCD_*``), nested as ``etcd``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep._serving import LogLevel
from iadeep.state import StateSettings

__all__ = ["EmulatorSettings", "EmulatorKube"]


class EmulatorKube(BaseModel):
    """How the emulator reaches the Kubernetes API.

    Attributes:
        in_cluster: use the pod's service account.
        kubeconfig: kubeconfig file; ``None``: ``$KUBECONFIG`` or ``~/.kube/config``.
        request_timeout_s: per API call (s).
        watch_timeout_s: how long one watch request stays open before it is reopened (s).
    """

    in_cluster: bool = False
    kubeconfig: Path | None = None
    request_timeout_s: float = Field(10.0, gt=0)
    watch_timeout_s: float = Field(60.0, gt=0)


class EmulatorSettings(BaseSettings):
    """Everything the emulator needs.

    Attributes:
        speedup: emulated seconds per wall second for pods without the
            ``iadeep.io/emulation-speedup`` annotation (1: real time).
        node_selector: label selector of the nodes whose GPUs are emulated (the local control
            plane's kwok nodes carry ``iadeep.io/gpu-node=true``).
        throughputs_file: Gavel ``simulation_throughputs.json`` (the simulator's ground truth);
            ``None``: the dataset registry's ``gavel-throughputs`` in the user cache.
        gpu_type: which GPU type's measurements to use.
        seed: seeds the measurement noise.
        measurement_noise: relative standard deviation of reported throughput (the simulator's 5 %).
        report_measurements: write each job's measured throughput to the state store (the
            measurement records the node coordinator reads) whenever its co-located set changes.
        update_job_records: write each affected job's remaining work into its job record (the
            extender's placement policy reads it) whenever its co-located set changes.
        progress_interval_s: how often every running job's record is brought up to date besides
            the co-location changes (wall s; 0: never). The extender's view has no emulated
            clock: it projects remaining work at rate 1 per wall second from the last record.
        progress_tolerance / progress_tolerance_s: a job's record is rewritten by the progress
            pass when the extender's projection of it is further from the truth than this share of
            the work left, and at least this many seconds of work (emulated s).
        follow_batch_sizes: apply the batch sizes the node coordinator writes
            (``batchsizes/<pod>``, followed through a watch, as the SDK does in a training job): the
            job's rate changes to its new type's, with the goodput gain of the new size.
        report_interval_s: while a job is in a tuning session (its latest assignment is a trial,
            ``trial >= 0``), its throughput is reported this often (wall s; the SDK reports once
            per second); outside sessions a job reports when its co-located set changes.
        inventory_ttl_s: lease of each published node inventory (renewed at a third of it).
        complete_workers: pods completed at once (each completion is two API calls; one at a
            time, the 1,000-job live benchmark's completions fell minutes behind the work).
        checkpoint_cost_s: work (s at dedicated speed) added to a job resumed in a new pod of
            its Job after its pod was evicted (checkpoint and restart): the simulator's
            ``SimSettings.restart_penalty_s`` and iadeep's ``checkpoint_cost_s``, 30 s.
        clock_file: a live replay's shared clock (:class:`iadeep.emulator.HeldClock`): the emulator
            measures time with it and holds it while it completes pods whose work is done; ``None``
            (default): wall time.
        default_model / default_batch_size / default_duration_s: a pod without the annotations.
        host / port: where ``/healthz``, ``/readyz`` (503 until nodes and pods were listed once,
            and while etcd does not answer) and ``/metrics`` (Prometheus text,
            ``iadeep_emulator_*``) are served; loopback and 8893 by default (the port after the
            device plugin's 8892, so that every service of a node has its own); 0: any free port.
        log_level: Python logging level.
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_EMULATOR_", env_nested_delimiter="__", extra="ignore")

    speedup: float = Field(1.0, gt=0)
    node_selector: str = "iadeep.io/gpu-node=true"
    throughputs_file: Path | None = None
    gpu_type: str = "v100"
    seed: int = 0
    measurement_noise: float = Field(0.05, ge=0)
    report_measurements: bool = True
    update_job_records: bool = True
    progress_interval_s: float = Field(1.0, ge=0)
    progress_tolerance: float = Field(0.05, ge=0)
    progress_tolerance_s: float = Field(60.0, ge=0)
    follow_batch_sizes: bool = True
    report_interval_s: float = Field(1.0, gt=0)
    checkpoint_cost_s: float = Field(30.0, ge=0)
    inventory_ttl_s: int = Field(120, ge=3)
    complete_workers: int = Field(8, ge=1)
    clock_file: Path | None = None
    default_model: str = "ResNet-50"
    default_batch_size: int = Field(64, ge=1)
    default_duration_s: float = Field(3600.0, ge=0)
    host: str = "127.0.0.1"
    port: int = Field(8893, ge=0, le=65535)
    log_level: LogLevel = "INFO"
    kube: EmulatorKube = Field(default_factory=EmulatorKube)
    etcd: StateSettings = Field(default_factory=StateSettings)
