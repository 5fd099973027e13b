"""Emulated GPU execution for nodes without real GPUs (kwok nodes, or a real node with emulated GPUs).

Run it with ``iadeep emulator serve`` (settings from ``IADEEP_EMULATOR_*``, etcd from
``IADEEP_ETCD_*``). It publishes each emulated node's GPU inventory, advances every running job
at the rate the interference model gives for its GPU's co-located set (the simulator's rule,
:mod:`._gpus`), reports measured throughput to the state store and completes pods when their work
is done (:mod:`._service`, :mod:`._kube`).
"""

from iadeep._host import HeldClock
from iadeep.emulator._gpus import EmulatedGpus, EmulatedJob, RateChange
from iadeep.emulator._kube import KubeApi, KubeCallError
from iadeep.emulator._service import (
    ANNOTATION_EMULATED,
    ANNOTATION_EMULATED_END,
    ANNOTATION_EMULATED_START,
    ANNOTATION_SPEEDUP,
    NODE_ANNOTATION_GPUS,
    EmulatorService,
    node_inventory,
)
from iadeep.emulator._settings import EmulatorKube, EmulatorSettings

__all__ = [
    "ANNOTATION_EMULATED",
    "ANNOTATION_EMULATED_END",
    "ANNOTATION_EMULATED_START",
    "ANNOTATION_SPEEDUP",
    "NODE_ANNOTATION_GPUS",
    "EmulatedGpus",
    "EmulatedJob",
    "EmulatorKube",
    "EmulatorService",
    "EmulatorSettings",
    "HeldClock",
    "KubeApi",
    "KubeCallError",
    "RateChange",
    "build_emulator",
    "node_inventory",
]


def build_emulator(settings: EmulatorSettings) -> EmulatorService:
    """An :class:`EmulatorService` wired from ``settings`` (etcd store, Kubernetes client, Gavel model).

    Raises:
        KubeCallError: the Kubernetes configuration cannot be loaded.
        OSError, ValueError: ``clock_file`` cannot be opened or is not a clock file.
        FileNotFoundError: ``throughputs_file`` is not set or does not exist (a service does not
            download datasets: ``iadeep datasets fetch gavel-throughputs`` does).
    """
    from iadeep.interference import InterferenceModel
    from iadeep.state import EtcdStateStore

    if settings.throughputs_file is None or not settings.throughputs_file.is_file():
        raise FileNotFoundError(f"throughputs file {settings.throughputs_file} does not exist: set --throughputs-file "
                                "(IADEEP_EMULATOR_THROUGHPUTS_FILE) to Gavel's simulation_throughputs.json")

    kube = KubeApi(kubeconfig=str(settings.kube.kubeconfig) if settings.kube.kubeconfig else None,
                   in_cluster=settings.kube.in_cluster, timeout_s=settings.kube.request_timeout_s)
    model = InterferenceModel.from_file(settings.throughputs_file, settings.gpu_type)
    held = HeldClock(settings.clock_file) if settings.clock_file is not None else None
    return EmulatorService(settings, store=EtcdStateStore(settings.etcd), kube=kube, model=model, held=held)
