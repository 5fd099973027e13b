"""The TOML registry: which datasets exist and which pinned files make them up."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iadeep.datasets._errors import DatasetError

__all__ = ["ARCHIVE_SUFFIXES", "DatasetInfo", "FileSpec", "load_manifest"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileSpec:
    """One pinned file of a dataset.

    Attributes:
        name: File name in the dataset folder (a plain name, no directories).
        url: Upstream download URL (commit-pinned).
        sha256: Expected SHA-256 of the file, lowercase hex.
        size_bytes: Expected size in bytes.
        extract: Whether the file is a tar or zip archive to unpack into :attr:`extract_dir_name`.
    """

    name: str
    url: str
    sha256: str
    size_bytes: int
    extract: bool = False

    @property
    def extract_dir_name(self) -> str:
        """The folder an archive is unpacked into: its name without the archive suffix."""
        for suffix in ARCHIVE_SUFFIXES:
            if self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset.

    Attributes:
        name: Registry name (e.g. ``"philly"``), also the cache folder name.
        description: One-paragraph description with the columns and units.
        licence: SPDX licence identifier of the data.
        citation: Paper(s) to cite when using the data.
        homepage: Project page of the data.
        files: The pinned files, in manifest order.
    """

    name: str
    description: str
    licence: str
    citation: str
    homepage: str
    files: tuple[FileSpec, ...]

    @property
    def size_bytes(self) -> int:
        """Total download size in bytes."""
        return sum(f.size_bytes for f in self.files)


def load_manifest(path: Path) -> dict[str, DatasetInfo]:
    """Read and validate a registry file.

    Args:
        path: The TOML manifest.

    Returns:
        Datasets by name, in file order.

    Raises:
        DatasetError: The file is missing, is not TOML, or an entry is malformed (the message
            names the manifest and the entry).
    """
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError("dataset manifest not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DatasetError(f"cannot read dataset manifest: {exc}", source=str(path)) from exc
    tables = raw.get("datasets")
    if not isinstance(tables, dict):
        raise DatasetError("manifest has no [datasets] table", source=str(path))
    return {name: _parse_dataset(path, name, entry) for name, entry in tables.items()}


def _parse_dataset(path: Path, name: str, entry: Any) -> DatasetInfo:
    def fail(reason: str, file: str | None = None) -> DatasetError:
        return DatasetError(f"bad manifest entry: {reason}", dataset=name, file=file, source=str(path))

    if not _NAME.match(name):
        raise fail("dataset names must be plain names (letters, digits, '.', '_', '-')")
    if not isinstance(entry, dict):
        raise fail("expected a table")
    text = {}
    for key in ("description", "licence", "citation", "homepage"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip():
            raise fail(f"missing or empty {key!r}")
        text[key] = value.strip()
    files = entry.get("files")
    if not isinstance(files, list) or not files:
        raise fail("needs at least one [[files]] entry")
    specs = tuple(_parse_file(f, fail) for f in files)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise fail("duplicate file names")
    return DatasetInfo(name=name, files=specs, **text)


def _parse_file(entry: Any, fail: Callable[..., DatasetError]) -> FileSpec:
    if not isinstance(entry, dict):
        raise fail("each [[files]] entry must be a table")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail(f"file name {name!r} must be a plain file name")
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise fail(f"url {url!r} must be http(s)", name)
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not _SHA256.match(sha.lower()):
        raise fail("sha256 must be 64 hex digits", name)
    size = entry.get("size_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise fail("size_bytes must be a non-negative integer", name)
    extract = entry.get("extract", False)
    if not isinstance(extract, bool):
        raise fail("extract must be true or false", name)
    if extract and not name.endswith(ARCHIVE_SUFFIXES):
        raise fail(f"only {', '.join(ARCHIVE_SUFFIXES)} archives can be extracted", name)
    return FileSpec(name=name, url=url, sha256=sha.lower(), size_bytes=size, extract=extract)
