"""Safe, atomic unpacking of a verified tar or zip archive next to itself."""

from __future__ import annotations

import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath

from iadeep.datasets._errors import DatasetError

__all__ = ["extract_archive"]


def _escapes(name: str) -> str | None:
    """Why a member or link name would leave the extraction folder, if it would."""
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or name.startswith("\\"):
        return "absolute path"
    if ".." in posix.parts or ".." in windows.parts:
        return "path with '..'"
    return None


def _unsafe_reason(member: tarfile.TarInfo) -> str | None:
    reason = _escapes(member.name)
    if reason is not None:
        return reason
    if member.issym() or member.islnk():
        if _escapes(member.linkname) is not None:
            return f"link pointing outside the archive ({member.linkname})"
    elif not (member.isfile() or member.isdir()):
        return "special file (device, FIFO)"
    return None


def _zip_unsafe_reason(member: zipfile.ZipInfo) -> str | None:
    reason = _escapes(member.filename)
    if reason is not None:
        return reason
    mode = member.external_attr >> 16  # Unix mode bits, when the archive was made on Unix
    if stat.S_ISLNK(mode):
        return "symbolic link (not supported in zip archives)"
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "special file (device, FIFO)"
    return None


def _unpack(archive: Path, tmp: Path, error: Callable[[str], DatasetError]) -> None:
    """Check every member, then unpack ``archive`` (tar or zip, by content) into ``tmp``."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for zmember in members:
                reason = _zip_unsafe_reason(zmember)
                if reason is not None:
                    raise error(f"unsafe archive member {zmember.filename!r}: {reason}; nothing extracted")
            zf.extractall(tmp, members=members)
        return
    with tarfile.open(archive, "r:*") as tar:
        tmembers = tar.getmembers()
        for member in tmembers:
            reason = _unsafe_reason(member)
            if reason is not None:
                raise error(f"unsafe archive member {member.name!r}: {reason}; nothing extracted")
        tar.extractall(tmp, members=tmembers, filter="data")


def extract_archive(archive: Path, target: Path, *, dataset: str) -> Path:
    """Unpack ``archive`` into ``target`` unless ``target`` already exists.

    Every member is checked before anything is written; the archive is unpacked into a
    temporary folder beside ``target`` which is then renamed, so ``target`` either does not
    exist or holds the complete archive.

    Args:
        archive: A verified ``.tar``/``.tar.gz``/``.tgz`` or ``.zip`` file.
        target: The folder to create.
        dataset: Dataset name, for error messages.

    Returns:
        ``target``.

    Raises:
        DatasetError: A member has an absolute path, a ``..`` component, a link leading out of
            the archive or is a special file; or the archive is unreadable.
    """
    if target.is_dir():
        return target

    def error(reason: str) -> DatasetError:
        return DatasetError(reason, dataset=dataset, file=archive.name, source=str(archive))

    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.extract-", dir=target.parent))
    try:
        _unpack(archive, tmp, error)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent extraction that won the race
                raise
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise error(f"extraction failed: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
