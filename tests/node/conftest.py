"""Fixtures for tests on the real node (containerd + runc + kubelet joined to the real control
plane; ``make node``), with the services' images of ``make images``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    control_plane,
    control_plane_options,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
from iadeep.testing.node import node_binaries, real_node  # noqa: F401


@pytest.fixture(scope="session")
def throughputs_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gavel's ``simulation_throughputs.json`` through the dataset registry (the extender needs it)."""
    from iadeep.datasets import fetch

    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or None
    folder = fetch("gavel-throughputs", progress=False, mirror=mirror, cache_dir=tmp_path_factory.mktemp("cache"))
    return folder / "simulation_throughputs.json"
