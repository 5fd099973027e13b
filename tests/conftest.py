"""Fixtures shared by every test folder: real datasets through the registry, one cache per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from iadeep.testing import fetch_dataset

# `make test` (and so CI) runs hypothesis with the profile "ci": the same examples every run, so a
# red run is reproducible and never a draw of chance; plain `pytest` explores new examples each run
# (failures found there are kept in .hypothesis/ and retried first).
settings.register_profile("ci", derandomize=True, print_blob=True)


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


class SteppedWall:
    """A wall clock (Unix s) that moves only when a test steps it: for code that takes a ``wall``
    callable (:class:`iadeep.emulator.HeldClock`, the live replay's holds)."""

    #: float64 resolves about 0.24 us at today's Unix times: differences of reads agree to this
    EPS = 1e-6

    def __init__(self) -> None:
        self.t = 1_764_800_000.0

    def __call__(self) -> float:
        return self.t

    def step(self, s: float) -> None:
        self.t += s


@pytest.fixture
def wall() -> SteppedWall:
    """A fresh :class:`SteppedWall`."""
    return SteppedWall()


@pytest.fixture(scope="session")
def philly_path(dataset) -> Path:
    """The Philly CSV (Pollux's preprocessed ``philly.csv``)."""
    return dataset("philly") / "philly.csv"



# -- parallel runs (`make test TEST_WORKERS=2`: `pytest -n 2`, pytest-xdist; README "Tests") -------------
# Each folder under tests/ goes to one worker as a whole and runs there in file order, as in a
# serial run: a folder's session- and module-scoped services (etcd, the local control plane, the
# real node, Airflow) start once. (xdist's own `--dist loadgroup` set module-scoped fixtures up
# twice per module, measured with xdist 3.8.) tests/node (kubelet, containerd, runc) and
# tests/compose (podman) drive the machine's container runtimes: one unit, one after the other.
_UNIT_OF_FOLDER = {"node": "containers", "compose": "containers"}


def _unit(nodeid: str) -> str:
    """The scheduling unit of a test: its folder under tests/ (``tests/live/test_x.py::t`` -> ``live``)."""
    parts = nodeid.split("::", 1)[0].split("/")
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
    return _UNIT_OF_FOLDER.get(folder, folder)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest without xdist: serial runs need none of this
    pass
else:
    class FolderScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with a folder (``_unit``) as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    def pytest_xdist_make_scheduler(config: pytest.Config, log) -> FolderScheduling:
        """One folder, one worker (see above)."""
        return FolderScheduling(config, log)
