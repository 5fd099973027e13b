"""Airflow DAG ``iadeep_datasets``: fetch and verify the registered datasets into the dataset folder.

::

    names -> fetch[dataset] (one mapped task per dataset) -> summary

Each ``fetch`` is :func:`iadeep.datasets.fetch` (size and SHA-256 checked; files already verified
are not downloaded again, so retries and reruns are cheap) followed by :func:`iadeep.datasets.verify`.
The folder is the Variable ``iadeep_dataset_dir`` (else ``$IADEEP_CACHE_DIR``, else the registry's user cache
folder, as for the CLI), which the experiment DAGs read;
``$IADEEP_DATASET_MIRROR`` replaces the upstream hosts as for the CLI.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task


@dag(dag_id="iadeep_datasets", schedule=None, catchup=False, tags=["iadeep", "datasets"], doc_md=__doc__,
     params={"datasets": Param(["philly", "ms-itp", "openb", "gavel-throughputs"], type="array", items={"type": "string"},
                               minItems=1, uniqueItems=True, description="Registered dataset names (datasets/registry.toml).")},
     default_args={"retries": 2})
def iadeep_datasets() -> None:
    """Fetch and verify datasets (see the module docstring)."""

    @task
    def names(params: dict[str, Any] | None = None) -> list[str]:
        """The requested names, checked against the registry before any download."""
        from airflow.sdk.exceptions import AirflowFailException

        from iadeep.datasets import list_datasets

        known = {d.name for d in list_datasets()}
        bad = [n for n in params["datasets"] if n not in known]
        if bad:  # bad input: no retry
            raise AirflowFailException(f"unknown datasets {bad}; known: {', '.join(sorted(known))}")
        return list(params["datasets"])

    @task(map_index_template="{{ name }}")
    def fetch(name: str) -> dict[str, Any]:
        from iadeep.datasets import fetch as fetch_dataset
        from iadeep.datasets import verify
        from iadeep.orchestration import dataset_dir

        cache = dataset_dir()
        path = fetch_dataset(name, progress=False, cache_dir=cache)
        results = verify(name, cache_dir=cache)
        bad = [str(r) for r in results if not r.ok]
        if bad:
            raise RuntimeError(f"{name}: verification failed: {bad}")
        return {"name": name, "path": str(path), "files": len(results)}

    @task
    def summary(fetched: list[dict[str, Any]]) -> dict[str, str]:
        return {f["name"]: f["path"] for f in fetched}

    summary(fetch.expand(name=names()))


iadeep_datasets()
