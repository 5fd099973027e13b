"""Small OCI images written directly, without a builder: the node's pod-sandbox image (``pause``)
and a test image holding Debian's static ``busybox``.

The archive is an OCI image layout in a tar file (OCI image-spec v1.1: ``oci-layout``,
``index.json``, ``blobs/sha256/...``) with one uncompressed layer, which ``ctr images import``
reads. The image name travels in the index entry's ``io.containerd.image.name`` annotation (the
name containerd's importer uses first) and its tag in ``org.opencontainers.image.ref.name``.
Everything is deterministic (fixed mtimes, sorted entries): the same files give the same digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ImageFile", "write_image_archive"]

_MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
_MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class ImageFile:
    """One entry of the image's single layer.

    Attributes:
        source: a host file to copy, or ``None`` with ``link`` set (a symbolic link).
        mode: permission bits.
        link: target of a symbolic link.
    """

    source: Path | None = None
    mode: int = 0o755
    link: str | None = None


def _layer(files: Mapping[str, ImageFile]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
        for path in sorted(files):
            spec = files[path]
            info = tarfile.TarInfo(path.strip("/"))
            info.mtime, info.mode = 0, spec.mode
            if spec.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, spec.link
                tar.addfile(info)
            else:
                assert spec.source is not None
                data = spec.source.read_bytes()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.split(':', 1)[1]}")
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))
    return digest, len(data)


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_image_archive(
    out: Path,
    name: str,
    files: Mapping[str, ImageFile],
    *,
    entrypoint: Sequence[str],
    env: Sequence[str] = ("PATH=/bin:/usr/bin:/usr/local/bin",),
) -> str:
    """Write a one-layer linux/amd64 image as an OCI layout tar at ``out``.

    Args:
        out: the tar file to write (replaced atomically).
        name: full image reference with tag, e.g. ``localhost/iadeep/pause:1``.
        files: path inside the image -> :class:`ImageFile`.
        entrypoint: the image's ``Entrypoint``.
        env: the image's ``Env``.

    Returns:
        The manifest digest (``sha256:...``).
    """
    layer = _layer(files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Env": list(env), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "iadeep.dev._oci", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    }
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        layer_digest, layer_size = _blob(tar, layer)
        config_digest, config_size = _blob(tar, _json(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": _MEDIA_MANIFEST,
            "config": {"mediaType": _MEDIA_CONFIG, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": _MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
        }
        manifest_digest, manifest_size = _blob(tar, _json(manifest))
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": _MEDIA_MANIFEST,
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
        for fname, data in (("oci-layout", _json({"imageLayoutVersion": "1.0.0"})), ("index.json", _json(index))):
            info = tarfile.TarInfo(fname)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return manifest_digest
