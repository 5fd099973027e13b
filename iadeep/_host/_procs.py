"""Child processes of the control plane: each in its own process group, logging to a file.

Every component runs as the leader of a new session, so stopping it signals the whole group.
With ``die_with_parent`` the kernel sends SIGKILL to the child when the process that started it
exits, even on SIGKILL or a crash (Linux ``PR_SET_PDEATHSIG``), so nothing outlives a test run.
(SIGKILL, not SIGTERM: once etcd is gone kube-apiserver's graceful shutdown can hang; an orderly
stop goes through :meth:`Proc.stop` first anyway.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iadeep._parent import die_with_parent

def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists (signal 0; one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pdeathsig() -> None:  # runs in the child between fork and exec
    die_with_parent(signal.SIGKILL)


def _preexec(pdeathsig: bool, extra: Callable[[], None] | None) -> Callable[[], None] | None:
    if extra is None:
        return _pdeathsig if pdeathsig else None

    def run() -> None:
        if pdeathsig:
            _pdeathsig()
        extra()

    return run


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 25) -> str:
        return log_tail(self.log, lines)

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            signal_group(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_group(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        # Reap the rest of the group (a component's own children, if it ever had any).
        signal_group(self.pid, signal.SIGKILL)


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def spawn(
    name: str,
    argv: list[str],
    log_dir: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
    preexec: Callable[[], None] | None = None,
) -> Proc:
    """Start ``argv`` as the leader of a new session, stdout and stderr appended to
    ``<log_dir>/<name>.log``. ``preexec`` runs in the child before ``exec`` (after the
    parent-death signal is set when ``die_with_parent``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_preexec(die_with_parent and sys.platform == "linux", preexec),  # noqa: PLW1509
        )
    return Proc(name=name, argv=argv, log=log, popen=popen)


def stop_detached(pid: int, expected_exe: str, timeout: float = 10.0) -> bool:
    """Stop a process group started by an earlier ``cluster up``; checks the pid still runs
    ``expected_exe`` first (pids get reused). Returns True when something was signalled."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        cmdline = ""
    if cmdline and cmdline != expected_exe:
        return False
    if not signal_group(pid, signal.SIGTERM):
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _running(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    signal_group(pid, signal.SIGKILL)
    return True


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (whose reaping is its parent's business)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
