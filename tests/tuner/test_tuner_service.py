"""The tuner's HTTP API: in process through the real app (routes and errors), and as a real
``iadeep tuner serve`` process killed with SIGKILL mid-study and restarted (resumes from SQLite)."""

from __future__ import annotations

import signal

import httpx
import pytest
from fastapi.testclient import TestClient

from iadeep._prometheus import samples
from iadeep.policy import MAX_COLOCATION_LIMIT
from iadeep.testing.services import TunerProcess
from iadeep.tuner import TunedJob, TunerClient, TunerError, TunerService, create_app

JOBS = [{"key": "a", "model": "ResNet-50", "base_batch_size": 64, "batch_size": 64, "mem_limit_gib": 16.0},
        {"key": "b", "model": "Transformer", "base_batch_size": 64, "batch_size": 64}]


@pytest.fixture
def http(interference_model, tmp_path):
    service = TunerService(interference_model, f"sqlite:///{tmp_path / 't.db'}")
    with TestClient(create_app(service)) as client:
        yield client


def test_session_round_trip(http) -> None:
    r = http.post("/sessions", json={"name": "n1.0.1", "jobs": JOBS, "warm_start": [{"a": 32, "b": 128}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["space"]["a"] == [16, 32, 64, 128] and body["outcome"]["best_objective"] is None
    ask = http.post("/sessions/n1.0.1/ask").json()
    assert ask["config"] == {"a": 32, "b": 128}
    told = http.post("/sessions/n1.0.1/tell", json={"trial": ask["trial"], "normalised_throughputs": {"a": 0.6, "b": 0.7}})
    assert told.status_code == 200
    out = told.json()["outcome"]
    assert out["trials"] == 1 and out["best"] == {"a": 32, "b": 128} and out["best_objective"] > 0
    assert http.get("/sessions/n1.0.1").json()["outcome"] == out
    assert http.delete("/sessions/n1.0.1").json() == {"deleted": True}
    assert http.get("/sessions/n1.0.1").status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"jobs": JOBS}, "name: Field required"),
    ({"name": "s", "jobs": [{**JOBS[0], "model": None}]}, "jobs.0.model"),
    ({"name": "s", "jobs": [{**JOBS[0], "batch_size": 0}]}, "jobs.0.batch_size"),
    ({"name": "s", "jobs": []}, "jobs:"),
    ({"name": "s", "jobs": JOBS, "warm_start": [{"a": 16}]}, "warm_start.0"),
    ({"name": "s", "jobs": [{**JOBS[0], "batch_size": 60}]}, "job a"),
    ({"name": "s", "jobs": JOBS, "gpu_mem_gib": 0}, "gpu_mem_gib"),
    ({"name": "s", "jobs": [{**JOBS[0], "mem_request_gib": -1}]}, "jobs.0.mem_request_gib"),
    # JSON's own types only (strict): no silent conversion of a string or a boolean to a number
    ({"name": "s", "jobs": JOBS, "gpu_mem_gib": "32"}, "gpu_mem_gib"),
    ({"name": "s", "jobs": JOBS, "gpu_mem_gib": True}, "gpu_mem_gib"),
    ({"name": "s", "jobs": [{**JOBS[0], "batch_size": "64"}]}, "jobs.0.batch_size"),
    ({"name": "s", "jobs": [{**JOBS[0], "tunable": "yes"}]}, "jobs.0.tunable"),
    # nothing ignored: a misspelt field (the cap would silently be dropped), a name no route can
    # serve, a warm-start size never measured, a misspelt stop field
    ({"name": "s", "jobs": JOBS, "gpu_mem_gb": 1}, "gpu_mem_gb: Extra inputs are not permitted"),
    ({"name": "s", "jobs": [{**JOBS[0], "batch": 64}]}, "jobs.0.batch"),
    ({"name": "a/b", "jobs": JOBS}, "name: String should match pattern"),
    ({"name": "s", "jobs": JOBS, "warm_start": [{"a": 7, "b": 64}]}, "warm_start.0.a: 7 is not a measured batch size of ResNet-50"),
    ({"name": "s", "jobs": JOBS, "stop": {"budget": 3, "patiense": 2}}, "stop.patiense"),
])
def test_malformed_session_is_400_naming_the_field(http, body, field) -> None:
    r = http.post("/sessions", json=body)
    assert r.status_code == 400
    assert field in r.json()["error"]


@pytest.mark.parametrize("n_jobs", [MAX_COLOCATION_LIMIT + 1, 10])
def test_more_jobs_than_a_gpu_holds_is_400_naming_the_limit(http, n_jobs) -> None:
    """Ten ResNet-18 jobs would be 5 ** 10 configurations to enumerate: refused from the body alone."""
    job = {"key": "k", "model": "ResNet-18", "base_batch_size": 32, "batch_size": 32}
    r = http.post("/sessions", json={"name": "s8", "jobs": [{**job, "key": f"k{i}"} for i in range(n_jobs)]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error.startswith("jobs: ") and f"at most {MAX_COLOCATION_LIMIT} items" in error and f"not {n_jobs}" in error
    assert http.get("/sessions/s8").status_code == 404  # nothing opened


def test_a_gpu_full_of_jobs_is_a_session(http) -> None:
    """As many jobs as the extender places on a GPU, each of five batch sizes: the coordinator's
    largest session opens."""
    jobs = [{"key": f"k{i}", "model": "ResNet-18", "base_batch_size": 32, "batch_size": 32}
            for i in range(MAX_COLOCATION_LIMIT)]
    r = http.post("/sessions", json={"name": "full", "jobs": jobs})
    assert r.status_code == 200, r.text
    assert all(len(sizes) == 5 for sizes in r.json()["space"].values())
    assert http.post("/sessions/full/ask").json()["config"] is not None


def test_malformed_tell_is_400_naming_the_field(http) -> None:
    http.post("/sessions", json={"name": "s", "jobs": JOBS})
    trial = http.post("/sessions/s/ask").json()["trial"]
    for body, field in [({"normalised_throughputs": {"a": 1, "b": 1}}, "trial"),
                        ({"trial": trial, "normalised_throughputs": {"a": -1, "b": 1}}, "normalised_throughputs.a"),
                        ({"trial": trial, "normalised_throughputs": {"a": "0.5", "b": 1}}, "normalised_throughputs.a"),
                        ({"trial": str(trial), "normalised_throughputs": {"a": 1, "b": 1}}, "trial"),
                        ({"trial": trial, "normalised_throughputs": {"a": 1}}, "normalised_throughputs: no value for job 'b'")]:
        r = http.post("/sessions/s/tell", json=body)
        assert r.status_code == 400 and field in r.json()["error"], r.text
    r = http.post("/sessions/s/tell", json={"trial": trial, "normalised_throughputs": {"a": 1, "b": 1, "c": 1}})
    assert r.status_code == 400 and "job(s) ['c'] not in session 's'" in r.json()["error"], r.text
    r = http.post("/sessions/s/tell", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"].startswith("body: not valid JSON"), r.text
    assert http.post("/sessions/s/tell", json={"trial": trial + 3, "normalised_throughputs": {"a": 1, "b": 1}}).status_code == 409
    assert http.post("/sessions/none/ask").status_code == 404
    # same name, other jobs: a conflict, the stored study untouched
    assert http.post("/sessions", json={"name": "s", "jobs": JOBS[:1]}).status_code == 409
    assert http.post("/sessions/s/ask").json()["trial"] == trial


def test_tuner_killed_mid_study_resumes(throughputs_path, interference_model, tmp_path) -> None:
    tuner = TunerProcess(throughputs_path, tmp_path / "tuner.db").start()
    client = TunerClient(tuner.url, retry_deadline_s=60)
    jobs = [TunedJob(**j) for j in JOBS]
    try:
        client.open("n1.0.7", jobs)
        p1, _ = client.ask("n1.0.7")
        client.tell("n1.0.7", p1.trial, {"a": 0.5, "b": 0.6})
        p2, _ = client.ask("n1.0.7")
        tuner.kill()
        tuner.start()  # same port, same storage
        p2_again, out = client.ask("n1.0.7")  # reopened from SQLite on first use
        assert p2_again == p2 and out.trials == 1 and out.best == p1.config
        out = client.tell("n1.0.7", p2.trial, {"a": 0.9, "b": 0.9})
        assert out.trials == 2
        with pytest.raises(TunerError) as err:
            client.tell("n1.0.7", p2.trial, {"a": 0.9, "b": 0.9})
        assert err.value.status == 409
        # the restarted process counts what it served: the session reopened from the storage
        got = samples(httpx.get(tuner.url + "/metrics", timeout=10).text)
        assert got[("iadeep_tuner_sessions_opened_total", (("source", "storage"),))] == 1
        assert ("iadeep_tuner_sessions_opened_total", (("source", "request"),)) not in got
        assert got[("iadeep_tuner_trials_told_total", ())] == 1
        assert got[("iadeep_tuner_requests_total", (("outcome", "conflict"), ("route", "tell")))] == 1
        assert got[("iadeep_tuner_requests_total", (("outcome", "ok"), ("route", "tell")))] == 1
    finally:
        client.close()
        tuner.kill()


def test_metrics_follow_a_session_from_open_to_its_stop_rule(interference_model, tmp_path) -> None:
    """``/metrics`` after real calls: requests by route and outcome, the session's life cycle,
    the trials it took, the active-sessions gauge back to 0 when its stop rule is met."""
    service = TunerService(interference_model, f"sqlite:///{tmp_path / 't.db'}")
    with TestClient(create_app(service)) as http:
        def metrics() -> dict:
            r = http.get("/metrics")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            return samples(r.text)

        assert http.post("/sessions", json={"name": "s", "jobs": []}).status_code == 400
        assert http.post("/sessions/nobody/ask").status_code == 404
        assert http.post("/sessions", json={"name": "s", "jobs": JOBS, "stop": {"budget": 2}}).status_code == 200
        before = metrics()
        assert before[("iadeep_tuner_active_sessions", ())] == 1
        assert before[("iadeep_tuner_sessions_opened_total", (("source", "request"),))] == 1
        assert before[("iadeep_tuner_sessions_finished_total", ())] == 0
        told = 0
        while (ask := http.post("/sessions/s/ask").json())["trial"] is not None:
            out = http.post("/sessions/s/tell", json={"trial": ask["trial"],
                                                      "normalised_throughputs": {"a": 0.5, "b": 0.6}}).json()["outcome"]
            told += 1
        assert out["done"] and out["trials"] == told == 2
        after = metrics()
    assert after[("iadeep_tuner_active_sessions", ())] == 0
    assert after[("iadeep_tuner_sessions_finished_total", ())] == 1
    assert after[("iadeep_tuner_session_trials_count", ())] == 1
    assert after[("iadeep_tuner_session_trials_sum", ())] == 2
    assert after[("iadeep_tuner_trials_told_total", ())] == 2
    requests = {dict(k)["route"] + "/" + dict(k)["outcome"]: v for (name, k), v in after.items()
                if name == "iadeep_tuner_requests_total"}
    assert requests == {"create/invalid": 1, "ask/not_found": 1, "create/ok": 1, "ask/ok": 3, "tell/ok": 2}
    assert after[("iadeep_tuner_request_seconds_count", (("route", "ask"),))] == 4
    assert ("iadeep_tuner_request_seconds_count", (("route", "metrics"),)) not in after  # only the session routes


def test_serve_without_throughputs_is_a_one_line_error(tmp_path) -> None:
    import subprocess

    from iadeep.testing.services import IADEEP

    r = subprocess.run([IADEEP, "tuner", "serve", "--throughputs-file", str(tmp_path / "none.json"),
                        "--storage-url", f"sqlite:///{tmp_path / 't.db'}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "none.json does not exist" in r.stderr and "Traceback" not in r.stderr


def test_sigterm_ends_the_service_cleanly(throughputs_path, tmp_path) -> None:
    """SIGTERM (what the kubelet sends a pod) stops the server gracefully and exits 0: uvicorn
    raises the captured signal again after its shutdown, which must not kill the process with exit
    code 143 (iadeep._serving.serve_http)."""
    tuner = TunerProcess(throughputs_path, tmp_path / "t.db").start()
    code = tuner.kill(signal.SIGTERM)
    assert code == 0, tuner.log()[-2000:]
    assert "Traceback" not in tuner.log()


@pytest.mark.parametrize(("env", "field"), [({"IADEEP_TUNER_PORT": "abc"}, "--port / IADEEP_TUNER_PORT: Input should be a valid integer"),
                                            ({"IADEEP_TUNER_LOG_LEVEL": "loud"}, "--log-level / IADEEP_TUNER_LOG_LEVEL: not a log level"),
                                            ({"IADEEP_TUNER_STOP__BUDGET": "0"}, "IADEEP_TUNER_STOP__BUDGET: Input should be greater than or equal to 1")])
def test_python_m_with_a_bad_setting_is_one_line(throughputs_path, tmp_path, env, field) -> None:
    """``python -m iadeep.tuner serve`` (how the live experiment starts it) answers a bad setting as
    ``iadeep tuner serve`` does: one line naming it as the user sets it (flag and variable), exit
    code 2 (it printed a traceback)."""
    import os
    import subprocess
    import sys

    full = {**os.environ, "HOME": str(tmp_path), "IADEEP_TUNER_THROUGHPUTS_FILE": str(throughputs_path), **env}
    r = subprocess.run([sys.executable, "-m", "iadeep.tuner", "serve"], env=full, capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
