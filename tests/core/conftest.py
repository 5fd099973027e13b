"""Fixtures for the policy core and simulator tests: real Gavel data and a real Philly slice (tests/conftest.py fetches them)."""

from __future__ import annotations

import pytest

from iadeep.interference import InterferenceModel

@pytest.fixture(scope="session")
def model(throughputs_path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)


@pytest.fixture(scope="session")
def workload(philly_path):
    """150 real Philly jobs (1-8 GPUs), arrivals rescaled to mean offered load 1.5 on 20 GPUs."""
    from iadeep.traces import TraceOptions, load_trace

    opts = TraceOptions(start_job=40_000, n_jobs=150, max_gpus=8, target_load=1.5, cluster_gpus=20, seed=0)
    return load_trace("philly", philly_path, opts)
