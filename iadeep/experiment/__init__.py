"""Trace-driven experiments: configuration and steps shared by the CLI and the Airflow DAG."""

from iadeep.experiment._compare import run_compare
from iadeep.experiment._config import DEFAULT_POLICIES, TRACE_DATASETS, ExperimentConfig
from iadeep.experiment._jobstatus import job_outcome
from iadeep._params import ConfigError, validate_params
from iadeep.experiment._steps import (build_workload, cluster_of, fetch_inputs, load_workload, run_experiment, run_live, run_policy,
                                      write_report)
from iadeep.experiment._draw import DrawnSetting, draw_settings, read_draw, read_draw_run
from iadeep.experiment._sweep import (GUARD_FLAG, GUARD_GOALS, by_chance, check_grid, draw_inputs, guard_figures, guard_lines,
                                      noise_seed, plot_sweep, run_draw, run_setting, run_sweep, sweep_table, write_sweep_files)

__all__ = ["ConfigError", "DEFAULT_POLICIES", "ExperimentConfig", "TRACE_DATASETS", "build_workload", "cluster_of", "fetch_inputs",
           "job_outcome", "load_workload", "run_experiment", "run_policy", "validate_params", "write_report",
           "DrawnSetting", "draw_settings", "read_draw", "read_draw_run", "GUARD_GOALS", "guard_figures", "guard_lines", "run_draw", "run_setting", "sweep_table",
           "GUARD_FLAG", "check_grid", "draw_inputs", "plot_sweep", "run_compare", "run_live", "run_sweep", "write_sweep_files", "api_json", "job_manifest",
           "by_chance", "noise_seed"]


def __getattr__(name: str) -> object:
    """The kubernetes backend's :func:`job_manifest` (the ``batch/v1`` Job of one trace job) and
    :func:`api_json` (a ``kubernetes`` client call's body as JSON) load on first use, with the
    ``kubernetes`` client.

    Raises:
        AttributeError: ``name`` is not exported here.
    """
    if name == "job_manifest":
        from iadeep.experiment._live import job_manifest

        return job_manifest
    if name == "api_json":
        from iadeep.experiment._replay import api_json

        return api_json
    raise AttributeError(f"module 'iadeep.experiment' has no attribute {name!r}")
