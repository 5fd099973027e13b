"""``iadeep_regression`` in-process (``dag.test()``) on the real Philly trace through the mirror: the
baseline passes, a deliberately worsened policy parameter fails the run, and the history keeps both."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]  # minutes on a loaded 2-core machine

# one 60-job window at load 1.5: iadeep's avg JCT is about 7 % higher when it may not co-locate
CONF = {"start_jobs": [40000], "seeds": [0], "jobs": 60, "target_load": 1.5, "policies": ["iadeep", "exclusive"],
        "tolerance": 0.02}


def _states(dag_id: str, run_id: str) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).all()
        return {ti.task_id: str(ti.state) for ti in tis}


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_baseline_passes_and_a_worse_policy_parameter_fails(dagbag, airflow_db, real_data, tmp_path: Path) -> None:
    dag = dagbag.dags["iadeep_regression"]
    directory = tmp_path / "regression"
    conf = {**CONF, "regression_dir": str(directory), "draw": 2, "draw_seed": 11}

    # the stored baseline: the same settings run directly through the package (as an earlier run left it)
    from iadeep.experiment import ExperimentConfig, fetch_inputs
    from iadeep.experiment._sweep import run_setting
    from iadeep.orchestration import RegressionSpec, record

    spec = RegressionSpec.from_dict(CONF)
    base = ExperimentConfig(jobs=60, target_load=1.5, policies=spec.policies, out=str(tmp_path / "direct"))
    rows = run_setting(base, fetch_inputs(base, progress=False), 40000, 1.5, 0)
    record(directory, rows, [], run_id="stored", spec=spec)
    baseline = json.loads((directory / "baseline.json").read_text())
    assert set(baseline["results"]) == {"40000-1.5-0/iadeep", "40000-1.5-0/exclusive"}

    again = dag.test(run_conf={**conf, "draw_repeats": 2})  # the same code and settings: identical numbers, passes
    assert str(again.state).endswith("success"), _states(dag.dag_id, again.run_id)

    worse = dag.test(run_conf={**conf, "draw_repeats": 1, "policy_options": {"iadeep": {"colocation_limit": 1}}})
    states = _states(dag.dag_id, worse.run_id)
    assert str(worse.state).endswith("failed") and states["check"].endswith("failed"), states
    assert states["simulate_setting"].endswith("success"), states

    history = pd.read_csv(directory / "history.csv")
    assert list(dict.fromkeys(history["run_id"])) == ["stored", again.run_id, worse.run_id] and len(history) == 6
    assert not history[history["run_id"] == again.run_id]["regressed"].any()
    last = history[history["run_id"] == worse.run_id].set_index("policy")
    assert bool(last.loc["iadeep", "regressed"]) and not bool(last.loc["exclusive", "regressed"])
    assert last.loc["iadeep", "avg_jct_s"] > baseline["results"]["40000-1.5-0/iadeep"]["avg_jct_s"] * 1.02
    # the failing run does not move the baseline
    assert json.loads((directory / "baseline.json").read_text()) == baseline
    assert (directory / "trend.png").stat().st_size > 0
    # beside the fixed settings, two drawn ones: their guard per run in draws.csv, their rows kept
    draws = pd.read_csv(directory / "draws.csv")
    assert list(draws["run_id"]) == [again.run_id, worse.run_id] and set(draws["seed"]) == {11}
    assert (draws["settings"] == 2).all() and draws["worst_vs_exclusive"].notna().all()  # no packing baseline ran
    # the first run's drawn settings ran twice each (draw_repeats), the second's once
    assert list(draws["repeats"]) == [2, 1] and draws["noise_band_median"].notna().tolist() == [True, False]
    assert len(pd.read_csv(directory / "draws" / "11.csv")) == 2 * len(spec.policies)


def test_compare_flags_only_values_beyond_the_tolerance() -> None:
    from iadeep.orchestration import RegressionSpec, compare

    spec = RegressionSpec(tolerance=0.05, metrics=("avg_jct_s",))
    base = {"results": {"s/iadeep": {"avg_jct_s": 100.0}, "s/exclusive": {"avg_jct_s": 200.0}}}
    rows = [{"setting": "s", "policy": "iadeep", "avg_jct_s": 105.0},  # exactly at the tolerance: fine
            {"setting": "s", "policy": "exclusive", "avg_jct_s": 211.0},  # 5.5 % worse
            {"setting": "new", "policy": "iadeep", "avg_jct_s": 1e9}]  # not in the baseline: new, not a regression
    out = compare(rows, base, spec)
    assert [(r["policy"], r["metric"]) for r in out] == [("exclusive", "avg_jct_s")]
    assert out[0]["change"] == pytest.approx(0.055)
    assert compare(rows, None, spec) == []
    with pytest.raises(ValueError, match="unknown metrics"):
        RegressionSpec(metrics=("throughput",))
    with pytest.raises(ValueError, match="unknown regression parameters"):
        RegressionSpec.from_dict({"tolerence": 0.1})
