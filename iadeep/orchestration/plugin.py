"""The Airflow 3 UI plugin: a run's iadeep results inside Airflow (registered as the ``airflow.plugins``
entry point ``iadeep``, so any Airflow with this package installed loads it).

It adds to Airflow's API server a FastAPI app under ``/iadeep`` and two external views:

- **iadeep results** on every DAG run's page (the tab ``iadeep-results``): the page
  :func:`iadeep.orchestration._results_page.render_results` makes of the run's output folder
  (experiment: summary table, plots, report; sweep: guard figures and ``sweep.png``);
- **iadeep results** in the *Browse* menu: the recent runs of ``iadeep_experiment`` and ``iadeep_sweep``.

Routes (each needs the caller's Airflow login, the UI's cookie or a bearer token, and read access
to the DAG's runs, checked by Airflow's auth manager):

- ``GET /iadeep/`` the list of runs;
- ``GET /iadeep/runs/{dag_id}/{run_id}`` a run's page (HTML; 200 also when the run has no results
  yet, saying why);
- ``GET /iadeep/runs/{dag_id}/{run_id}/files/{name}`` one of the folder's result files
  (:data:`~iadeep.orchestration._results_page.RESULT_FILES`); 404 for any other name.

A run's folder is the ``out`` its final task returned (``report`` of ``iadeep_experiment``,
``combine`` of ``iadeep_sweep``, as XCom ``return_value``). A folder claimed since by another run
(``.iadeep-run.json``, :func:`iadeep.orchestration._airflow.claim_out`) holds that run's files, so
the page says so instead of showing them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from iadeep.orchestration._airflow import CLAIM_FILE
from iadeep.orchestration._results_page import RESULT_FILES, RUN_VIEW_ROUTE, render_index, render_missing, render_results

__all__ = ["ResultsPlugin", "app", "results_folder", "URL_PREFIX", "RUN_VIEW_ROUTE"]

#: Where the app is mounted on the API server.
URL_PREFIX = "/iadeep"
#: The DAGs whose runs have results, and the task whose return value names the output folder.
RESULT_TASKS = {"iadeep_experiment": "report", "iadeep_sweep": "combine"}

_can_read_runs = Depends(requires_access_dag("GET", DagAccessEntity.RUN))
app = FastAPI(title="iadeep results", description="A run's iadeep results in the Airflow UI.")


def results_folder(session: Any, dag_id: str, run_id: str) -> tuple[Path | None, str]:
    """The output folder of one DAG run, or ``None`` and the reason it has none to show.

    Args:
        session: a SQLAlchemy session on Airflow's metadata database.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    task = RESULT_TASKS.get(dag_id)
    if task is None:
        return None, f"DAG {dag_id!r} does not write iadeep results (only {', '.join(RESULT_TASKS)} do)"
    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        return None, f"DAG {dag_id!r} has no run {run_id!r}"
    row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task, key="return_value")).first()
    value = XComModel.deserialize_value(row) if row is not None else None
    if not isinstance(value, dict) or not value.get("out"):
        return None, f"run {run_id!r} of {dag_id} has not written its results yet (run state: {run.state}; its {task!r} task writes them)"
    out = Path(str(value["out"]))
    try:
        held = json.loads((out / CLAIM_FILE).read_text())
    except (OSError, ValueError):
        held = None
    if isinstance(held, dict) and (held.get("dag_id"), held.get("run_id")) != (dag_id, run_id):
        return None, (f"the output folder {out} has since been claimed by run {held.get('run_id')!r} of DAG "
                      f"{held.get('dag_id')!r}: its files are that run's, not this one's")
    return out, ""


@app.get("/", response_class=HTMLResponse, dependencies=[_can_read_runs])
def index(session: SessionDep, limit: int = 50) -> str:
    """The recent runs of the DAGs with results, newest first (at most ``limit``)."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    rows = session.scalars(select(DagRun).where(DagRun.dag_id.in_(list(RESULT_TASKS)))
                           .order_by(DagRun.id.desc()).limit(max(1, min(limit, 500))))
    from urllib.parse import quote

    runs = [{"dag_id": r.dag_id, "run_id": r.run_id, "state": r.state, "start_date": r.start_date,
             "href": f"runs/{quote(r.dag_id, safe='')}/{quote(r.run_id, safe='')}"} for r in rows]
    return render_index(runs)


@app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[_can_read_runs])
def run_page(dag_id: str, run_id: str, session: SessionDep) -> str:
    """The results page of one run (HTML)."""
    out, why = results_folder(session, dag_id, run_id)
    if out is None:
        return render_missing(why)
    try:
        return render_results(out, {"DAG": dag_id, "run": run_id})
    except (OSError, ValueError) as exc:  # the folder is gone, unreadable or half written
        return render_missing(f"run {run_id!r} of {dag_id}: {exc}")


@app.get("/runs/{dag_id}/{run_id}/files/{name}", dependencies=[_can_read_runs])
def run_file(dag_id: str, run_id: str, name: str, session: SessionDep) -> FileResponse:
    """One result file of a run's folder (404: not a result file, no results, or missing)."""
    allowed = {n for names in RESULT_FILES.values() for n in names}
    if name not in allowed:
        raise HTTPException(404, f"{name!r} is not a result file; these are: {', '.join(sorted(allowed))}")
    out, why = results_folder(session, dag_id, run_id)
    if out is None:
        raise HTTPException(404, why)
    if not (out / name).is_file():
        raise HTTPException(404, f"{out / name} does not exist")
    return FileResponse(out / name)


class ResultsPlugin(AirflowPlugin):
    """The plugin Airflow loads (entry point ``airflow.plugins``: ``iadeep``)."""

    name = "iadeep_results"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "iadeep results"}]
    external_views = [
        {"name": "iadeep results", "href": URL_PREFIX.lstrip("/") + "/runs/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": RUN_VIEW_ROUTE},
        {"name": "iadeep results", "href": URL_PREFIX.lstrip("/") + "/", "destination": "nav", "category": "browse",
         "url_route": "iadeep-runs"},
    ]
