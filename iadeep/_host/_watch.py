"""The lines of a Kubernetes watch stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def watch_lines(resp: Any) -> Iterator[bytes]:
    """Yield the non-blank lines of a streamed watch response, one watch event (a JSON object) each,
    and release the connection at the end, also when the caller stops early (close the generator).

    The API server sends a watch as newline-delimited JSON objects (Kubernetes API concepts,
    "Efficient detection of changes"); a chunk of the HTTP stream may end inside one.

    Args:
        resp: the ``urllib3`` response of a ``kubernetes`` client call with ``watch=True`` and
            ``_preload_content=False``.

    Raises:
        urllib3.exceptions.HTTPError, OSError: the stream broke (the caller names the watch).
    """
    try:
        buf = b""
        for chunk in resp.stream(None, decode_content=False):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line
        if buf.strip():
            yield buf
    finally:
        resp.release_conn()

