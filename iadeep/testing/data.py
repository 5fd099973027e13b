"""pytest fixtures for the measured interference data: Gavel's ``simulation_throughputs.json``
through the dataset registry (mirror from ``IADEEP_DATASET_MIRROR``, or ``../shared/data`` beside
the repository), and the :class:`~iadeep.interference.InterferenceModel` built from it.

Use from a conftest: ``from iadeep.testing.data import throughputs_path, interference_model  # noqa: F401``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iadeep.interference import InterferenceModel

__all__ = ["throughputs_path", "interference_model"]

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def throughputs_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checksum-verified Gavel file (fails, never skips, under ``CI`` when no mirror is set)."""
    from iadeep.datasets import fetch

    default = _REPO.parent / "shared" / "data"
    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or (str(default) if default.exists() else "")
    if not mirror:
        if os.environ.get("CI"):
            pytest.fail("no dataset mirror: set IADEEP_DATASET_MIRROR")
        pytest.skip("no dataset mirror: set IADEEP_DATASET_MIRROR")
    folder = fetch("gavel-throughputs", progress=False, mirror=mirror, cache_dir=tmp_path_factory.mktemp("cache"))
    return folder / "simulation_throughputs.json"


@pytest.fixture(scope="session")
def interference_model(throughputs_path: Path) -> InterferenceModel:
    """Gavel's V100 measurements as an interference model."""
    return InterferenceModel.from_file(throughputs_path)
