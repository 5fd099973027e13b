"""Python stubs of the kubelet device-plugin API, generated from ``v1beta1/api.proto`` by
grpcio-tools.

The stubs are build outputs, not sources: ``make venv`` generates them
(``python -m iadeep.deviceplugin._proto``), and :func:`load` regenerates them on import when
they are missing or stale (each generated file starts with the SHA-256 of the ``.proto`` and the
grpcio-tools version it came from). ``tests/deviceplugin`` regenerates them into a temporary
folder and fails when the files in the package differ.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["PROTO", "generate", "load", "stale", "header"]

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds ``iadeep/``
PROTO = Path(__file__).resolve().parent / "v1beta1" / "api.proto"
_REL = PROTO.relative_to(PACKAGE_ROOT)
_OUT = ("api_pb2.py", "api_pb2_grpc.py")


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def header() -> str:
    """The first line of each generated file: the proto's hash and the generator's version."""
    digest = hashlib.sha256(PROTO.read_bytes()).hexdigest()
    return f"# iadeep: generated from {_REL.as_posix()} sha256={digest} grpcio-tools={_tools_version()}\n"


def generate(out_root: Path) -> list[Path]:
    """Run grpcio-tools' protoc on the proto, writing ``<out_root>/iadeep/deviceplugin/v1beta1/``.

    Raises:
        RuntimeError: protoc failed (its exit code in the message).
    """
    from grpc_tools import protoc

    src_root = Path(tempfile.mkdtemp(prefix="iadeep-proto-"))
    try:
        (src_root / _REL).parent.mkdir(parents=True)
        shutil.copyfile(PROTO, src_root / _REL)
        includes = Path(protoc.__file__).resolve().parent / "_proto"
        out_root.mkdir(parents=True, exist_ok=True)
        code = protoc.main(["grpc_tools.protoc", f"-I{src_root}", f"-I{includes}", f"--python_out={out_root}",
                            f"--grpc_python_out={out_root}", str(src_root / _REL)])
        if code != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")
    finally:
        shutil.rmtree(src_root, ignore_errors=True)
    out = [out_root / _REL.parent / name for name in _OUT]
    head = header()
    for path in out:
        path.write_text(head + path.read_text())
    return out


def stale() -> bool:
    """True when a stub is missing or was generated from another proto or generator version."""
    head = header()
    for name in _OUT:
        path = PROTO.parent / name
        if not path.is_file():
            return True
        with path.open() as fh:
            if fh.readline() != head:
                return True
    return False


def load() -> tuple[ModuleType, ModuleType]:
    """``(api_pb2, api_pb2_grpc)``, generated first when missing or stale."""
    if stale():
        generate(PACKAGE_ROOT)
        for name in _OUT:
            sys.modules.pop(f"iadeep.deviceplugin.v1beta1.{name[:-3]}", None)
    pb2 = importlib.import_module("iadeep.deviceplugin.v1beta1.api_pb2")
    grpc_mod = importlib.import_module("iadeep.deviceplugin.v1beta1.api_pb2_grpc")
    return pb2, grpc_mod


if __name__ == "__main__":
    for p in generate(PACKAGE_ROOT):
        print(p)
