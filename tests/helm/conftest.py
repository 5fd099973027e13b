"""Fixtures of the chart's tests: the helm binary of ``make helm`` (skips without it; fails under CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iadeep.testing.controlplane import helm_binary


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary (``make helm``: built from Go modules into ~/.cache/iadeep/helm)."""
    return helm_binary()
