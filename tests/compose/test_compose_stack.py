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

Machine-specific podman settings (not the compose file's concern), in a private containers.conf:
no systemd here, so ``cgroup_manager = cgroupfs`` and file events; health checks are run on demand
(``podman healthcheck run``) since podman's timers need systemd; the default rlimits podman asks for
as root exceed what this VM lets a process without CAP_SYS_RESOURCE raise to, so the containers get
the host's own limits. podman-compose comes from PyPI (the test extra, 1.0.6): Debian's 1.0.3
cannot do ``network_mode: host``.
"""

from __future__ import annotations

import json
import os
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
# PyPI's podman-compose (the test extra): Debian's 1.0.3 adds a bridge network to network_mode: host
PODMAN_COMPOSE = Path(sys.executable).parent / "podman-compose"
CONF = {"jobs": 8, "policies": ["iadeep", "exclusive"], "nodes": 2, "gpus_per_node": 2, "out": "compose-test"}
LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc/net/tcp{,6} write them


def _cannot_run(why: str) -> None:
    """Skip with the reason, or fail under CI (tests must not skip silently there)."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def _run(argv: list[str], env: dict[str, str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="module")
def stack_images() -> dict[str, str]:
    """The stack's image names (``tools/images/stack.sh``; built once per source tree, so this is a
    cache hit after ``make test``'s ``stack-images`` step)."""
    if os.geteuid() != 0:
        _cannot_run("the local image build (buildah, chroot isolation) and rootful podman need root")
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
    down afterwards whatever happened (the test itself checks what is left after its own down)."""
    from iadeep._host import free_port

    root = Path(tempfile.mkdtemp(prefix="iadeep-podman-", dir="/tmp"))  # short: conmon's socket paths
    data = tmp_path / "data"
    for name in ("philly", "gavel-throughputs"):  # the DAG finds them verified in the mounted data folder
        shutil.copytree(dataset(name), data / "cache" / "datasets" / name)
    ports = {k: str(free_port()) for k in ("AIRFLOW_PORT", "POSTGRES_PORT", "ETCD_PORT", "ETCD_PEER_PORT")}
    env = {**os.environ, **_podman_config(root, stack_images["IMAGE_STORE"]), **ports,
           "AIRFLOW_IMAGE": stack_images["AIRFLOW_IMAGE"], "POSTGRES_IMAGE": stack_images["POSTGRES_IMAGE"],
           "ETCD_IMAGE": stack_images["ETCD_IMAGE"], "POSTGRES_PASSWORD": secrets.token_hex(12),
           "AIRFLOW_JWT_SECRET": secrets.token_hex(32), "IADEEP_DATA_DIR": str(data),
           "IADEEP_DATASET_MIRROR": ""}  # no download: the data folder has the datasets
    info = _run(["podman", "info", "--format", "json"], env, timeout=120, check=False)
    if info.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _cannot_run(f"podman cannot run here (`podman info` exited {info.returncode}): {info.stderr[-2000:]}")
    project = f"iadeep-test-{secrets.token_hex(3)}"
    compose = [str(PODMAN_COMPOSE), "-p", project, "-f", str(COMPOSE)]
    try:
        yield {"env": env, "compose": compose, "project": project, "root": root, "data": data, "ports": ports}
    finally:
        _run([*compose, "down", "-v"], env, check=False)
        # whatever a failed `up` or `down` left in this private podman: containers, then volumes
        _run(["podman", "rm", "--all", "--force", "--time", "5"], env, check=False)
        _run(["podman", "volume", "rm", "--all", "--force"], env, check=False)
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
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


def _descendants(pids: set[int]) -> set[int]:
    """``pids`` and every process below them (from /proc/<pid>/stat's parent field)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    todo, seen = list(pids), set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen


def _listening(pids: set[int]) -> list[tuple[str, int, int]]:
    """``(address hex, port, pid)`` of every TCP socket in LISTEN state held by ``pids``."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A = TCP_LISTEN
                addr, port = f[1].rsplit(":", 1)
                out.append((addr, int(port, 16), inodes[f[9]]))
    return out


def test_the_stack_comes_up_runs_a_dag_and_leaves_nothing_behind(stack) -> None:
    from iadeep.orchestration._standalone import Standalone

    env, ports = stack["env"], stack["ports"]
    up = _run([*stack["compose"], "up", "-d"], env, timeout=600)
    names = {c["Names"][0] for c in _containers(stack)}
    assert names == {f"{stack['project']}_{s}_1" for s in SERVICES}, up.stdout[-3000:] + up.stderr[-3000:]

    # the API server answers, and reports every component healthy (they share one database)
    api = Standalone(stack["data"], int(ports["AIRFLOW_PORT"]))

    def healthy() -> bool:
        import httpx

        init = [c for c in _containers(stack) if c["Names"][0].endswith("_airflow-init_1")]
        if init and init[0]["State"] == "exited" and init[0]["ExitCode"] != 0:  # e.g. no database: fail now
            raise AssertionError(f"airflow-init (db migrate) exited {init[0]['ExitCode']}\n{_logs(stack)}")
        try:
            h = httpx.get(f"{api.url}/api/v2/monitor/health", timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return False
        return (all(h.get(k, {}).get("status") == "healthy"
                    for k in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
                and api.password_file.is_file())

    _wait("Airflow's API server healthy with scheduler, triggerer and dag-processor", healthy, 600, stack)
    init = next(c for c in _containers(stack) if c["Names"][0].endswith("_airflow-init_1"))
    assert init["State"] == "exited" and init["ExitCode"] == 0, _logs(stack)
    # the compose file's own health checks, run on demand (podman's timers need systemd)
    for s in ("postgres", "etcd", "airflow-apiserver"):
        r = _run(["podman", "healthcheck", "run", f"{stack['project']}_{s}_1"], env, check=False)
        assert r.returncode == 0 and "unhealthy" not in r.stdout, f"{s}: {r.stdout} {r.stderr}\n{_logs(stack)}"
    # host network: every socket the stack listens on is on loopback, and the configured ports are among them
    running = {int(c["Pid"]) for c in _containers(stack) if c["State"] == "running" and c.get("Pid")}
    assert len(running) == len(SERVICES) - 1, _containers(stack)
    listening = _listening(_descendants(running))
    public = [(a, p, pid, _cmdline(pid)) for a, p, pid in listening
              if a not in LOOPBACK]
    assert public == [], f"the stack listens beyond loopback: {public}"
    assert {int(p) for p in ports.values()} <= {p for _, p, _ in listening}, (ports, listening)

    # a DAG run through the REST API, executed by the stack's scheduler (LocalExecutor)
    for s in ("airflow-dag-processor", "airflow-scheduler"):  # the checkout's DAG files, as mounted
        r = _run(["podman", "exec", f"{stack['project']}_{s}_1", "ls", "/opt/airflow/dags"], env, check=False)
        assert "iadeep_experiment.py" in r.stdout.split(), f"{s}: /opt/airflow/dags holds {r.stdout!r} {r.stderr}"

    def parsed() -> bool:
        errors = api.api("GET", "/importErrors")["import_errors"]
        assert errors == [], f"DAG import errors in the stack: {errors}"
        return any(d["dag_id"] == "iadeep_experiment" for d in api.api("GET", "/dags")["dags"])

    _wait("iadeep_experiment parsed by the dag-processor from the mounted dags/", parsed, 300, stack)
    api.api("PATCH", "/dags/iadeep_experiment", json={"is_paused": False})
    run = api.api("POST", "/dags/iadeep_experiment/dagRuns", json={"logical_date": None, "conf": CONF})
    run_id = run["dag_run_id"]

    def finished() -> str | None:
        state = api.api("GET", f"/dags/iadeep_experiment/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = _wait("the iadeep_experiment run finished", finished, 900, stack, every_s=5)
    tis = api.api("GET", f"/dags/iadeep_experiment/dagRuns/{run_id}/taskInstances")["task_instances"]
    assert state == "success", (f"run {run_id}: {state}; tasks "
                                f"{[(t['task_id'], t['map_index'], t['state']) for t in tis]}\n"
                                + "\n".join(f"--- log of {t['task_id']} ---\n{_task_log(api, t)[-3000:]}"
                                             for t in tis if t["state"] == "failed"))
    sims = [t for t in tis if t["task_id"] == "simulate"]
    assert sorted(t["state"] for t in sims) == ["success", "success"]  # one mapped task per policy
    # written inside the stack: a relative `out` lands under IADEEP_RUNS_DIR = the mounted data folder's runs/
    summary = json.loads((stack["data"] / "runs" / CONF["out"] / "summary.json").read_text())
    assert set(summary["policies"]) == set(CONF["policies"]) and summary["config"]["jobs"] == CONF["jobs"]
    # task logs read back through the API from the shared logs volume (no log server runs)
    text = _task_log(api, next(t for t in tis if t["task_id"] == "build_workload"))
    assert f"{CONF['jobs']} jobs" in text, text[-3000:]

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


def _task_log(api, ti: dict) -> str:
    """A task instance's log (its first try) through the REST API, as text."""
    import httpx

    url = (f"{api.url}/api/v2/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}"
           f"/logs/{max(ti['try_number'], 1)}")
    r = httpx.get(url, params={"map_index": ti["map_index"]}, timeout=60,
                  headers={"Authorization": f"Bearer {api.token()}", "Accept": "application/json"})
    if r.status_code != 200:
        return f"GET {url}: HTTP {r.status_code} {r.text[-2000:]}"
    lines = []
    for e in r.json()["content"]:
        if not isinstance(e, dict):
            lines.append(str(e))
            continue
        lines.append(str(e.get("event", "")))
        for exc in e.get("error_detail") or []:  # the exception of a failed task, innermost last
            frames = exc.get("frames") or [{}]
            lines.append(f"{exc.get('exc_type')}: {exc.get('exc_value')} "
                         f"(at {frames[-1].get('filename')}:{frames[-1].get('lineno')})")
    return "\n".join(lines)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


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
