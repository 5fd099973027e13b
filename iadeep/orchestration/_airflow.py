"""The Airflow side of the orchestration: Connections/Variables, a deferrable submitter, a trigger.

Names used by the DAGs in ``dags/`` (nothing there is hard-coded; see README "Airflow"):

- Connection ``iadeep_cluster`` (type ``kubernetes``, as the cncf-kubernetes provider defines
  it; tasks connect through its ``KubernetesHook``, see :func:`api_for`): extra
  ``kube_config_path`` (a kubeconfig file on the workers), optional ``cluster_context`` and
  ``namespace`` (the Jobs' namespace, default ``iadeep-jobs``); the provider's other fields
  (inline ``kube_config``, ``in_cluster``) work for the tasks; the deferrable wait's trigger and
  ``kubectl`` (iadeep_rollout) read ``kube_config_path``.
- Connection ``iadeep_etcd`` (type ``generic``): host and port of an etcd client URL (loopback
  in development), optional extra ``prefix`` (default ``/iadeep``).
- Variables: ``iadeep_dataset_dir`` (the dataset cache: fetched by ``iadeep_datasets``, exported
  over NFS, read by the experiment DAGs; :func:`dataset_dir`), ``iadeep_runs_dir`` (where relative
  ``out`` folders go; :func:`runs_dir`), ``iadeep_regression_dir`` (baseline, history, trend plot).
  Each falls back to the environment (``IADEEP_CACHE_DIR``, ``IADEEP_RUNS_DIR``,
  ``IADEEP_REGRESSION_DIR``) and then to the CLI's default: the registry's user cache folder, the
  current directory, ``./regression``.

A missing Connection fails its task at once (no retries: retrying cannot define it). A DAG run
that writes into an ``out`` folder claims it first (:func:`claim_out`): a second run into the same
folder while the first is queued or running fails naming it, instead of both reporting whichever
files were written last.

:class:`SubmitTraceOperator` creates a trace's Jobs when due and defers (``DateTimeTrigger``)
between arrivals, so no worker slot sleeps through the run; :class:`WaitJobsOperator` defers to
:class:`~iadeep.orchestration.triggers.JobsFinishedTrigger`, which reads the run's Job conditions in
the triggerer. These names are exported by :mod:`iadeep.orchestration`, which loads this module (and
Airflow) on first use.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

# Trigger rows that name the classpath iadeep.orchestration._airflow.JobsFinishedTrigger still resolve through this import.
from iadeep.orchestration.triggers import JobsFinishedTrigger

__all__ = ["CLUSTER_CONN_ID", "CLAIM_FILE", "ETCD_CONN_ID", "ClusterRef", "check_claim", "claim_out", "cluster_ref", "results_url",
           "dataset_dir", "etcd_ref", "get_connection", "refuse_unused", "runs_dir", "variable_path", "SubmitTraceOperator",
           "WaitJobsOperator", "JobsFinishedTrigger"]

CLUSTER_CONN_ID = "iadeep_cluster"
ETCD_CONN_ID = "iadeep_etcd"
DEFAULT_JOB_NAMESPACE = "iadeep-jobs"
_VARIABLE_ENV = {"iadeep_dataset_dir": "IADEEP_CACHE_DIR", "iadeep_runs_dir": "IADEEP_RUNS_DIR",
                 "iadeep_regression_dir": "IADEEP_REGRESSION_DIR"}


class ClusterRef(dict):
    """``{"kubeconfig": path or None, "context": str or None, "namespace": str, "conn_id": str}``
    (JSON for XCom and triggers)."""


def get_connection(conn_id: str) -> Any:
    """Airflow Connection ``conn_id``.

    Raises:
        airflow.sdk.exceptions.AirflowFailException: the Connection is not defined (the task
            fails without its retries; the message says how to define it).
    """
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise AirflowFailException(
            f"Airflow Connection {conn_id!r} is not defined: add it (Admin > Connections, `airflow connections add "
            f"{conn_id} ...` or the environment variable AIRFLOW_CONN_{conn_id.upper()}; README 'Airflow')") from None


def cluster_ref(conn_id: str = CLUSTER_CONN_ID) -> ClusterRef:
    """The cluster named by Airflow Connection ``conn_id`` (see the module docstring).

    Raises:
        airflow.sdk.exceptions.AirflowFailException: the Connection is not defined.
    """
    conn = get_connection(conn_id)
    extra = conn.extra_dejson or {}
    get = lambda k: extra.get(k) or extra.get(f"extra__kubernetes__{k}")  # noqa: E731 - old provider prefix
    return ClusterRef(kubeconfig=get("kube_config_path") or None, context=get("cluster_context") or None,
                      namespace=get("namespace") or DEFAULT_JOB_NAMESPACE, conn_id=conn_id)


def etcd_ref(conn_id: str = ETCD_CONN_ID) -> dict[str, str]:
    """``{"endpoint": "http://host:port", "prefix": ...}`` from Airflow Connection ``conn_id``.

    Raises:
        airflow.sdk.exceptions.AirflowFailException: the Connection is not defined, or lacks the host
            or port of the etcd client URL.
    """
    from airflow.sdk.exceptions import AirflowFailException

    conn = get_connection(conn_id)
    if not conn.host or not conn.port:
        raise AirflowFailException(f"Connection {conn_id}: host and port of the etcd client URL are required")
    return {"endpoint": f"{conn.schema or 'http'}://{conn.host}:{conn.port}",
            "prefix": (conn.extra_dejson or {}).get("prefix", "/iadeep")}


def variable_path(name: str, default: str) -> str:
    """Absolute folder from Variable ``name``, else its environment variable, else ``default``
    under the current directory."""
    from airflow.sdk import Variable

    value = Variable.get(name, default=None) or os.environ.get(_VARIABLE_ENV.get(name, ""), "") or default
    return str(Path(value).expanduser().resolve())


def dataset_dir() -> str:
    """The dataset cache of the DAGs: Variable ``iadeep_dataset_dir``, else ``$IADEEP_CACHE_DIR``, else
    the registry's default (the user cache folder of ``iadeep``, as for the CLI), so that what
    ``iadeep_datasets`` fetched is what the experiment DAGs read and ``iadeep_nfs`` exports."""
    from iadeep.datasets import cache_root

    return variable_path("iadeep_dataset_dir", str(cache_root()))


def runs_dir() -> str:
    """Where relative ``out`` folders go: Variable ``iadeep_runs_dir``, else ``$IADEEP_RUNS_DIR``, else
    the current directory (as for the CLI)."""
    return variable_path("iadeep_runs_dir", os.getcwd())


#: The claim of an ``out`` folder by one DAG run (:func:`claim_out`).
CLAIM_FILE = ".iadeep-run.json"
_ACTIVE = ["queued", "running"]


def claim_out(out: str | Path, context: Any) -> Path:
    """Create ``out`` and claim it for the current DAG run (``<out>/.iadeep-run.json``: DAG, run, time).

    A folder claimed by another run of any DAG that is still queued or running is refused: two runs
    writing the same folder would both report whichever tables were written last. A claim of a
    run that has ended (or is unknown to this Airflow) is taken over; a retry of the same run
    keeps its claim. Check and write happen under an exclusive ``flock`` of ``<out>/.iadeep-run.lock``.

    Args:
        out: the output folder (absolute).
        context: the task's Airflow context (``dag_run``, ``ti``).

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        airflow.sdk.exceptions.AirflowFailException: the folder cannot be created, or another active
            run holds it (the message names the run and says to choose another ``out``).
    """
    import fcntl

    from airflow.sdk.exceptions import AirflowFailException

    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        lock = open(path / ".iadeep-run.lock", "a")  # noqa: SIM115 - closed below, after the claim is written
    except OSError as exc:
        raise AirflowFailException(f"out {path}: cannot create the output folder ({exc.strerror or exc})") from None
    me = _run_of(context)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = _read_claim(path)
        if held and not _is(held, me):
            active = context["ti"].get_dr_count(dag_id=str(held.get("dag_id")), run_ids=[str(held.get("run_id"))],
                                                states=_ACTIVE)
            if active:
                raise AirflowFailException(
                    f"out {path} is in use by run {held.get('run_id')!r} of DAG {held.get('dag_id')!r} (claimed "
                    f"{held.get('claimed_at')}): give concurrent runs different `out` folders, or wait for it to end "
                    f"(a run whose processes died stays 'running': mark it failed in Airflow, or delete {path / CLAIM_FILE})")
        try:
            tmp = path / f"{CLAIM_FILE}.tmp"
            tmp.write_text(json.dumps({**me, "claimed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}) + "\n")
            tmp.replace(path / CLAIM_FILE)
        except OSError as exc:
            raise AirflowFailException(f"out {path}: cannot write the claim {path / CLAIM_FILE} "
                                       f"({exc.strerror or exc})") from None
    return path


def check_claim(out: str | Path, context: Any) -> Path:
    """Before a task writes into ``out``: the folder must still be claimed by this DAG run.

    Raises:
        airflow.sdk.exceptions.AirflowFailException: another run claimed the folder since (its
            tables are not this run's), or the claim is gone.
    """
    from airflow.sdk.exceptions import AirflowFailException

    path = Path(out)
    held = _read_claim(path)
    if not held or not _is(held, _run_of(context)):
        who = f"run {held.get('run_id')!r} of DAG {held.get('dag_id')!r}" if held else "no run (the claim file is gone)"
        raise AirflowFailException(f"out {path} is now claimed by {who}, not by this run: its files are not this "
                                   "run's; give concurrent runs different `out` folders")
    return path


def results_url(context: Any) -> str:
    """The address of the current DAG run's results page in the Airflow UI (the tab the plugin
    :mod:`iadeep.orchestration.plugin` adds): ``<[api] base_url>/dags/<dag>/runs/<run>/plugin/iadeep-results``."""
    from urllib.parse import quote

    from airflow.sdk import conf

    from iadeep.orchestration._results_page import RUN_VIEW_ROUTE

    run = _run_of(context)
    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}/dags/{quote(run['dag_id'], safe='')}/runs/{quote(run['run_id'], safe='')}/plugin/{RUN_VIEW_ROUTE}"


def _run_of(context: Any) -> dict[str, str]:
    """The DAG run of a task's context, as a claim names it."""
    return {"dag_id": context["dag_run"].dag_id, "run_id": context["dag_run"].run_id}


def _is(held: dict[str, Any], run: dict[str, str]) -> bool:
    """Whether a claim names ``run``."""
    return all(held.get(k) == v for k, v in run.items())


def refuse_unused(params: dict[str, Any], known: Any, dag_id: str) -> None:
    """Fail the task (without retries) on conf keys the DAG does not use.

    Airflow passes a run's conf keys that the DAG does not declare into ``params`` too; a DAG whose
    params are a subset of the experiment's (``seeds`` for ``seed``) would otherwise take them
    silently and ignore them.

    Raises:
        airflow.sdk.exceptions.AirflowFailException: naming the keys and the DAG's parameters.
    """
    from airflow.sdk.exceptions import AirflowFailException

    unused = sorted(set(params) - set(known))
    if unused:
        raise AirflowFailException(f"parameters {unused} are not used by {dag_id}; its parameters: "
                                   f"{', '.join(sorted(known))}")


def _read_claim(path: Path) -> dict[str, Any] | None:
    try:
        held = json.loads((path / CLAIM_FILE).read_text())
    except (OSError, ValueError):
        return None
    return held if isinstance(held, dict) else None


def api_for(ref: dict[str, Any], *, hook: bool = True) -> Any:
    """A ``kubernetes.client.ApiClient`` for a :class:`ClusterRef`.

    Tasks build it with the cncf-kubernetes provider's ``KubernetesHook`` on the ref's Connection,
    so every field of that Connection type works (``kube_config_path``, an inline ``kube_config``,
    ``in_cluster``, ``cluster_context``, ``disable_verify_ssl``); the hook gets a Configuration of
    its own (it would otherwise load the kubeconfig into the process-wide default). Triggers
    (``hook=False``) and refs without ``conn_id`` use the ref's kubeconfig file (``None``:
    in-cluster config).

    Raises:
        airflow.exceptions.AirflowException: the Connection combines exclusive options.
        kubernetes.config.ConfigException: the kubeconfig is missing or malformed.
    """
    if hook and ref.get("conn_id"):
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
        from kubernetes import client

        return KubernetesHook(conn_id=ref["conn_id"], client_configuration=client.Configuration()).get_conn()
    from iadeep.orchestration._kube import api_client

    return api_client(ref.get("kubeconfig"), ref.get("context"))


class SubmitTraceOperator(BaseOperator):
    """Create the Jobs of a submission plan (``plan.json``, :func:`iadeep.orchestration.plan_submissions`)
    at their due times, deferring between arrivals.

    Args:
        plan_file: templated path of the plan (JSON list); written by an upstream task.
        cluster: templated :class:`ClusterRef` (or its JSON).

    Returns (XCom): ``{"submitted": n, "late_s_max": wall s}``.
    """

    template_fields = ("plan_file", "cluster")

    def __init__(self, *, plan_file: str, cluster: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_file = plan_file
        self.cluster = cluster

    def execute(self, context: Any, start: int = 0, late_s_max: float = 0.0) -> dict[str, Any]:
        from iadeep.orchestration._submit import submit_due

        plan = json.loads(Path(self.plan_file).read_text())
        cluster = json.loads(self.cluster) if isinstance(self.cluster, str) else self.cluster
        api = api_for(cluster)
        try:
            now = time.time()
            if start < len(plan):
                late_s_max = max(late_s_max, now - plan[start]["due"])
            k = submit_due(api, plan, start, now)
        finally:
            api.close()
        self.log.info("submitted %d of %d Jobs", k, len(plan))
        if k < len(plan):
            from airflow.providers.standard.triggers.temporal import DateTimeTrigger

            moment = datetime.fromtimestamp(plan[k]["due"], tz=timezone.utc)
            self.defer(trigger=DateTimeTrigger(moment=moment), method_name="resume",
                       kwargs={"start": k, "late_s_max": late_s_max})
        return {"submitted": len(plan), "late_s_max": late_s_max}

    def resume(self, context: Any, event: Any = None, start: int = 0, late_s_max: float = 0.0) -> dict[str, Any]:
        return self.execute(context, start=start, late_s_max=late_s_max)


class WaitJobsOperator(BaseOperator):
    """Defer until the run's Jobs finish (:class:`JobsFinishedTrigger`); fail when one failed or
    the deadline passed (the message names them). Returns ``{"complete": n, "failed": n}``."""

    template_fields = ("cluster", "run_label", "expected", "timeout_s")

    def __init__(self, *, cluster: Any, run_label: str, expected: Any, timeout_s: Any = 600, poll_s: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster, self.run_label, self.expected, self.timeout_s, self.poll_s = cluster, run_label, expected, timeout_s, poll_s

    def execute(self, context: Any) -> None:
        cluster = json.loads(self.cluster) if isinstance(self.cluster, str) else self.cluster
        self.defer(trigger=JobsFinishedTrigger(cluster, str(self.run_label), int(self.expected),
                                               time.time() + float(self.timeout_s), self.poll_s),
                   method_name="finished")

    def finished(self, context: Any, event: dict[str, Any]) -> dict[str, int]:
        from airflow.sdk.exceptions import AirflowException

        states = event.get("states") or {}
        failed = sorted(n for n, s in states.items() if s == "Failed")
        running = sorted(n for n, s in states.items() if s == "Running")
        if event.get("status") != "finished":
            raise AirflowException(f"{len(running)} Job(s) not finished by the deadline, e.g. {running[:5]}")
        if failed:
            raise AirflowException(f"{len(failed)} Job(s) failed (condition FailureTarget or Failed): {failed[:10]}")
        return {"complete": sum(s == "Complete" for s in states.values()), "failed": 0}
