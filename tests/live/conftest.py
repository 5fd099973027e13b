"""Fixtures of the live-backend tests: the dataset mirror, and the control-plane binaries (skip, or
fail under CI, when ``make controlplane`` has not run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iadeep.testing.controlplane import controlplane_binaries  # noqa: F401 - pytest finds fixtures by name

MIRROR_DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(scope="session")
def data_env(tmp_path_factory, monkeypatch_session):
    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or (str(MIRROR_DEFAULT) if MIRROR_DEFAULT.exists() else "")
    if not mirror:
        pytest.skip("no dataset mirror: set IADEEP_DATASET_MIRROR")
    monkeypatch_session.setenv("IADEEP_DATASET_MIRROR", mirror)
    monkeypatch_session.setenv("IADEEP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    return mirror


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()
