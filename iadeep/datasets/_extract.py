"""Safe, atomic unpacking of a verified tar archive next to itself."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
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


def extract_archive(archive: Path, target: Path, *, dataset: str) -> Path:
    """Unpack ``archive`` into ``target`` unless ``target`` already exists.

    Every member is checked before anything is written; the archive is unpacked into a
    temporary folder beside ``target`` which is then renamed, so ``target`` either does not
    exist or holds the complete archive.

    Args:
        archive: A verified ``.tar``/``.tar.gz``/``.tgz`` file.
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
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                reason = _unsafe_reason(member)
                if reason is not None:
                    raise error(f"unsafe archive member {member.name!r}: {reason}; nothing extracted")
            tar.extractall(tmp, members=members, filter="data")
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent extraction that won the race
                raise
    except (tarfile.TarError, OSError) as exc:
        raise error(f"extraction failed: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
