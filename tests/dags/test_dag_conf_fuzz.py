"""Property-based fuzzing of the DAG's run conf (hypothesis, a bounded number of examples): the
first task's validator either hands on a typed configuration that round-trips unchanged through
every later task's ``from_dict``, or fails with a ConfigError naming a parameter of the conf."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.airflow

FUZZ = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

PARAMS = ["trace", "trace_file", "jobs", "start_job", "window_start_s", "window_end_s", "virtual_cluster", "max_gpus",
          "arrival_scale", "iadeep_arrival_rule", "target_load", "mix", "skip_bad_rows", "policies", "nodes",
          "gpus_per_node", "gpu_mem_gib", "gpu_type", "seed", "backfill", "predictor", "out"]
values = (st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
          | st.floats(0, 100).map(float.__round__).map(float)  # whole-number floats
          | st.sampled_from(["philly", "openb", "iadeep", "gavel", "v100", "oracle", "learned", "x", "", "2", "out/x"])
          | st.lists(st.sampled_from(["iadeep", "exclusive", "antman", "gandiva", "nope", 3]), max_size=5))
confs = st.dictionaries(st.sampled_from(PARAMS) | st.text(max_size=6), values, max_size=6)


@FUZZ
@given(conf=confs)
def test_conf_is_validated_once_or_names_the_parameter(dag_module, conf: dict) -> None:
    from iadeep.experiment import ConfigError, ExperimentConfig

    try:
        config = dag_module.config_from_params(conf)
    except ConfigError as exc:
        assert exc.parameter is None or exc.parameter in conf or exc.parameter.split("[")[0] in conf or exc.parameter in PARAMS, exc
        return
    # what the later tasks receive through XCom (JSON) is the same typed configuration
    again = ExperimentConfig.from_dict(json.loads(json.dumps(config)))
    assert again.to_dict() == config
    for name in ("jobs", "start_job", "max_gpus", "nodes", "gpus_per_node", "seed"):
        assert config[name] is None or type(config[name]) is int, (name, config[name])
    for name in ("gpu_mem_gib", "arrival_scale"):
        assert type(config[name]) is float
