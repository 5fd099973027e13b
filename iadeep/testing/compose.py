"""pytest fixtures for docker-compose.yaml brought up for real: podman + podman-compose, no daemon.

Use from a conftest::

    from iadeep.testing.compose import compose_stack, stack_data, stack_images  # noqa: F401

``stack_data`` is a data folder with the Philly trace and Gavel's throughputs; ``stack_images`` builds (or finds, by content hash) the stack's images with
``tools/images/stack.sh``; ``compose_stack(data, *extra_files)`` returns a :class:`ComposeStack`:
the compose files of this checkout (``docker-compose.yaml`` first, then ``extra_files``, e.g.
``docker-compose.celery.yaml``), its own free ports on 127.0.0.1, fresh secrets, the data folder
``data`` mounted as ``IADEEP_DATA_DIR`` and a private podman (state, containers and volumes in a
temporary folder, the images read from the build's storage as an additional image store). Every
stack a test made is torn down afterwards whatever happened (``down -v``, then whatever a failed
``up`` or ``down`` left in the private podman); :meth:`ComposeStack.down_leaving_nothing` is the
checked teardown a test calls itself.

Machine-specific podman settings (not the compose file's concern), in a private containers.conf:
no systemd here, so ``cgroup_manager = cgroupfs`` and file events; health checks run on demand
(``podman healthcheck run``) since podman's timers need systemd; the default rlimits podman asks
for as root exceed what this VM lets a process without CAP_SYS_RESOURCE raise to, so containers
get the host's own limits. podman-compose comes from PyPI (the test extra, 1.0.6): Debian's 1.0.3
cannot do ``network_mode: host``.

Without root, podman or buildah the fixtures skip with the reason, and fail under ``CI``.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from iadeep._host import free_port

__all__ = ["ComposeStack", "cannot_run", "compose_stack", "run", "run_dag", "stack_images", "stack_data", "task_log", "wait_until", "LOOPBACK", "REPO"]

REPO = Path(__file__).resolve().parents[2]
#: 127.0.0.1 and ::1 as /proc/net/tcp{,6} write them
LOOPBACK = frozenset({"0100007F", "00000000000000000000000001000000"})
T = TypeVar("T")


def cannot_run(why: str) -> None:
    """Skip with the reason, or fail under CI (tests must not skip silently there)."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def _podman_compose() -> Path:
    # PyPI's podman-compose (the test extra): Debian's 1.0.3 adds a bridge network to network_mode: host
    return Path(sys.executable).parent / "podman-compose"


def run(argv: list[str], env: dict[str, str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """``argv`` in the checkout with ``env``; ``check``: raise AssertionError with its output's tail
    when it exits non-zero. ``timeout`` in seconds."""
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="module")
def stack_images() -> dict[str, str]:
    """The stack's image names and storage (``tools/images/stack.sh``'s env file: ``AIRFLOW_IMAGE``,
    ``POSTGRES_IMAGE``, ``ETCD_IMAGE``, ``REDIS_IMAGE``, ``IMAGE_STORE``); built once per source
    tree, so this is a cache hit after ``make test``'s ``stack-images`` step."""
    if os.geteuid() != 0:
        cannot_run("the local image build (buildah, chroot isolation) and rootful podman need root")
    for tool in ("podman", "buildah"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: `make node` installs it (tools/node/deps.sh)")
    if not _podman_compose().is_file():
        pytest.fail(f"{_podman_compose()} missing: the test extra installs podman-compose (make venv)")
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


def wait_until(what: str, probe: Callable[[], T], timeout_s: float, every_s: float = 3.0,
               context: Callable[[], str] = str) -> T:
    """Call ``probe`` every ``every_s`` seconds until it returns something true; return that.

    Raises:
        AssertionError: not within ``timeout_s`` seconds (naming ``what``, followed by ``context()``).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{context()}")
        time.sleep(every_s)


class ComposeStack:
    """One compose project under a private podman (see the module docstring).

    Attributes:
        env: the environment of every podman and podman-compose call (ports, secrets, images).
        compose: the podman-compose command line up to the subcommand (project and files).
        project: the compose project name; container ``<project>_<service>_1``.
        root: the private podman's folder (state, storage.conf, containers.conf).
        data: the mounted data folder (``IADEEP_DATA_DIR``).
        ports: ``AIRFLOW_PORT``, ``POSTGRES_PORT``, ``ETCD_PORT``, ``ETCD_PEER_PORT``, ``REDIS_PORT``.
    """

    def __init__(self, files: list[Path], images: dict[str, str], data: Path, env: dict[str, str] | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="iadeep-podman-", dir="/tmp"))  # short: conmon's socket paths
        self.data = data
        self.ports = {k: str(free_port()) for k in ("AIRFLOW_PORT", "POSTGRES_PORT", "ETCD_PORT", "ETCD_PEER_PORT",
                                                    "REDIS_PORT")}
        self.env = {**os.environ, **_podman_config(self.root, images["IMAGE_STORE"]), **self.ports,
                    **{k: v for k, v in images.items() if k.endswith("_IMAGE")},
                    "POSTGRES_PASSWORD": secrets.token_hex(12), "REDIS_PASSWORD": secrets.token_hex(12),
                    "AIRFLOW_JWT_SECRET": secrets.token_hex(32), "IADEEP_DATA_DIR": str(data),
                    "IADEEP_DATASET_MIRROR": "",  # no download: the data folder has the datasets
                    **(env or {})}
        self.project = f"iadeep-test-{secrets.token_hex(3)}"
        self.compose = [str(_podman_compose()), "-p", self.project]
        for f in files:
            self.compose += ["-f", str(f)]

    def run(self, argv: list[str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """``argv`` with the stack's environment (:func:`run`)."""
        return run(argv, self.env, timeout=timeout, check=check)

    def container(self, service: str) -> str:
        """The container name of ``service``."""
        return f"{self.project}_{service}_1"

    def containers(self) -> list[dict[str, Any]]:
        """``podman ps -a`` of the private podman (every container, running or not)."""
        return json.loads(self.run(["podman", "ps", "-a", "--format", "json"]).stdout or "[]")

    def exec(self, service: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """``podman exec`` in ``service``'s container."""
        return self.run(["podman", "exec", self.container(service), *argv], check=check)

    def logs(self, tail: int = 30) -> str:
        """The last ``tail`` lines of every container's output, for failure messages."""
        out = []
        for name in sorted(c["Names"][0] for c in self.containers()):
            r = self.run(["podman", "logs", "--tail", str(tail), name], check=False)
            out.append(f"--- {name} ---\n{r.stdout[-2500:]}{r.stderr[-2500:]}")
        return "\n".join(out)

    def wait(self, what: str, probe: Callable[[], T], timeout_s: float, every_s: float = 3.0) -> T:
        """:func:`wait_until` with the containers' logs in its failure message."""
        return wait_until(what, probe, timeout_s, every_s, context=self.logs)

    def wait_healthy(self, api: Any, timeout_s: float = 600) -> None:
        """Wait until the API server reports the metadatabase, scheduler, triggerer and
        dag-processor healthy and the admin password exists (``api``: an
        :class:`iadeep.orchestration._standalone.Standalone` pointed at the stack).

        Raises:
            AssertionError: airflow-init (``db migrate``) failed (at once, with the logs), or not
                healthy within ``timeout_s`` seconds.
        """
        import httpx

        def healthy() -> bool:
            init = [c for c in self.containers() if c["Names"][0] == self.container("airflow-init")]
            if init and init[0]["State"] == "exited" and init[0]["ExitCode"] != 0:  # e.g. no database: fail now
                raise AssertionError(f"airflow-init (db migrate) exited {init[0]['ExitCode']}\n{self.logs()}")
            try:
                h = httpx.get(f"{api.url}/api/v2/monitor/health", timeout=10).json()
            except (httpx.HTTPError, ValueError):
                return False
            return (all(h.get(k, {}).get("status") == "healthy"
                        for k in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
                    and api.password_file.is_file())

        self.wait("Airflow's API server healthy with scheduler, triggerer and dag-processor", healthy, timeout_s)

    def healthy(self, service: str) -> bool:
        """Whether the compose file's health check of ``service`` passes now."""
        r = self.run(["podman", "healthcheck", "run", self.container(service)], check=False)
        return r.returncode == 0 and "unhealthy" not in r.stdout

    def healthcheck(self, service: str) -> None:
        """Run the compose file's health check of ``service`` now (podman's timers need systemd).

        Raises:
            AssertionError: it reports unhealthy (with the logs).
        """
        r = self.run(["podman", "healthcheck", "run", self.container(service)], check=False)
        assert r.returncode == 0 and "unhealthy" not in r.stdout, f"{service}: {r.stdout} {r.stderr}\n{self.logs()}"

    def listening(self) -> list[tuple[str, int, int]]:
        """``(address hex, port, pid)`` of every TCP socket in LISTEN state held by a process of a
        running container (or below one)."""
        running = {int(c["Pid"]) for c in self.containers() if c["State"] == "running" and c.get("Pid")}
        return _listening(_descendants(running))

    def assert_loopback_only(self) -> list[tuple[str, int, int]]:
        """Every socket the stack listens on is on loopback and the stack's ports are among them;
        returns :meth:`listening`.

        Raises:
            AssertionError: naming the sockets beyond loopback, or the ports nobody listens on.
        """
        listening = self.listening()
        public = [(a, p, pid, _cmdline(pid)) for a, p, pid in listening if a not in LOOPBACK]
        assert public == [], f"the stack listens beyond loopback: {public}"
        return listening

    def up(self, timeout_s: float = 600) -> subprocess.CompletedProcess:
        """``podman-compose up -d``."""
        return self.run([*self.compose, "up", "-d"], timeout=timeout_s)

    def down_leaving_nothing(self) -> None:
        """``down -v``, then check that no container, pod, volume, mount, conmon process or
        listening port of the stack is left.

        Raises:
            AssertionError: naming what is left.
        """
        self.run([*self.compose, "down", "-v"], timeout=300)
        assert self.containers() == []
        assert json.loads(self.run(["podman", "pod", "ps", "--format", "json"]).stdout or "[]") == []
        assert json.loads(self.run(["podman", "volume", "ls", "--format", "json"]).stdout or "[]") == []
        root = str(self.root)
        mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                  if ln.split()[4].startswith(root)]
        assert mounts == [], mounts
        conmons = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, root)]
        assert conmons == [], [(p.name, (p / "cmdline").read_bytes()[:200]) for p in conmons]
        for key, port in self.ports.items():
            self.wait(f"{key} {port} free again", lambda port=port: _port_free(int(port)), 60, every_s=1)

    def teardown(self) -> None:
        """Remove everything of the stack whatever state it is in (no checks)."""
        self.run([*self.compose, "down", "-v"], check=False)
        # whatever a failed `up` or `down` left in this private podman: containers, then volumes
        self.run(["podman", "rm", "--all", "--force", "--time", "5"], check=False)
        self.run(["podman", "volume", "rm", "--all", "--force"], check=False)
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
            mnt = line.split()[4]
            if mnt.startswith(str(self.root)):
                subprocess.run(["umount", "-l", mnt], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def stack_data(tmp_path: Path, dataset: Callable[[str], Path]) -> Path:
    """A data folder for ``IADEEP_DATA_DIR`` with the Philly trace and Gavel's throughputs in its
    dataset cache (the DAGs find them verified there; ``dataset``: the suite's fixture that fetches
    a registered dataset)."""
    data = tmp_path / "data"
    for name in ("philly", "gavel-throughputs"):
        shutil.copytree(dataset(name), data / "cache" / "datasets" / name)
    return data


@pytest.fixture
def compose_stack(stack_images: dict[str, str]) -> Iterator[Callable[..., ComposeStack]]:
    """``compose_stack(data, *extra_files, env=None) -> ComposeStack`` (see the module docstring):
    ``docker-compose.yaml`` plus ``extra_files`` (paths relative to the checkout or absolute), the
    data folder ``data`` (created), ``env`` on top of the stack's own variables. Skips (fails under
    CI) when podman cannot run here. Every stack made is torn down after the test."""
    made: list[ComposeStack] = []

    def make(data: Path, *extra_files: str | Path, env: dict[str, str] | None = None) -> ComposeStack:
        data.mkdir(parents=True, exist_ok=True)
        files = [REPO / "docker-compose.yaml", *(REPO / f for f in extra_files)]
        stack = ComposeStack(files, stack_images, data, env)
        made.append(stack)
        info = stack.run(["podman", "info", "--format", "json"], timeout=120, check=False)
        if info.returncode != 0:
            cannot_run(f"podman cannot run here (`podman info` exited {info.returncode}): {info.stderr[-2000:]}")
        return stack

    try:
        yield make
    finally:
        for stack in made:
            stack.teardown()


def run_dag(api: Any, dag_id: str, conf: dict[str, Any], timeout_s: float = 900,
            context: Callable[[], str] = str) -> list[dict[str, Any]]:
    """Wait until Airflow's dag-processor parsed ``dag_id``, unpause it, trigger a run with ``conf``
    through the REST API and wait for it to end; returns the run's task instances (the REST API's,
    with ``id``, ``hostname``, ``start_date``, ``end_date``). ``api``: an
    :class:`iadeep.orchestration._standalone.Standalone` (started, or pointed at a stack);
    ``context``: text for a failure message (e.g. :meth:`ComposeStack.logs`).

    Raises:
        AssertionError: a DAG import error in the stack, ``dag_id`` not parsed within 300 s, the
            run not ended within ``timeout_s`` seconds, or the run failed (with its failed tasks' logs).
    """
    def parsed() -> bool:
        errors = api.api("GET", "/importErrors")["import_errors"]
        assert errors == [], f"DAG import errors in the stack: {errors}"
        return any(d["dag_id"] == dag_id for d in api.api("GET", "/dags", params={"limit": 100})["dags"])

    wait_until(f"{dag_id} parsed by the dag-processor", parsed, 300, context=context)
    api.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    run_id = api.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})["dag_run_id"]

    def finished() -> str | None:
        state = api.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = wait_until(f"the {dag_id} run finished", finished, timeout_s, every_s=5, context=context)
    tis = api.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})["task_instances"]
    assert state == "success", (f"run {run_id}: {state}; tasks "
                                f"{[(t['task_id'], t['map_index'], t['state']) for t in tis]}\n"
                                + "\n".join(f"--- log of {t['task_id']}[{t['map_index']}] ---\n{task_log(api, t)[-3000:]}"
                                             for t in tis if t["state"] == "failed"))
    return tis


def task_log(api: Any, ti: dict[str, Any]) -> str:
    """A task instance's log (its latest try) through the REST API, as text (``api``: a
    :class:`iadeep.orchestration._standalone.Standalone` pointed at the stack; ``ti``: the REST
    API's task instance)."""
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
