"""Fixtures of the chart's tests: the helm binary of ``make helm`` (skips without it; fails under CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iadeep.orchestration import find_helm
from iadeep.testing.controlplane import _required


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary (``make helm``: built from Go modules into ~/.cache/iadeep/helm)."""
    try:
        return find_helm()
    except FileNotFoundError as exc:
        if _required():
            pytest.fail(f"{exc} (required under CI)", pytrace=False)
        pytest.skip(str(exc))
