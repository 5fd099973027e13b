"""docker-compose.yaml brought up for real: podman + podman-compose, no daemon, no registry.

The images are built locally (``make stack-images`` = ``tools/images/stack.sh``: the Airflow image
on the project's base image, Postgres and etcd from Debian's packages; cached by content hash) and
read by podman from the build's storage as a read-only additional image store. Everything else
(containers, volumes, podman's state, the data folder) lives in this test's temporary folders,
with its own free ports on 127.0.0.1 and host networking. One stack, one DAG run:

- ``podman-compose up -d`` creates the 7 services; airflow-init migrates the database and exits 0;
- the API server answers ``/api/v2/monitor/health`` with the metadatabase, scheduler, triggerer
  and dag-processor healthy, and the compose file's own health checks pass (run on demand);
- every socket the stack's processes listen on is bound to 127.0.0.1 (or ::1);
- ``iadeep_experiment`` (simulator backend, a small Philly slice from the mounted data folder) is
  triggered through the REST API, runs on the stack's scheduler (LocalExecutor) and succeeds; its
  ``summary.json`` appears in the mounted data folder and a task's log reads back through the API;
- ``podman-compose down -v`` (always, also when the test fails) leaves no container, pod, volume,
  mount, conmon process or listening port (podman's state is in the test's temporary folder,
  deleted afterwards).

The podman settings and the fixtures are :mod:`iadeep.testing.compose`'s.
"""

from __future__ import annotations

import json

import pytest

from iadeep.testing.compose import run_dag, task_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SERVICES = ("postgres", "etcd", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer")
CONF = {"jobs": 8, "policies": ["iadeep", "exclusive"], "nodes": 2, "gpus_per_node": 2, "out": "compose-test"}


def test_the_stack_comes_up_runs_a_dag_and_leaves_nothing_behind(compose_stack, stack_data) -> None:
    from iadeep.orchestration._standalone import Standalone

    stack = compose_stack(stack_data)
    up = stack.up()
    names = {c["Names"][0] for c in stack.containers()}
    assert names == {stack.container(s) for s in SERVICES}, up.stdout[-3000:] + up.stderr[-3000:]

    # the API server answers, and reports every component healthy (they share one database)
    api = Standalone(stack.data, int(stack.ports["AIRFLOW_PORT"]))
    stack.wait_healthy(api)
    init = next(c for c in stack.containers() if c["Names"][0] == stack.container("airflow-init"))
    assert init["State"] == "exited" and init["ExitCode"] == 0, stack.logs()
    # the compose file's own health checks, run on demand (podman's timers need systemd)
    for s in ("postgres", "etcd", "airflow-apiserver"):
        stack.healthcheck(s)
    # host network: every socket the stack listens on is on loopback, and the configured ports are among them
    running = [c for c in stack.containers() if c["State"] == "running" and c.get("Pid")]
    assert len(running) == len(SERVICES) - 1, running
    listening = stack.assert_loopback_only()
    ports = {int(stack.ports[k]) for k in ("AIRFLOW_PORT", "POSTGRES_PORT", "ETCD_PORT", "ETCD_PEER_PORT")}
    assert ports <= {p for _, p, _ in listening}, (stack.ports, listening)

    # a DAG run through the REST API, executed by the stack's scheduler (LocalExecutor)
    for s in ("airflow-dag-processor", "airflow-scheduler"):  # the checkout's DAG files, as mounted
        r = stack.exec(s, "ls", "/opt/airflow/dags", check=False)
        assert "iadeep_experiment.py" in r.stdout.split(), f"{s}: /opt/airflow/dags holds {r.stdout!r} {r.stderr}"
    tis = run_dag(api, "iadeep_experiment", CONF, context=stack.logs)
    sims = [t for t in tis if t["task_id"] == "simulate"]
    assert sorted(t["state"] for t in sims) == ["success", "success"]  # one mapped task per policy
    # written inside the stack: a relative `out` lands under IADEEP_RUNS_DIR = the mounted data folder's runs/
    summary = json.loads((stack.data / "runs" / CONF["out"] / "summary.json").read_text())
    assert set(summary["policies"]) == set(CONF["policies"]) and summary["config"]["jobs"] == CONF["jobs"]
    # task logs read back through the API from the shared logs volume (no log server runs)
    text = task_log(api, next(t for t in tis if t["task_id"] == "build_workload"))
    assert f"{CONF['jobs']} jobs" in text, text[-3000:]

    stack.down_leaving_nothing()
