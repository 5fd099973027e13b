"""Node-side services and emulated jobs as real processes, for tests and benchmarks.

* :class:`TunerProcess` - ``iadeep tuner serve`` on a free loopback port over one SQLite file;
  SIGKILL and restart on the same port and storage.
* :class:`CoordinatorProcess` - ``iadeep coordinator serve`` for one node.
* :class:`EmulatedJobs` - :mod:`iadeep.testing.emulated_job` processes sharing one emulated GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from iadeep.state import StateSettings
from iadeep._host import free_port
from iadeep.testing._wait import wait_for

__all__ = ["TunerProcess", "CoordinatorProcess", "DevicePluginProcess", "EmulatedJobs", "IADEEP", "etcd_env"]

IADEEP = str(Path(sys.executable).parent / "iadeep")


def etcd_env(settings: StateSettings) -> dict[str, str]:
    """The ``IADEEP_ETCD_*`` variables that point a child process at the same etcd and prefix."""
    return {"IADEEP_ETCD_ENDPOINTS": ",".join(settings.endpoints), "IADEEP_ETCD_PREFIX": settings.prefix}


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("IADEEP_TUNER_", "IADEEP_COORDINATOR_", "IADEEP_ETCD_", "IADEEP_WORKLOAD_"))}
    env.update(extra)
    return env


class _Process:
    """A service process in its own session (killed as a group), ready when ``/readyz`` is 200."""

    argv: list[str]
    url: str

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: Path | None = None

    def start(self, timeout_s: float = 60.0, *, ready: str = "/readyz") -> _Process:
        """Start and wait until ``ready`` answers 200 (``/healthz``: only alive). Its stderr
        goes to the file :attr:`stderr`."""
        import tempfile

        fd, name = tempfile.mkstemp(prefix=f"iadeep-{self.argv[1]}-", suffix=".log")
        self.stderr = Path(name)
        with os.fdopen(fd, "wb") as err:
            self.proc = subprocess.Popen(self.argv, env=_clean_env(self.env), start_new_session=True, stderr=err)

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.argv[1]} exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                return httpx.get(self.url + ready, timeout=1, trust_env=False).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, bool, timeout=timeout_s, what=f"{self.argv[1]} {ready}")
        return self

    def log(self) -> str:
        """What the process wrote to stderr so far."""
        return self.stderr.read_text(errors="replace") if self.stderr and self.stderr.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        """Send ``sig`` to the process group and wait (15 s); returns the exit code (negative:
        killed by that signal), ``None`` when it was not running."""
        code = None
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            code = self.proc.wait(timeout=15)
        self.proc = None
        return code


class TunerProcess(_Process):
    """``iadeep tuner serve`` over the SQLite file ``storage``."""

    def __init__(self, throughputs: Path, storage: Path, port: int | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(env)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [IADEEP, "tuner", "serve", "--port", str(self.port), "--storage-url", f"sqlite:///{storage}",
                     "--throughputs-file", str(throughputs), "--log-level", "warning"]


class CoordinatorProcess(_Process):
    """``iadeep coordinator serve`` for ``node``, etcd from ``etcd``."""

    def __init__(self, node: str, tuner_url: str, throughputs: Path, etcd: StateSettings,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__({**etcd_env(etcd), **(env or {})})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [IADEEP, "coordinator", "serve", "--node", node, "--tuner-url", tuner_url,
                     "--throughputs-file", str(throughputs), "--port", str(self.port)]


class EmulatedJobs:
    """Emulated jobs on one emulated GPU (the folder ``gpu_dir``), reporting to ``etcd``."""

    def __init__(self, gpu_dir: Path, throughputs: Path, etcd: StateSettings | None) -> None:
        self.gpu_dir = gpu_dir
        gpu_dir.mkdir(parents=True, exist_ok=True)
        self.throughputs = throughputs
        self.env = etcd_env(etcd) if etcd else {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, pod: str, model: str, batch_size: int, *, duration_s: float = 300, seed: int = 0,
              noise: float = 0.03) -> None:
        argv = [sys.executable, "-m", "iadeep.testing.emulated_job", "--pod", pod, "--model", model,
                "--batch-size", str(batch_size), "--gpu-dir", str(self.gpu_dir), "--throughputs", str(self.throughputs),
                "--duration-s", str(duration_s), "--seed", str(seed), "--noise", str(noise)]
        self.procs[pod] = subprocess.Popen(argv, env=_clean_env(self.env), start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self, pod: str, timeout_s: float = 30) -> int:
        """Ask a job to end (it reports completion) and wait for its exit code."""
        (self.gpu_dir / f"{pod}.stop").touch()
        code = self.procs[pod].wait(timeout=timeout_s)
        del self.procs[pod]
        return code

    def stop_all(self) -> None:
        """Finish every job (SIGKILL for one that does not end within 15 s)."""
        for pod in list(self.procs):
            try:
                self.finish(pod, timeout_s=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.procs.pop(pod).pid, signal.SIGKILL)


class DevicePluginProcess(_Process):
    """``iadeep deviceplugin serve`` for ``node`` with emulated GPUs, sockets in ``socket_dir``."""

    def __init__(self, node: str, socket_dir: Path, kubeconfig: Path, etcd: StateSettings, *, count: int = 2,
                 mem_gib: int = 16, env: Mapping[str, str] | None = None) -> None:
        super().__init__({**etcd_env(etcd), **(env or {})})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [IADEEP, "deviceplugin", "serve", "--node", node, "--socket-dir", str(socket_dir), "--backend",
                     "emulated", "--emulated-count", str(count), "--emulated-mem-gib", str(mem_gib),
                     "--kubeconfig", str(kubeconfig), "--port", str(self.port)]
