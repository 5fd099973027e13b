"""Fixtures for the trace loaders: the real traces through the registry and small hand-written files."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def philly_csv(philly_path: Path) -> Path:
    return philly_path


@pytest.fixture(scope="session")
def itp_dir(dataset) -> Path:
    """The ten ITP cluster CSVs, unpacked by the registry from the pinned tarball."""
    return dataset("ms-itp") / "raw-traces"


@pytest.fixture(scope="session")
def itp_tarball(dataset) -> Path:
    return dataset("ms-itp") / "raw-traces.tar.gz"


@pytest.fixture(scope="session")
def openb_csv(dataset) -> Path:
    return dataset("openb") / "openb_pod_list_default.csv"


@pytest.fixture(scope="session")
def philly_json() -> Path:
    """The hand-written ``cluster_job_log`` fixture (see fixtures/README.md)."""
    return FIXTURES / "philly_cluster_job_log.json"


@pytest.fixture(scope="session")
def philly_full(philly_csv: Path):
    """The whole Philly CSV, loaded once (read-only: copy before changing it)."""
    from iadeep.traces import load_trace

    return load_trace("philly", philly_csv)
