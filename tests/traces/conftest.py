"""Fixtures for the trace loaders: the real data mirror and small hand-written files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def _mirror() -> Path | None:
    for cand in (os.environ.get("IADEEP_DATASET_MIRROR"), "/work/shared/data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The local data mirror ($IADEEP_DATASET_MIRROR or /work/shared/data); skip if absent."""
    m = _mirror()
    if m is None:
        pytest.skip("no data mirror: set IADEEP_DATASET_MIRROR")
    return m


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"the data mirror lacks {path}")
    return path


@pytest.fixture(scope="session")
def philly_csv(mirror: Path) -> Path:
    return _need(mirror / "philly" / "philly.csv")


@pytest.fixture(scope="session")
def itp_dir(mirror: Path) -> Path:
    return _need(mirror / "ms-itp" / "raw")


@pytest.fixture(scope="session")
def itp_tarball(mirror: Path) -> Path:
    return _need(mirror / "ms-itp" / "raw-traces.tar.gz")


@pytest.fixture(scope="session")
def openb_csv(mirror: Path) -> Path:
    return _need(mirror / "openb" / "openb_pod_list_default.csv")


@pytest.fixture(scope="session")
def philly_json() -> Path:
    """The hand-written ``cluster_job_log`` fixture (see fixtures/README.md)."""
    return FIXTURES / "philly_cluster_job_log.json"


@pytest.fixture(scope="session")
def philly_full(philly_csv: Path):
    """The whole Philly CSV, loaded once (read-only: copy before changing it)."""
    from iadeep.traces import load_trace

    return load_trace("philly", philly_csv)
