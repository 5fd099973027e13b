"""Fixtures of the emulator tests: the real Gavel measurements (tests/conftest.py fetches them)."""

from __future__ import annotations

import pytest

from iadeep.interference import InterferenceModel


@pytest.fixture(scope="session")
def model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)
