"""Safe, atomic unpacking of a verified tar or zip archive next to itself."""

from __future__ import annotations

import json
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath

from iadeep.datasets._errors import DatasetError

__all__ = ["extract_archive", "extraction_damage", "LISTING"]

#: Written into an extraction folder after unpacking: every regular file's path (relative,
#: POSIX) and size in bytes. The archive's checksum covers the archive, not what was unpacked
#: from it: this listing is what a damaged extraction (a truncated or deleted file) is found by.
LISTING = ".iadeep-extracted.json"


def _listing(folder: Path) -> dict[str, int]:
    return {f.relative_to(folder).as_posix(): f.stat().st_size for f in sorted(folder.rglob("*"))
            if f.is_file() and not f.is_symlink() and f.name != LISTING}


def extraction_damage(target: Path) -> str | None:
    """Why the extraction folder ``target`` differs from what was unpacked into it, or ``None``.

    Compares every listed file's size (:data:`LISTING`); a folder without a listing (unpacked
    before listings were written, or not by :func:`extract_archive`) is reported as such.
    """
    try:
        listed = json.loads((target / LISTING).read_text())
    except (OSError, ValueError):
        return f"{target} has no readable list of its unpacked files ({LISTING})"
    for name, size in listed.items():
        f = target / name
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != size:
            return f"{f} has {f.stat().st_size} bytes, {size} when unpacked"
    return None


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
    """Unpack ``archive`` into ``target`` unless ``target`` already holds it intact.

    A ``target`` that differs from its listing (:func:`extraction_damage`: a file truncated or
    deleted since) is removed and unpacked again.

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
        if extraction_damage(target) is None:
            return target
        shutil.rmtree(target)  # damaged since it was unpacked: unpack the verified archive again

    def error(reason: str) -> DatasetError:
        return DatasetError(reason, dataset=dataset, file=archive.name, source=str(archive))

    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.extract-", dir=target.parent))
    try:
        _unpack(archive, tmp, error)
        (tmp / LISTING).write_text(json.dumps(_listing(tmp), indent=0, sort_keys=True))
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
