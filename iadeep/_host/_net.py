"""Loopback ports and the command line of a single-member etcd (shared by :mod:`iadeep.state`'s
local etcd and :mod:`iadeep.dev`'s control plane)."""

from __future__ import annotations

import os
import socket

__all__ = ["etcd_argv", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
