"""``iadeep_sweep`` on the CeleryExecutor: docker-compose.yaml + docker-compose.celery.yaml for real.

One sweep conf (two trace windows x two loads x two seeds: eight mapped ``run_setting`` tasks, two
policies each), run twice:

- on the LocalExecutor of an ``airflow standalone`` in this process's virtual environment (the
  same DAG file and package; SQLite), before the stack starts, so that the two do not compete for
  the CPUs; its ``sweep.csv`` is the reference;
- on the stack with Redis and two Celery workers of one task slot each (``CELERY_WORKER_CONCURRENCY=1``,
  so that one worker cannot run them all at once; the scheduler may hand out the first mapped task
  a scheduler loop before the others, so there are seven more to share):
  ``podman-compose up -d`` creates the base services, ``redis`` and ``airflow-worker-{1,2}``; the
  workers' and Redis's health checks pass; every socket the stack listens on (Redis's port among
  them) is on loopback; the run goes through the REST API and succeeds.

Then: the mapped task instances ran on two distinct hostnames, each the UTS hostname of one worker
container (``podman exec ... hostname``), not the host's; each worker's own log names exactly the
task instances (by id) that carry its hostname, so the hostname is where the task ran, not a label;
two of them, on different workers, ran at the same time (their ``[start_date, end_date]`` intervals
overlap); and ``sweep.csv``, combined from the workers' files in the shared data folder, is byte for
byte the LocalExecutor's. ``down -v`` leaves nothing (as in ``test_compose_stack.py``).
"""

from __future__ import annotations

import socket
from datetime import datetime
from pathlib import Path

import pytest

from iadeep.testing.compose import run_dag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

CELERY = "docker-compose.celery.yaml"
WORKERS = ("airflow-worker-1", "airflow-worker-2")
SERVICES = ("postgres", "etcd", "redis", "airflow-init", "airflow-apiserver", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer", *WORKERS)
# 60 jobs a setting: each mapped task simulates for seconds, not only starts, so that the two
# workers' tasks overlap whatever the scheduler's loop hands out first
CONF = {"jobs": 60, "policies": ["iadeep", "exclusive"], "nodes": 2, "gpus_per_node": 2,
        "start_jobs": [20000, 40000], "loads": [1.0, 2.0], "seeds": [0, 1], "reference": "iadeep", "out": "sweep-test"}
N_SETTINGS = len(CONF["start_jobs"]) * len(CONF["loads"]) * len(CONF["seeds"])


def _local_executor_sweep(data: Path, home: Path) -> bytes:
    """``sweep.csv`` of ``iadeep_sweep`` with CONF on an ``airflow standalone`` (LocalExecutor)
    reading the datasets of ``data``."""
    from iadeep.orchestration._standalone import Standalone

    runs = home.parent / "local-runs"
    env = {"IADEEP_CACHE_DIR": str(data / "cache"), "IADEEP_RUNS_DIR": str(runs), "IADEEP_DATASET_MIRROR": ""}
    with Standalone(home, env=env) as api:
        tis = run_dag(api, "iadeep_sweep", CONF, context=lambda: api.log_path.read_text(errors="replace")[-4000:])
    assert sum(t["task_id"] == "run_setting" for t in tis) == N_SETTINGS
    return (runs / CONF["out"] / "sweep.csv").read_bytes()


def _when(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_a_sweep_on_two_celery_workers_at_once_gives_the_local_executors_result(compose_stack, stack_data,
                                                                                tmp_path) -> None:
    from iadeep.orchestration._standalone import Standalone

    reference = _local_executor_sweep(stack_data, tmp_path / "local-home")

    stack = compose_stack(stack_data, CELERY, env={"CELERY_WORKER_CONCURRENCY": "1"})
    up = stack.up()
    names = {c["Names"][0] for c in stack.containers()}
    assert names == {stack.container(s) for s in SERVICES}, up.stdout[-3000:] + up.stderr[-3000:]
    api = Standalone(stack.data, int(stack.ports["AIRFLOW_PORT"]))
    stack.wait_healthy(api)
    for s in ("redis", *WORKERS):  # Redis answers PING; each worker answers Celery's ping (once connected)
        stack.wait(f"{s} healthy", lambda s=s: stack.healthy(s), 300, every_s=5)
    listening = stack.assert_loopback_only()
    assert int(stack.ports["REDIS_PORT"]) in {p for _, p, _ in listening}, (stack.ports, listening)
    hostnames = {w: stack.exec(w, "hostname").stdout.strip() for w in WORKERS}
    assert len(set(hostnames.values())) == 2 and socket.gethostname() not in hostnames.values(), hostnames

    tis = run_dag(api, "iadeep_sweep", CONF, context=stack.logs)
    mapped = [t for t in tis if t["task_id"] == "run_setting"]
    assert len(mapped) == N_SETTINGS and all(t["state"] == "success" for t in mapped), mapped

    # the tasks ran on both workers: their hostnames are the workers' own ...
    by_host: dict[str, set[str]] = {}
    for t in mapped:
        by_host.setdefault(t["hostname"], set()).add(t["id"])
    assert set(by_host) == set(hostnames.values()), (by_host, hostnames)
    # ... and each worker's Celery log names exactly the task instances that carry its hostname
    worker_logs = {}
    for worker, host in hostnames.items():
        out = stack.run(["podman", "logs", stack.container(worker)])
        log = worker_logs[worker] = out.stdout + out.stderr
        ran_here = {t["id"] for t in mapped if t["id"] in log}
        assert ran_here == by_host[host], (worker, host, ran_here, by_host)
    # ... at the same time: two of them on different workers overlap
    spans = [(t["hostname"], _when(t["start_date"]), _when(t["end_date"])) for t in mapped]
    print("\n".join(f"{h} {s:%H:%M:%S.%f} - {e:%H:%M:%S.%f}" for h, s, e in sorted(spans, key=lambda x: x[1])))
    assert any(h1 != h2 and s1 < e2 and s2 < e1 for h1, s1, e1 in spans for h2, s2, e2 in spans), (
        "no two tasks on different workers ran at the same time:\n"
        + "\n".join(f"{h} {s:%H:%M:%S.%f} - {e:%H:%M:%S.%f}" for h, s, e in sorted(spans, key=lambda x: x[1]))
        + "\n" + "\n".join(line for w in WORKERS for line in worker_logs[w].splitlines() if "execute_workload" in line))

    # the same sweep.csv as the LocalExecutor's, combined from the workers' files in the shared folder
    sweep = (stack.data / "runs" / CONF["out"] / "sweep.csv").read_bytes()
    assert sweep.count(b"\n") == 1 + N_SETTINGS * len(CONF["policies"]), sweep.decode()
    assert sweep == reference, f"Celery:\n{sweep.decode()}\nLocalExecutor:\n{reference.decode()}"

    stack.down_leaving_nothing()
