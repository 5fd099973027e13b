"""Fixtures of the emulator tests: the real Gavel measurements (tests/conftest.py fetches them),
and the local control plane (one kwok GPU node) for the tests that need the API server."""

from __future__ import annotations

import pytest

from iadeep.interference import InterferenceModel
from iadeep.testing.controlplane import (  # noqa: F401 - fixtures by name
    control_plane,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)


@pytest.fixture(scope="session")
def model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)


@pytest.fixture(scope="session")
def control_plane_options() -> dict:
    return {"nodes": 1, "gpus_per_node": 2, "gpu_mem_gib": 16}
