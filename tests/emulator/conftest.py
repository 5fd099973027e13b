"""Fixtures of the emulator tests: the real Gavel measurements through the dataset mirror."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iadeep.interference import InterferenceModel

MIRROR_DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(scope="session")
def throughputs_path(tmp_path_factory) -> Path:
    from iadeep.datasets import fetch

    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or (str(MIRROR_DEFAULT) if MIRROR_DEFAULT.exists() else "")
    if not mirror:
        pytest.skip("no dataset mirror: set IADEEP_DATASET_MIRROR")
    folder = fetch("gavel-throughputs", progress=False, mirror=mirror, cache_dir=tmp_path_factory.mktemp("cache"))
    return folder / "simulation_throughputs.json"


@pytest.fixture(scope="session")
def model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)
