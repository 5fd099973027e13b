"""Cgroups, mounts and teardown of the local real node (Linux only, run as root).

Every process of the node - containerd, the kubelet, containerd's runc shims (which daemonize
and so escape ``PR_SET_PDEATHSIG``) and every container - lives under one cgroup of its own,
``/iadeep-node-<id>`` in each hierarchy: containerd and the kubelet in ``<root>/runtime`` (the
shims inherit it), the pods in ``<root>/kubepods`` (the kubelet's ``cgroupRoot``). Teardown
therefore kills whatever the cgroup holds, lazily unmounts everything mounted below the node's
directory (overlay root filesystems, shm, the kubelet's volume mounts), removes the cgroups and
the kubelet's links in ``/var/log/containers``. :func:`teardown` is idempotent and is what the
reaper process runs when the Python process that started the node dies without stopping it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import time
from pathlib import Path

from iadeep.dev._nodeconfig import KUBELET_DIR_PREFIX, KUBELET_LINK

__all__ = [
    "CONTAINER_LOG_LINKS",
    "cgroup_hierarchies",
    "cgroup_pids",
    "cgroup_v2",
    "join_cgroup",
    "make_cgroup",
    "mounts_under",
    "teardown",
]

CGROUP_FS = Path("/sys/fs/cgroup")
# The kubelet links every container's log here (a constant in the kubelet, not configurable).
CONTAINER_LOG_LINKS = Path("/var/log/containers")
_MNT_DETACH = 2  # <sys/mount.h>


def _mountinfo(pid: int | str = "self") -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount of the mount namespace of ``pid`` (default:
    this process's)."""
    out = []
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = fields[4].encode().decode("unicode_escape")  # \040 etc.
            out.append((point, right.split()[0]))
    return out


def cgroup_v2() -> bool:
    """True when ``/sys/fs/cgroup`` is the unified (v2) hierarchy."""
    return any(p == str(CGROUP_FS) and t == "cgroup2" for p, t in _mountinfo())


def cgroup_hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies (v2: ``/sys/fs/cgroup``; v1/hybrid: one per
    controller mount, plus the named ``systemd`` and the empty unified one where mounted)."""
    if cgroup_v2():
        return [CGROUP_FS]
    seen = []
    for point, fstype in _mountinfo():
        if fstype in ("cgroup", "cgroup2") and point.startswith(str(CGROUP_FS) + "/"):
            p = Path(point)
            if p not in seen:
                seen.append(p)
    return seen


def make_cgroup(rel: str) -> list[Path]:
    """Create cgroup ``rel`` (e.g. ``/iadeep-node-ab12/runtime``) in every hierarchy.

    cpuset (v1) starts with empty ``cpus``/``mems``: copied from the parent so tasks can join.
    On v2 the usual controllers are enabled for the cgroup's children.
    """
    made = []
    for h in cgroup_hierarchies():
        path = h / rel.strip("/")
        parts = Path(rel.strip("/")).parts
        cur = h
        for i, part in enumerate(parts):
            parent, cur = cur, cur / part
            if not cur.exists():
                cur.mkdir()
            if (cur / "cpuset.cpus").exists() and h.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (cur / knob).read_text().strip():
                        (cur / knob).write_text((parent / knob).read_text())
            # v2: controllers for the children of every level but the leaf, which gets the
            # processes ("no internal processes": a cgroup with tasks cannot delegate).
            if h == CGROUP_FS and i < len(parts) - 1 and (cur / "cgroup.subtree_control").exists():
                have = set((cur / "cgroup.controllers").read_text().split())
                want = [c for c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb") if c in have]
                with contextlib.suppress(OSError):
                    (cur / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in want))
        made.append(path)
    return made


def join_cgroup(rel: str) -> None:
    """Move the calling process into cgroup ``rel`` of every hierarchy (for ``preexec_fn``)."""
    pid = str(os.getpid())
    for h in cgroup_hierarchies():
        procs = h / rel.strip("/") / "cgroup.procs"
        if procs.exists():
            procs.write_text(pid)


def cgroup_pids(rel: str) -> set[int]:
    """Every process in cgroup ``rel`` or below it, in any hierarchy."""
    pids: set[int] = set()
    for h in cgroup_hierarchies():
        top = h / rel.strip("/")
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in os.walk(top):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def _kill_cgroup(rel: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    killed = 0
    while True:
        pids = cgroup_pids(rel)
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.1)


def _remove_cgroup(rel: str) -> None:
    for h in cgroup_hierarchies():
        top = h / rel.strip("/")
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -len(Path(t[0]).parts)):
            for _ in range(20):  # a just-killed task can keep its cgroup busy for a moment
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def mounts_under(directory: Path, pid: int | str = "self") -> list[str]:
    """Mount points at or below ``directory`` in the mount namespace of ``pid`` (default: this
    process's), deepest first.

    Raises:
        OSError: no process ``pid``.
    """
    root = str(directory.resolve())
    points = {p for p, _t in _mountinfo(pid) if p == root or p.startswith(root + "/")}
    return sorted(points, key=lambda p: (-p.count("/"), p))


def _unmount_under(directory: Path) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    count = 0
    for _ in range(5):  # a lazy unmount of a parent can reveal mounts stacked below it
        points = mounts_under(directory)
        if not points:
            break
        for point in points:
            if libc.umount2(point.encode(), _MNT_DETACH) == 0:
                count += 1
    return count


def _remove_log_links(directory: Path) -> None:
    root = str(directory.resolve())
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(root + "/"):
                link.unlink()


def teardown(directory: Path, cgroup: str, *, timeout: float = 15.0) -> dict[str, int]:
    """Kill every process of cgroup ``cgroup``, unmount everything below ``directory``, remove
    the cgroups and the kubelet's log links into ``directory``. When ``<directory>/kubelet`` is a
    link (the kubelet's root directory kept short, ``NodePaths.kubelet_dir``), the same below its
    target, which is then removed with the link. Idempotent.

    Returns:
        counts: ``killed`` (signals sent), ``unmounted`` (mount points).
    """
    killed = _kill_cgroup(cgroup, timeout)
    # the kubelet's root directory, when it lives elsewhere (NodePaths.kubelet_dir): reached
    # through its link, so that a reaper or `iadeep dev node down` needs the node's folder alone
    # (only a folder the node made: a link to anything else is left as it is)
    link = directory / KUBELET_LINK
    elsewhere = link.resolve() if link.is_symlink() else None
    if elsewhere is not None and not elsewhere.name.startswith(KUBELET_DIR_PREFIX):
        elsewhere = None
    unmounted = 0
    for d in (directory, elsewhere):
        if d is not None:
            unmounted += _unmount_under(d)
            _remove_log_links(d)
    _remove_cgroup(cgroup)
    if elsewhere is not None and not mounts_under(elsewhere):  # nothing mounted is left in it: only the node's files
        shutil.rmtree(elsewhere, ignore_errors=True)
        link.unlink(missing_ok=True)
    return {"killed": killed, "unmounted": unmounted}
