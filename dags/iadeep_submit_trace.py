"""Airflow DAG ``iadeep_submit_trace``: replay a trace slice as Kubernetes Jobs at their arrival times.

::

    plan -> submit (deferrable) -> wait_jobs (deferrable) -> collect

- ``plan``: the trace slice (the same parameters and defaults as ``iadeep_experiment``, through
  the dataset registry) and one Job per trace job: scheduler ``iadeep-scheduler``, the GPU memory
  and GPU count as extended resources, the emulator's annotations, the run label
  ``iadeep.io/run=<run>``, and the dataset claim (``dataset_claim``, from ``iadeep_nfs``) mounted
  read-only. Names are DNS-1123 labels of at most 63 characters for any trace job id.
- ``submit``: creates the Jobs when due (arrival gaps / ``speedup``) and defers to a
  ``DateTimeTrigger`` until the next arrival: no worker slot sleeps through the replay. Each Job's
  ``iadeep.io/submit-time`` annotation records its creation time.
- ``wait_jobs``: defers to :class:`iadeep.orchestration.triggers.JobsFinishedTrigger` (in the
  triggerer) until every Job has a ``Complete`` or ``Failed`` condition; a Job whose pod is not
  visible yet is simply not finished. Fails when one failed or on the deadline.
- ``collect``: ``jobs.json`` (state, node, GPUs, submit/start/end times) into the output folder,
  which ``plan`` claimed for the run as ``iadeep_experiment`` does.

The cluster is the Connection ``iadeep_cluster``; Jobs go to its ``namespace`` extra.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from iadeep.orchestration import EXPERIMENT_PARAMS, SubmitTraceOperator, WaitJobsOperator, config_from_params

_KEEP = ("trace", "trace_file", "jobs", "start_job", "window_start_s", "window_end_s", "virtual_cluster", "max_gpus",
         "arrival_scale", "target_load", "mix", "nodes", "gpus_per_node", "gpu_mem_gib", "gpu_type", "seed", "speedup",
         "timeout_s")
PARAMS = {k: EXPERIMENT_PARAMS[k] for k in _KEEP}
PARAMS.update({
    "jobs": Param(20, type=["null", "integer"], minimum=0, description="Number of jobs (after filters); 0 or null = all."),
    "dataset_claim": Param("iadeep-datasets", type=["null", "string"],
                           description="PersistentVolumeClaim of the dataset export mounted by every Job; null = none."),
    "run": Param(None, type=["null", "string"], pattern="^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$",
                 description="Run label of the Jobs; null = derived from the DAG run."),
    "pin_nodes": Param(False, type="boolean", description="Only nodes labelled iadeep.io/run=<run>."),
    "out": Param("runs/submit-trace", type="string", minLength=1, description="Output folder (as iadeep_experiment's)."),
})


@dag(dag_id="iadeep_submit_trace", schedule=None, catchup=False, tags=["iadeep", "kubernetes", "trace"],
     doc_md=__doc__, params=PARAMS, render_template_as_native_obj=True, default_args={"retries": 0})
def iadeep_submit_trace() -> None:
    """Plan, submit, wait, collect (see the module docstring)."""

    @task
    def plan(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
        import hashlib

        from airflow.sdk import get_current_context

        from iadeep.orchestration import ensure_namespace, plan_trace
        from iadeep.orchestration import api_for, claim_out, cluster_ref, dataset_dir, refuse_unused, runs_dir

        p = dict(params or {})
        refuse_unused(p, PARAMS, "iadeep_submit_trace")
        extra = {k: p.pop(k) for k in ("dataset_claim", "run", "pin_nodes")}
        config = config_from_params(p, runs_dir())
        run = extra["run"] or "t" + hashlib.sha1(str(run_id).encode()).hexdigest()[:10]
        ref = cluster_ref()
        claim_out(config["out"], get_current_context())
        api = api_for(ref)
        try:
            ensure_namespace(api, ref["namespace"])
        finally:
            api.close()
        info = plan_trace(config, namespace=ref["namespace"], run=run, dataset_claim=extra["dataset_claim"],
                          pin_nodes=extra["pin_nodes"], cache_dir=dataset_dir())
        return {**info, "cluster": dict(ref), "out": config["out"]}

    @task
    def collect(planned: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from iadeep.orchestration import collect_jobs
        from iadeep.orchestration import api_for, check_claim

        out = check_claim(planned["out"], get_current_context())
        api = api_for(planned["cluster"])
        try:
            return collect_jobs(api, planned["namespace"], planned["run"], out)
        finally:
            api.close()

    planned = plan()
    submit = SubmitTraceOperator(task_id="submit", plan_file="{{ ti.xcom_pull(task_ids='plan')['plan_file'] }}",
                                 cluster="{{ ti.xcom_pull(task_ids='plan')['cluster'] }}")
    wait = WaitJobsOperator(task_id="wait_jobs", cluster="{{ ti.xcom_pull(task_ids='plan')['cluster'] }}",
                            run_label="{{ ti.xcom_pull(task_ids='plan')['run'] }}",
                            expected="{{ ti.xcom_pull(task_ids='plan')['jobs'] }}",
                            timeout_s="{{ ti.xcom_pull(task_ids='plan')['timeout_s'] }}")
    planned >> submit >> wait >> collect(planned)


iadeep_submit_trace()
