"""Trace-driven experiments: configuration and steps shared by the CLI and the Airflow DAG."""

from iadeep.experiment._config import DEFAULT_POLICIES, TRACE_DATASETS, ExperimentConfig
from iadeep.experiment._jobstatus import job_outcome
from iadeep._params import ConfigError, validate_params
from iadeep.experiment._steps import build_workload, cluster_of, fetch_inputs, load_workload, run_experiment, run_policy, write_report
from iadeep.experiment._draw import DrawnSetting, draw_settings, read_draw
from iadeep.experiment._sweep import GUARD_GOALS, guard_figures, guard_lines, run_draw, run_setting, sweep_table

__all__ = ["ConfigError", "DEFAULT_POLICIES", "ExperimentConfig", "TRACE_DATASETS", "build_workload", "cluster_of", "fetch_inputs",
           "job_outcome", "load_workload", "run_experiment", "run_policy", "validate_params", "write_report",
           "DrawnSetting", "draw_settings", "read_draw", "GUARD_GOALS", "guard_figures", "guard_lines", "run_draw", "run_setting", "sweep_table"]
