"""Fixtures for the policy core and simulator tests: real Gavel data and a real Philly slice via the mirror."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iadeep.interference import InterferenceModel

MIRROR_DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(scope="session")
def data_env(tmp_path_factory):
    """Point the dataset registry at the mirror (env or ../shared/data) and a temporary cache."""
    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or (str(MIRROR_DEFAULT) if MIRROR_DEFAULT.exists() else "")
    if not mirror:
        pytest.skip("no dataset mirror: set IADEEP_DATASET_MIRROR")
    return {"mirror": mirror, "cache_dir": tmp_path_factory.mktemp("cache")}


@pytest.fixture(scope="session")
def throughputs_path(data_env) -> Path:
    from iadeep.datasets import fetch

    return fetch("gavel-throughputs", progress=False, **data_env) / "simulation_throughputs.json"


@pytest.fixture(scope="session")
def philly_path(data_env) -> Path:
    from iadeep.datasets import fetch

    return fetch("philly", progress=False, **data_env) / "philly.csv"


@pytest.fixture(scope="session")
def model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)


@pytest.fixture(scope="session")
def workload(philly_path):
    """150 real Philly jobs (1-8 GPUs), arrivals rescaled to mean offered load 1.5 on 20 GPUs."""
    from iadeep.traces import TraceOptions, load_trace

    opts = TraceOptions(start_job=40_000, n_jobs=150, max_gpus=8, target_load=1.5, cluster_gpus=20, seed=0)
    return load_trace("philly", philly_path, opts)
