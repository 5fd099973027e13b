"""Fixtures of the tuner tests: the real Gavel measurements (``throughputs_path`` from tests/conftest.py)."""

from __future__ import annotations

import pytest

from iadeep.interference import InterferenceModel


@pytest.fixture(scope="session")
def interference_model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)
