"""Fixtures shared by every test folder: real datasets through the registry, one cache per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from iadeep.testing import fetch_dataset


@pytest.fixture(scope="session")
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dataset cache for the whole session (never the user's own cache)."""
    return tmp_path_factory.mktemp("dataset-cache")


@pytest.fixture(scope="session")
def dataset(dataset_cache: Path):
    """``dataset(name) -> folder``: a registered dataset fetched and verified (never skipped)."""
    return lambda name: fetch_dataset(name, dataset_cache)


@pytest.fixture(scope="session")
def throughputs_path(dataset) -> Path:
    """Gavel's measured ``simulation_throughputs.json``."""
    return dataset("gavel-throughputs") / "simulation_throughputs.json"


@pytest.fixture(scope="session")
def philly_path(dataset) -> Path:
    """The Philly CSV (Pollux's preprocessed ``philly.csv``)."""
    return dataset("philly") / "philly.csv"
