"""Airflow test environment for the DAGs in ``dags/``.

Airflow reads ``AIRFLOW_HOME`` and its ``AIRFLOW__*`` settings once, when it is first imported, so
they are set here, when pytest imports this conftest (before any test module of this folder is
collected): a throwaway ``AIRFLOW_HOME`` (SQLite DB, logs, airflow.cfg), no example DAGs, and the
repository's ``dags/`` as the DAGs folder. The test modules import Airflow inside tests/fixtures.
The database is created only for the tests that run a DAG (fixture ``airflow_db``, about 1 s).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO / "dags"
DAG_FILE = DAGS_FOLDER / "iadeep_experiment.py"

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="iadeep-airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
_ENV = {
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
}
_AIRFLOW_PREIMPORTED = "airflow" in sys.modules
if not _AIRFLOW_PREIMPORTED:
    os.environ.update(_ENV)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The throwaway ``AIRFLOW_HOME``; skips when Airflow is missing or was configured elsewhere first."""
    pytest.importorskip("airflow", reason="Apache Airflow is not installed (pip install -e '.[airflow]')")
    from airflow import configuration

    if _AIRFLOW_PREIMPORTED or Path(configuration.AIRFLOW_HOME) != _AIRFLOW_HOME:
        pytest.skip(f"Airflow was imported before tests/dags/conftest.py set AIRFLOW_HOME (it uses {configuration.AIRFLOW_HOME})")
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """A migrated SQLite metadata DB in the throwaway home (in-process ``airflow db migrate``)."""
    from airflow.utils import db

    db.upgradedb()
    return airflow_home / "airflow.db"


@pytest.fixture(scope="session")
def dagbag(airflow_home: Path):
    """The DagBag of the repository's ``dags/`` folder."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_FOLDER))


@pytest.fixture(scope="session")
def dag_module(airflow_home: Path):
    """``dags/iadeep_experiment.py`` imported under a module name of its own (for its helpers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("iadeep_dags_experiment", DAG_FILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def real_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Real datasets into a fresh cache in ``tmp_path``, from ``$IADEEP_DATASET_MIRROR`` when set
    (the Makefile and .ci/run set it) or the upstream hosts, as the registry documents; never skips."""
    mirror = os.environ.get("IADEEP_DATASET_MIRROR", "")
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(tmp_path / "cache"))
    yield mirror



from iadeep.testing.controlplane import controlplane_binaries  # noqa: E402,F401 - pytest finds fixtures by name
