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
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-\d+/(\d+|\*)$")


@dataclass(frozen=True)
class DownloadPolicy:
    """How hard to try over HTTP.

    A download is a series of answers, each resuming from the bytes the previous ones wrote
    (``Range: bytes=<written>-``). An answer that leaves the partial file longer than it has ever
    been this fetch is progress: the next request goes out at once and the count of failures
    starts again. Every other answer (a connection error or early close before any new byte, a
    5xx, 408 or 429, a 206 that does not continue the file) is a failure: it is retried after a
    wait, up to ``attempts`` failures in a row. A server that sends the file in short 206 parts
    therefore completes however many parts it takes; one that stops adding bytes is given up on.

    Attributes:
        attempts: Failures in a row (answers that add no byte) before giving up; at least 1.
        initial_wait_s: Wait after the first failure in a row, in seconds; doubles per failure.
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

    An HTTP download writes the body exactly as sent (a ``Content-Encoding`` label is not
    decoded: the manifest's checksum decides). It resumes an existing ``part`` with a ``Range``
    request (plus ``If-Range`` with the first answer's strong validator), and keeps resuming
    while the answers make progress (see :class:`DownloadPolicy`): an early close or a 206 that
    covers less than the rest of the file is followed by the next range. An answer of 200
    restarts the part cleanly, and a 206 that does not continue the part (another start,
    complete length or content coding, or a multipart body) discards the part and is retried.
    A 200 whose ``Content-Length`` is below the manifest size is the server's whole file: it is
    not resumed (the caller reports it truncated). A local mirror file is copied.

    Raises:
        DatasetError: Missing mirror file, an HTTP error status, a response larger than the
            manifest size, or ``policy.attempts`` answers in a row that added no byte (the
            message names the URL and says truncated, expected and received bytes, when a
            partial file was received). An interrupted ``part`` is kept for the next resume;
            it is never renamed into place unless complete and verified.
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
    """The server's answer to a resumed request does not continue the partial file; it was discarded."""


@dataclass
class _Representation:
    """What the first response of one fetch said about the file it sent (RFC 9110 section 8).

    A partial file may only be continued with bytes of the same representation: the same
    content coding (section 8.4: a range applies to the encoded bytes) and, when the server
    gave one, the same strong validator, sent back as ``If-Range`` (section 13.1.5) so that a
    server whose file changed answers 200 with all of it instead of a 206 that would splice
    two versions. Weak entity tags are never sent in ``If-Range`` (the RFC forbids it).

    Attributes:
        encoding: The ``Content-Encoding`` header ("" for none), or ``None`` while unknown (a
            partial file left by an earlier process).
        validator: A strong ``ETag`` or the ``Last-Modified`` date, or ``None``.
    """

    encoding: str | None = None
    validator: str | None = None

    def learn(self, response: httpx.Response) -> None:
        self.encoding = response.headers.get("Content-Encoding", "").strip().lower()
        etag = response.headers.get("ETag")
        if etag and not etag.startswith("W/"):
            self.validator = etag
        else:
            self.validator = response.headers.get("Last-Modified")


class _Short(Exception):
    """An answer ended cleanly before the end of the file (a short 206, or a 200 with no length)."""


@dataclass
class _Progress:
    """Progress of one fetch: the longest the partial file has been, and failures since then.

    Attributes:
        best_bytes: The most bytes the partial file has held during this fetch.
        stalls: Answers in a row that did not make it longer than ``best_bytes``.
    """

    best_bytes: int
    stalls: int = 0

    def note(self, part: Path) -> None:
        """Count one answer, by the length of ``part`` after it."""
        now = part.stat().st_size if part.exists() else 0
        if now > self.best_bytes:
            self.best_bytes, self.stalls = now, 0
        else:
            self.stalls += 1


def _download(
    dataset: str, spec: FileSpec, url: str, part: Path, policy: DownloadPolicy, reporter: Reporter
) -> None:
    def error(reason: str) -> DatasetError:
        return DatasetError(reason, dataset=dataset, file=spec.name, source=url)

    attempts = max(1, policy.attempts)
    progress = _Progress(part.stat().st_size if part.exists() else 0)

    def wait_s(_state: tenacity.RetryCallState) -> float:
        # no wait after progress; after the k-th failure in a row, initial * 2**(k-1), capped
        if progress.stalls == 0:
            return 0.0
        return min(policy.max_wait_s, policy.initial_wait_s * 2 ** (progress.stalls - 1))

    def answer(client: httpx.Client, seen: _Representation) -> None:
        try:
            _attempt(client, url, part, spec.size_bytes, reporter, error, seen)
        finally:
            progress.note(part)

    retrying = tenacity.Retrying(
        stop=lambda _state: progress.stalls >= attempts,
        wait=wait_s,
        retry=tenacity.retry_if_exception_type((httpx.TransportError, _TransientStatus, _BadRange, _Short)),
        reraise=True,
    )
    # "identity" asks for the file as stored; a server may still label it with a content coding
    # (e.g. "Content-Encoding: gzip" on a .tar.gz), and the body is then written as received:
    # the file on disk is the bytes sent, and the manifest's size and checksum decide.
    headers = {"User-Agent": f"iadeep/{__version__}", "Accept-Encoding": "identity"}
    tries = f"after {attempts} attempt(s)"
    seen = _Representation()
    with httpx.Client(follow_redirects=True, timeout=policy.timeout_s, headers=headers) as client:
        try:
            retrying(answer, client, seen)
        except _TransientStatus as exc:
            raise error(f"{exc} {tries}") from exc
        except _BadRange as exc:
            raise error(f"server does not honour byte ranges {tries}: {exc}") from exc
        except (httpx.TransportError, _Short) as exc:
            got = part.stat().st_size if part.exists() else 0
            cause = f"{type(exc).__name__}: {exc}" if isinstance(exc, httpx.TransportError) else str(exc)
            if 0 < got < spec.size_bytes:
                raise error(f"truncated (expected {spec.size_bytes} bytes, got {got}) {tries} in a row "
                            f"that added no byte: {cause}") from exc
            raise error(f"download failed {tries}: {cause}") from exc
        except OSError as exc:
            raise error(f"cannot write {part}: {exc}") from exc


def _continues(response: httpx.Response, offset: int, size: int, seen: _Representation) -> str | None:
    """Why a 206 answer cannot be appended at ``offset``, or ``None`` when it can.

    Legal answers to ``Range: bytes=<offset>-`` (RFC 9110 section 14.2, 15.3.7): one
    ``Content-Range: bytes <offset>-<last>/<complete length>`` part; the same range as a
    ``multipart/byteranges`` body (not used here: rejected); 200 with the whole file; 416.
    """
    if response.headers.get("Content-Type", "").lower().startswith("multipart/byteranges"):
        return "multipart/byteranges answer to a single range"
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if match is None:
        return f"206 with Content-Range {response.headers.get('Content-Range')!r}"
    first, total = int(match.group(1)), match.group(2)
    if first != offset:
        return f"206 starts at byte {first}, not at {offset}"
    if total != "*" and int(total) != size:
        return f"206 says the file has {total} bytes, the manifest {size}"
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if seen.encoding is not None and encoding != seen.encoding:
        return f"206 has content coding {encoding or 'identity'!r}, the partial file {seen.encoding or 'identity'!r}"
    return None


def _attempt(
    client: httpx.Client,
    url: str,
    part: Path,
    size: int,
    reporter: Reporter,
    error: Callable[[str], DatasetError],
    seen: _Representation,
) -> None:
    offset = part.stat().st_size if part.exists() else 0
    if offset > size:
        part.unlink()
        offset = 0
    request_headers = {}
    if offset:
        request_headers["Range"] = f"bytes={offset}-"
        if seen.validator:
            request_headers["If-Range"] = seen.validator
    with client.stream("GET", url, headers=request_headers) as response:
        status = response.status_code
        if status == 416 and offset:
            if offset == size:  # already complete; the checksum decides
                return
            part.unlink()
            raise _BadRange(f"416 for a partial file of {offset} bytes")
        if status >= 500 or status in _RETRY_STATUSES:
            raise _TransientStatus(response)
        if status == 206 and offset:
            why = _continues(response, offset, size, seen)
            if why is not None:
                part.unlink()
                raise _BadRange(why)
            mode = "ab"
        elif status == 200:
            mode, offset = "wb", 0
            seen.learn(response)
        else:
            raise error(f"HTTP {status} {response.reason_phrase}".rstrip())
        if seen.encoding is None:
            seen.learn(response)
        reporter.reset(offset)
        written = offset
        with part.open(mode) as fh:
            # iter_raw: the bytes as sent, never decoded by their Content-Encoding; written as
            # received, so an interruption loses nothing.
            for chunk in response.iter_raw():
                written += len(chunk)
                if written > size:
                    break
                fh.write(chunk)
                reporter.advance(len(chunk))
    if written > size:
        part.unlink(missing_ok=True)
        raise error(f"response larger than expected ({size} bytes); discarded")
    if written < size and not (status == 200 and "Content-Length" in response.headers):
        # the answer ended early without a transport error (a 206 for less than the rest, or a
        # body without a length): the next range continues it
        raise _Short(f"HTTP {status} ended at byte {written} of {size}")
