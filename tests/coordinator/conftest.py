"""Fixtures of the coordinator tests: a real etcd, the real Gavel data, a real tuner process
(small trial budget so that a session takes seconds), emulated job processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iadeep.interference import InterferenceModel
from iadeep.testing.etcd import etcd_server, etcd_settings, etcd_store  # noqa: F401 - fixtures by name
from iadeep.testing.services import EmulatedJobs, TunerProcess

@pytest.fixture(scope="session")
def interference_model(throughputs_path) -> InterferenceModel:
    """The model as ``iadeep coordinator serve`` and ``iadeep tuner serve`` load it (memory in
    whole GiB, as live reservations are), so the in-process coordinator and the tuner process agree."""
    return InterferenceModel.from_file(throughputs_path).whole_gib()


TUNER_ENV = {"IADEEP_TUNER_STOP__BUDGET": "4", "IADEEP_TUNER_STOP__PATIENCE": "3"}


@pytest.fixture
def tuner(throughputs_path, tmp_path) -> Iterator[TunerProcess]:
    t = TunerProcess(throughputs_path, tmp_path / "tuner.db", env=TUNER_ENV)
    t.start()
    yield t
    t.kill()


@pytest.fixture
def jobs(tmp_path, throughputs_path, etcd_settings) -> Iterator[EmulatedJobs]:
    j = EmulatedJobs(tmp_path / "gpu0", throughputs_path, etcd_settings)
    yield j
    j.stop_all()
