"""Fixtures for tests on the real node (containerd + runc + kubelet joined to the real control
plane; ``make node``), with the services' images of ``make images``. Datasets come from the
shared ``tests/conftest.py`` (``throughputs_path``)."""

from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    control_plane,
    control_plane_options,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
from iadeep.testing.node import node_binaries, real_node  # noqa: F401
