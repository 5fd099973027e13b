"""Checksums of cached files, with a stamp so that an unchanged, verified file is not re-hashed."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from iadeep.datasets._manifest import FileSpec

__all__ = [
    "VerifyResult",
    "VerifyStatus",
    "check_file",
    "is_verified",
    "sha256_of",
    "stamp_path",
    "write_stamp",
]

_CHUNK = 1 << 20


class VerifyStatus(StrEnum):
    """Outcome of checking one cached file."""

    OK = "ok"
    MISSING = "missing"
    SIZE_MISMATCH = "size mismatch"
    CHECKSUM_MISMATCH = "checksum mismatch"
    UNPACKED_DAMAGED = "unpacked files damaged"


@dataclass(frozen=True)
class VerifyResult:
    """The state of one cached file against the manifest.

    Attributes:
        dataset: Dataset name.
        file: File name.
        path: Where the file is (or would be) in the cache.
        status: What the check found.
        expected_size: Size in bytes from the manifest.
        actual_size: Size in bytes on disk, ``None`` when missing.
        expected_sha256: SHA-256 from the manifest.
        actual_sha256: SHA-256 on disk, ``None`` when missing or when the size already differs.
        note: for ``UNPACKED_DAMAGED`` (an archive verified, the files unpacked from it changed
            since): which file and how (``iadeep datasets fetch`` unpacks it again).
    """

    dataset: str
    file: str
    path: Path
    status: VerifyStatus
    expected_size: int
    actual_size: int | None
    expected_sha256: str
    actual_sha256: str | None
    note: str = ""

    @property
    def ok(self) -> bool:
        """Whether the file is present and matches size and checksum."""
        return self.status is VerifyStatus.OK

    @property
    def detail(self) -> str:
        """Human-readable explanation of :attr:`status`."""
        if self.status is VerifyStatus.SIZE_MISMATCH:
            return f"expected {self.expected_size} bytes, got {self.actual_size}"
        if self.status is VerifyStatus.CHECKSUM_MISMATCH:
            return f"expected sha256 {self.expected_sha256}, got {self.actual_sha256}"
        if self.status is VerifyStatus.MISSING:
            return f"not in the cache ({self.path})"
        if self.status is VerifyStatus.UNPACKED_DAMAGED:
            return f"{self.note}; `iadeep datasets fetch {self.dataset}` unpacks it again"
        return f"{self.actual_size} bytes, sha256 {self.actual_sha256}"


def sha256_of(path: Path) -> str:
    """SHA-256 of a file, lowercase hex (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def stamp_path(path: Path) -> Path:
    """The stamp recording that ``path`` was verified: ``.<name>.verified`` beside it."""
    return path.with_name(f".{path.name}.verified")


def _stamp_key(st: os.stat_result, sha256: str) -> dict[str, int | str]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}


def write_stamp(path: Path, sha256: str) -> None:
    """Record that ``path``, at its current size and mtime, has checksum ``sha256``."""
    try:
        stamp_path(path).write_text(json.dumps(_stamp_key(path.stat(), sha256)), encoding="utf-8")
    except OSError:  # a read-only cache still works, only slower
        pass


def _stamp_matches(path: Path, st: os.stat_result, sha256: str) -> bool:
    try:
        recorded = json.loads(stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded == _stamp_key(st, sha256))


def _drop_stamp(path: Path) -> None:
    stamp_path(path).unlink(missing_ok=True)


def check_file(dataset: str, spec: FileSpec, path: Path, *, trust_stamp: bool = False) -> VerifyResult:
    """Check a cached file against its manifest entry; refresh or drop its stamp.

    Args:
        dataset: Dataset name (for the result).
        spec: The manifest entry.
        path: The file in the cache.
        trust_stamp: Accept a stamp matching the file's size and mtime instead of re-hashing.

    Returns:
        The result; a size mismatch is reported without hashing.
    """

    def result(status: VerifyStatus, size: int | None = None, sha: str | None = None) -> VerifyResult:
        return VerifyResult(dataset, spec.name, path, status, spec.size_bytes, size, spec.sha256, sha)

    try:
        st = path.stat()
    except FileNotFoundError:
        _drop_stamp(path)
        return result(VerifyStatus.MISSING)
    if st.st_size != spec.size_bytes:
        _drop_stamp(path)
        return result(VerifyStatus.SIZE_MISMATCH, st.st_size)
    if trust_stamp and _stamp_matches(path, st, spec.sha256):
        return result(VerifyStatus.OK, st.st_size, spec.sha256)
    actual = sha256_of(path)
    if actual != spec.sha256:
        _drop_stamp(path)
        return result(VerifyStatus.CHECKSUM_MISMATCH, st.st_size, actual)
    write_stamp(path, actual)
    return result(VerifyStatus.OK, st.st_size, actual)


def is_verified(dataset: str, spec: FileSpec, path: Path) -> bool:
    """Whether the cached file is good, trusting a matching stamp (instant when unchanged)."""
    return check_file(dataset, spec, path, trust_stamp=True).ok
