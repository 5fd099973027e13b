"""Settings of the device plugin, from ``IADEEP_DEVICEPLUGIN_*`` variables (``__`` nests)::

    IADEEP_DEVICEPLUGIN_NODE=gpu-node-3          # the downward API's spec.nodeName
    IADEEP_DEVICEPLUGIN_SOCKET_DIR=/var/lib/kubelet/device-plugins
    IADEEP_DEVICEPLUGIN_BACKEND=nvml             # or emulated (then EMULATED__COUNT, __MEM_GIB, ...)
    IADEEP_DEVICEPLUGIN_KUBE__IN_CLUSTER=true
    IADEEP_ETCD_ENDPOINTS=...                    # the state store, as for every service
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep._serving import LogLevel, NodeName
from iadeep.state import StateSettings

__all__ = ["DevicePluginSettings", "EmulatedGpus", "KubeAccess"]


class EmulatedGpus(BaseModel):
    """The emulated backend (chosen with ``backend = "emulated"``; never implicitly).

    Attributes:
        count / mem_gib / model: the emulated GPUs.
        state_file: JSON re-read every poll to emulate health changes and replaced GPUs
            (see :class:`iadeep.deviceplugin.EmulatedBackend`).
    """

    count: int = Field(4, ge=1)
    mem_gib: int = Field(16, ge=1)
    model: str = "Emulated-GPU"
    state_file: Path | None = None


class KubeAccess(BaseModel):
    """How to reach the Kubernetes API (to find and mark the pods the extender bound).

    Attributes:
        in_cluster: use the pod's service account.
        kubeconfig: a kubeconfig file otherwise (``None``: ``$KUBECONFIG`` or ``~/.kube/config``).
    """

    in_cluster: bool = False
    kubeconfig: Path | None = None


class DevicePluginSettings(BaseSettings):
    """The device plugin.

    Attributes:
        node: this node's name; required.
        socket_dir: the kubelet's device-plugin folder (its ``kubelet.sock`` and our sockets).
        backend: ``nvml`` (real GPUs) or ``emulated``.
        emulated: the emulated GPUs.
        mem_resource / count_resource: the resources advertised (the extender manages the same names).
        lease_ttl_s: the node inventory's etcd lease; it disappears this long after the plugin dies.
        poll_s: how often GPUs, the kubelet socket and the lease are checked.
        host / port: where ``/healthz``, ``/readyz`` (503 while etcd or the kubelet does not
            answer) and ``/metrics`` (Prometheus text) are served; loopback and 8892 by default.
        gpu_model: the model name published for every GPU of the node (``GpuInfo.model``, matched
            against a pod's ``iadeep.io/gpu-models``, e.g. ``V100M32``); empty (default): the
            backend's own name (NVML's product name, e.g. ``Tesla V100-SXM2-32GB``, or the
            emulated GPUs' ``model``).
        kube: Kubernetes API access.
        etcd: the state store.
        log_level: Python logging level.
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_DEVICEPLUGIN_", env_nested_delimiter="__", extra="ignore")

    node: NodeName
    socket_dir: Path = Path("/var/lib/kubelet/device-plugins")
    backend: Literal["nvml", "emulated"] = "nvml"
    emulated: EmulatedGpus = Field(default_factory=EmulatedGpus)
    mem_resource: str = "iadeep.io/gpu-mem"
    count_resource: str = "iadeep.io/gpu-count"
    lease_ttl_s: int = Field(15, ge=2)
    poll_s: float = Field(1.0, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(8892, ge=0, le=65535)
    gpu_model: str = ""
    kube: KubeAccess = Field(default_factory=KubeAccess)
    etcd: StateSettings = Field(default_factory=StateSettings)
    log_level: LogLevel = "INFO"
