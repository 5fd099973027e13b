"""The wait's trigger under its stored classpath: rows in Airflow's ``trigger`` table, written with
the public classpath or with ``iadeep.orchestration._airflow.JobsFinishedTrigger``, load in the
triggerer's way (its classpath lookup, its kwargs decoding) and run."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.airflow

PUBLIC = "iadeep.orchestration.triggers.JobsFinishedTrigger"
OLD = "iadeep.orchestration._airflow.JobsFinishedTrigger"
CLUSTER = {"kubeconfig": "/nonexistent/kubeconfig", "context": None, "namespace": "ns", "conn_id": "iadeep_cluster"}


def _store_and_load(classpath: str, kwargs: dict) -> object:
    """Write a trigger row, read it back in a new session and build the trigger as the triggerer does."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.models.trigger import Trigger
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.utils.session import create_session

    with create_session() as session:
        row = Trigger(classpath=classpath, kwargs=kwargs)
        session.add(row)
        session.flush()
        row_id = row.id
    with create_session() as session:
        row = session.get(Trigger, row_id)
        stored_classpath, encrypted = row.classpath, row.encrypted_kwargs
        session.delete(row)
    assert stored_classpath == classpath
    cls = TriggerRunner().get_trigger_by_classpath(stored_classpath)
    decoded = {k: smart_decode_trigger_kwargs(v) for k, v in Trigger._decrypt_kwargs(encrypted).items()}
    return cls(**decoded)


def _first_event(trigger) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first())


def test_the_trigger_serialises_its_public_classpath(airflow_db) -> None:
    from airflow.models.trigger import Trigger

    from iadeep.orchestration import JobsFinishedTrigger
    from iadeep.orchestration.triggers import JOBS_FINISHED_CLASSPATH

    trig = JobsFinishedTrigger(CLUSTER, "r1", 3, 100.0, poll_s=0.5)
    assert JOBS_FINISHED_CLASSPATH == PUBLIC
    assert trig.serialize()[0] == PUBLIC
    assert Trigger.from_object(trig).classpath == PUBLIC  # what WaitJobsOperator's deferral writes
    again = _store_and_load(*trig.serialize())
    assert type(again) is JobsFinishedTrigger
    assert again.serialize() == trig.serialize()


@pytest.mark.parametrize("classpath", [PUBLIC, OLD])
def test_a_stored_row_of_either_classpath_builds_the_same_trigger_and_runs(airflow_db, classpath: str) -> None:
    from iadeep.orchestration import JobsFinishedTrigger

    kwargs = {"cluster": CLUSTER, "run": "r1", "expected": 2, "deadline": 0.0, "poll_s": 0.01}
    trig = _store_and_load(classpath, kwargs)
    assert type(trig) is JobsFinishedTrigger
    assert trig.serialize() == (PUBLIC, kwargs)  # re-deferred or re-saved, a row gets the public path
    # no cluster behind the kubeconfig and the deadline passed: it fires a timeout (a listing error is not raised)
    assert _first_event(trig) == {"status": "timeout", "states": {}}
