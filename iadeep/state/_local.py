"""The local etcd of ``iadeep etcd``, used when no endpoint is configured.

``iadeep etcd start`` runs one etcd member on loopback with its data, log and a small state file
(``etcd.json``: pid, ports, endpoint) in one directory, by default ``<user state dir>/iadeep/etcd``
(platformdirs; ``IADEEP_ETCD_LOCAL__DIR`` overrides it). The process is detached: it outlives the
command, and ``iadeep etcd stop`` ends it (data kept unless ``--purge``). Services built with no
``IADEEP_ETCD_ENDPOINTS`` find it through :func:`local_endpoint`, or start it with
:func:`ensure_local_etcd`.

The member is a :class:`iadeep.dev.LocalEtcd` (the process, its ports and its readiness check;
defined in the lowest layer, :mod:`iadeep._host`, so that this store imports nothing above it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from iadeep._host import LocalEtcd, LocalEtcdError, etcd_health
from iadeep.state._protocol import StoreUnavailable
from iadeep.state._settings import StateSettings

__all__ = [
    "LocalEtcdError",
    "ensure_local_etcd",
    "local_dir",
    "local_endpoint",
    "local_status",
    "require_endpoints",
    "start_local",
    "stop_local",
]

STATE_FILE = "etcd.json"


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
    state["healthy"] = state["running"] and etcd_health(str(state.get("endpoint")), 1.0)
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
    from iadeep._host import stop_detached

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
