"""Airflow triggers of the DAGs, under classpaths that Airflow may store.

A deferred task's trigger is written into Airflow's database as ``(classpath, kwargs)``
(:meth:`~airflow.triggers.base.BaseTrigger.serialize`); the triggerer imports the classpath to run
it, possibly in a later release of iadeep. The classpath of each trigger here is this public
module's, :data:`JOBS_FINISHED_CLASSPATH`. Rows that name
``iadeep.orchestration._airflow.JobsFinishedTrigger`` resolve to the same class.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = ["JOBS_FINISHED_CLASSPATH", "JobsFinishedTrigger"]

#: The classpath :meth:`JobsFinishedTrigger.serialize` writes.
JOBS_FINISHED_CLASSPATH = "iadeep.orchestration.triggers.JobsFinishedTrigger"


class JobsFinishedTrigger(BaseTrigger):
    """Fires when ``expected`` Jobs labelled ``iadeep.io/run=<run>`` have finished (a success or failure
    condition, :func:`iadeep.experiment.job_outcome`: ``SuccessCriteriaMet``/``Complete``,
    ``FailureTarget``/``Failed``), or at ``deadline`` (Unix s). Polls the API every ``poll_s``
    seconds in a thread; a failed listing is logged and retried until the deadline (never raised).

    Args:
        cluster: a :class:`~iadeep.orchestration.ClusterRef` (kubeconfig path, context, namespace).
        run: the value of the Jobs' ``iadeep.io/run`` label.
        expected: how many Jobs must finish.
        deadline: Unix time (s) after which it fires with ``status="timeout"``.
        poll_s: seconds between listings.

    Yields one event: ``{"status": "finished" | "timeout", "states": {job: state}}``.
    """

    def __init__(self, cluster: dict[str, Any], run: str, expected: int, deadline: float, poll_s: float = 1.0):
        super().__init__()
        self.cluster, self.run_label, self.expected, self.deadline, self.poll_s = dict(cluster), run, expected, deadline, poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """``(JOBS_FINISHED_CLASSPATH, kwargs)``: the kwargs rebuild an equal trigger."""
        return (JOBS_FINISHED_CLASSPATH,
                {"cluster": self.cluster, "run": self.run_label, "expected": self.expected, "deadline": self.deadline,
                 "poll_s": self.poll_s})

    def _states(self) -> dict[str, str]:
        from iadeep.orchestration._airflow import api_for
        from iadeep.orchestration._submit import job_states

        api = api_for(self.cluster, hook=False)  # in the triggerer: no Connection lookups from its threads
        try:
            return job_states(api, self.cluster["namespace"], self.run_label)
        finally:
            api.close()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                states = await asyncio.to_thread(self._states)
            except Exception as exc:  # noqa: BLE001 - the API server restarting: try again until the deadline
                self.log.warning("listing Jobs: %s", exc)
                states = {}
            done = {n: s for n, s in states.items() if s != "Running"}
            if len(done) >= self.expected:
                yield TriggerEvent({"status": "finished", "states": states})
                return
            if time.time() > self.deadline:
                yield TriggerEvent({"status": "timeout", "states": states})
                return
            await asyncio.sleep(self.poll_s)
