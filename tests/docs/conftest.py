"""Fixtures of the documentation tests: the checkout, and a way to build the site."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout (where ``mkdocs.yml`` and ``docs/`` are)."""
    return ROOT


@pytest.fixture(scope="session")
def build_site() -> Callable[[Path, Path], subprocess.CompletedProcess[str]]:
    """``build_site(config, site_dir)``: ``mkdocs build --strict`` of ``config`` into ``site_dir``.

    Runs in a child process with this checkout first on ``PYTHONPATH`` (the docs hook imports
    the package); returns the finished process (stdout and stderr as text), never raises on a
    failed build.
    """

    def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   NO_MKDOCS_2_WARNING="1")
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                               "-d", str(site_dir)], cwd=config.parent, env=env, capture_output=True,
                              text=True, timeout=300)

    return build
