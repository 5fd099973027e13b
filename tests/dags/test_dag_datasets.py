"""``iadeep_datasets`` in-process: one mapped fetch per dataset into the Variable's folder, verified;
an unknown name fails the first task before any download."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def _states(dag_id: str, run_id: str) -> dict[str, list[str]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).all()
        out: dict[str, list[str]] = {}
        for ti in tis:
            out.setdefault(ti.task_id, []).append(str(ti.state).rsplit(".", 1)[-1].lower())
        return out


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_fetches_each_dataset_into_the_variables_folder(dagbag, airflow_db, real_data, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from iadeep.datasets import verify

    cache = tmp_path / "dataset-dir"
    monkeypatch.setenv("AIRFLOW_VAR_IADEEP_DATASET_DIR", str(cache))
    dag = dagbag.dags["iadeep_datasets"]
    run = dag.test(run_conf={"datasets": ["gavel-throughputs", "openb"]})
    states = _states(dag.dag_id, run.run_id)
    assert str(run.state).lower().endswith("success"), states
    assert states["fetch"] == ["success", "success"]
    for name in ("gavel-throughputs", "openb"):
        results = verify(name, cache_dir=cache)
        assert results and all(r.ok for r in results), results

    bad = dag.test(run_conf={"datasets": ["philly", "no-such-dataset"]})
    states = _states(dag.dag_id, bad.run_id)
    assert states["names"] == ["failed"] and "success" not in states.get("fetch", []), states
    assert not (cache / "datasets" / "philly").exists()
