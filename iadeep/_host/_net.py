"""Loopback ports and the command line of a single-member etcd (shared by :mod:`iadeep.state`'s
local etcd and :mod:`iadeep.dev`'s control plane)."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from iadeep._host._procs import pid_alive

__all__ = ["etcd_argv", "free_port"]

#: Where :func:`free_port` records which process each port was handed to (one file per port).
CLAIMS_DIR_NAME = "iadeep-ports"
_CLAIM_TRIES = 64


def _os_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _claim(folder: Path, port: int) -> bool:
    """Record ``port`` as handed to this process; False when a live process (this one included)
    was handed it already. A claim of a process that has ended is taken over."""
    path = folder / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(path.read_text() or "0")
            except (OSError, ValueError):
                return False  # being written by its claimer, or unreadable: not ours either way
            if pid_alive(pid):
                return False
            try:  # stale: move it aside (one of several racing processes wins), then claim anew
                stale = folder / f".{port}.{os.getpid()}.stale"
                os.rename(path, stale)
                os.unlink(stale)
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that no live process was handed by
    this function before.

    The OS picks a port that is free now (bind to port 0); between that and the moment the caller's
    server binds it, another process could be handed the same port (one of two suspects of an extra
    reservation seen once with two pytest workers: a worker's kube-scheduler calling the other
    worker's extender on a shared port; README, "Tests"). So every port handed out is recorded in
    ``$TMPDIR/iadeep-ports/<port>`` with the receiving process's PID, and a port recorded for a
    live process is never handed out again (a record of an ended process is taken over). Falls
    back to the OS's pick alone when the folder cannot be written.
    """
    folder = Path(tempfile.gettempdir()) / CLAIMS_DIR_NAME
    try:
        folder.mkdir(mode=0o755, exist_ok=True)
    except OSError:
        return _os_port()
    port = _os_port()
    for _ in range(_CLAIM_TRIES):
        try:
            if _claim(folder, port):
                return port
        except OSError:
            return port
        port = _os_port()
    return port


def etcd_argv(
    binary: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    *,
    client_port: int,
    peer_port: int,
    name: str = "iadeep-dev",
    fsync: bool = False,
    client_scheme: str = "http",
) -> list[str]:
    """Command line of a single-member etcd on loopback (``http://127.0.0.1:<client_port>``).

    Shared by :class:`ControlPlane` and the standalone etcd of :mod:`iadeep.state` (``iadeep etcd
    start``). ``fsync=False`` adds ``--unsafe-no-fsync``: fine for throw-away data, which survives
    a killed process anyway (only a machine crash loses it). ``client_scheme="https"`` needs the
    caller to add etcd's ``--cert-file``/``--key-file`` (and ``--trusted-ca-file``) flags.
    """
    client = f"{client_scheme}://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    argv = [
        str(binary),
        f"--name={name}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={name}={peer}",
        "--log-level=warn",
    ]
    if not fsync:
        argv.append("--unsafe-no-fsync")
    return argv
