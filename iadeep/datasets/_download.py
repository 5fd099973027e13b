"""Getting one file into ``<file>.part``: HTTP(S) with resume and retries, or a local-mirror copy."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse
from urllib.request import url2pathname

import httpx
import tenacity

from iadeep import __version__
from iadeep.datasets._errors import DatasetError
from iadeep.datasets._manifest import FileSpec

__all__ = ["DownloadPolicy", "Reporter", "Source", "acquire", "resolve_source"]

_RETRY_STATUSES = frozenset({408, 429})
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-\d+/(?:\d+|\*)$")


@dataclass(frozen=True)
class DownloadPolicy:
    """How hard to try over HTTP.

    Attributes:
        attempts: Tries per file (connection errors, 5xx, 408 and 429 are retried; the next try
            resumes from what the previous one wrote).
        initial_wait_s: Wait before the second try, in seconds; doubles per try.
        max_wait_s: Cap on one wait, in seconds.
        timeout_s: Connect/read timeout per request, in seconds.
        chunk_bytes: Block size when copying from a local mirror, in bytes.
    """

    attempts: int = 4
    initial_wait_s: float = 1.0
    max_wait_s: float = 10.0
    timeout_s: float = 60.0
    chunk_bytes: int = 1 << 16


class Reporter(Protocol):
    """Receives byte counts for one file (a progress-bar task)."""

    def reset(self, completed: int) -> None:
        """Restart the count at ``completed`` bytes."""

    def advance(self, nbytes: int) -> None:
        """Add ``nbytes`` bytes."""


@dataclass(frozen=True)
class Source:
    """Where a file is read from.

    Attributes:
        location: The URL, or the local mirror path as a string (used in messages).
        local_path: The mirror path for a local mirror, ``None`` for HTTP(S).
    """

    location: str
    local_path: Path | None = None


def resolve_source(dataset: str, spec: FileSpec, mirror: str | None) -> Source:
    """Pick the upstream URL or the mirror location ``<mirror>/<dataset>/<file name>``.

    Args:
        dataset: Dataset name.
        spec: The file's manifest entry.
        mirror: ``None``, an ``http(s)://`` base URL, a ``file://`` URL or a local folder.

    Returns:
        The source to read.
    """
    if mirror is None:
        return Source(spec.url)
    if mirror.startswith(("http://", "https://")):
        return Source(f"{mirror.rstrip('/')}/{dataset}/{spec.name}")
    base = Path(url2pathname(urlparse(mirror).path)) if mirror.startswith("file://") else Path(mirror)
    path = base.expanduser() / dataset / spec.name
    return Source(str(path), path)


def acquire(
    dataset: str, spec: FileSpec, source: Source, part: Path, policy: DownloadPolicy, reporter: Reporter
) -> None:
    """Fill ``part`` with the file's bytes (size and checksum are checked by the caller).

    An HTTP download resumes an existing ``part`` with a ``Range`` request; a server answering
    200 instead of 206 restarts it cleanly. A local mirror file is copied.

    Raises:
        DatasetError: Missing mirror file, an HTTP error status, a response larger than the
            manifest size, or retries exhausted (the message says truncated when a partial
            file was received). An interrupted ``part`` is kept for the next resume.
    """
    if source.local_path is not None:
        _copy_local(dataset, spec, source.local_path, part, policy, reporter)
    else:
        _download(dataset, spec, source.location, part, policy, reporter)


def _copy_local(
    dataset: str, spec: FileSpec, src: Path, part: Path, policy: DownloadPolicy, reporter: Reporter
) -> None:
    if not src.is_file():
        raise DatasetError("missing mirror file", dataset=dataset, file=spec.name, source=str(src))
    reporter.reset(0)
    try:
        with src.open("rb") as fin, part.open("wb") as fout:
            while chunk := fin.read(policy.chunk_bytes):
                fout.write(chunk)
                reporter.advance(len(chunk))
    except OSError as exc:
        part.unlink(missing_ok=True)
        reason = f"copy from mirror failed: {exc}"
        raise DatasetError(reason, dataset=dataset, file=spec.name, source=str(src)) from exc


class _TransientStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())


class _BadRange(Exception):
    """The server's byte range does not continue the partial file; it was discarded."""


def _download(
    dataset: str, spec: FileSpec, url: str, part: Path, policy: DownloadPolicy, reporter: Reporter
) -> None:
    def error(reason: str) -> DatasetError:
        return DatasetError(reason, dataset=dataset, file=spec.name, source=url)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, policy.attempts)),
        wait=tenacity.wait_exponential(multiplier=policy.initial_wait_s, max=policy.max_wait_s),
        retry=tenacity.retry_if_exception_type((httpx.TransportError, _TransientStatus, _BadRange)),
        reraise=True,
    )
    headers = {"User-Agent": f"iadeep/{__version__}", "Accept-Encoding": "identity"}
    tries = f"after {max(1, policy.attempts)} attempt(s)"
    with httpx.Client(follow_redirects=True, timeout=policy.timeout_s, headers=headers) as client:
        try:
            retrying(_attempt, client, url, part, spec.size_bytes, reporter, error)
        except _TransientStatus as exc:
            raise error(f"{exc} {tries}") from exc
        except _BadRange as exc:
            raise error(f"server does not honour byte ranges {tries}") from exc
        except httpx.TransportError as exc:
            got = part.stat().st_size if part.exists() else 0
            cause = f"{type(exc).__name__}: {exc}"
            if 0 < got < spec.size_bytes:
                raise error(f"truncated (expected {spec.size_bytes} bytes, got {got}) {tries}: {cause}") from exc
            raise error(f"download failed {tries}: {cause}") from exc
        except OSError as exc:
            raise error(f"cannot write {part}: {exc}") from exc


def _attempt(
    client: httpx.Client,
    url: str,
    part: Path,
    size: int,
    reporter: Reporter,
    error: Callable[[str], DatasetError],
) -> None:
    offset = part.stat().st_size if part.exists() else 0
    if offset > size:
        part.unlink()
        offset = 0
    request_headers = {"Range": f"bytes={offset}-"} if offset else {}
    with client.stream("GET", url, headers=request_headers) as response:
        status = response.status_code
        if status == 416 and offset:
            if offset == size:  # already complete; the checksum decides
                return
            part.unlink()
            raise _BadRange()
        if status >= 500 or status in _RETRY_STATUSES:
            raise _TransientStatus(response)
        if status == 206 and offset:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != offset:
                part.unlink()
                raise _BadRange()
            mode = "ab"
        elif status == 200:
            mode, offset = "wb", 0
        else:
            raise error(f"HTTP {status} {response.reason_phrase}".rstrip())
        reporter.reset(offset)
        written = offset
        with part.open(mode) as fh:
            for chunk in response.iter_bytes():  # as received, so an interruption loses nothing
                written += len(chunk)
                if written > size:
                    break
                fh.write(chunk)
                reporter.advance(len(chunk))
    if written > size:
        part.unlink(missing_ok=True)
        raise error(f"response larger than expected ({size} bytes); discarded")
