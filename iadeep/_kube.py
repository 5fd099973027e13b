"""What the services' Kubernetes adapters share (the extender's and the GPU emulator's): the
``kubernetes`` client's errors as a status and a message, and a watch as typed events with its
failures mapped to the adapter's own exception."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from iadeep._host import watch_lines

__all__ = ["api_error_status", "watch_events"]


def api_error_status(exc: Any) -> tuple[int, str]:
    """``(HTTP status, message)`` of a ``kubernetes`` client ``ApiException``: the ``Status``
    body's ``message`` when the API server sent one, else the reason."""
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, TypeError, AttributeError):
        message = None
    return status, str(message or getattr(exc, "reason", None) or exc)


def watch_events(open_stream: Callable[[], Any], what: str,
                 error: Callable[[str, int], Exception]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(type, object)`` of each event of a watch (``ADDED``, ``MODIFIED``, ``DELETED``,
    ``BOOKMARK``) until the server ends it.

    Args:
        open_stream: opens the watch: a ``kubernetes`` client list call with ``watch=True`` and
            ``_preload_content=False`` (its ``urllib3`` response).
        what: the watch, as the error messages name it.
        error: the caller's exception for a message and an HTTP status (0: none).

    Raises:
        the ``error`` type: the API refused the watch (its status, e.g. 410 Gone for a
        resourceVersion too old, and message), the API was unreachable, the stream broke, a line
        was not a watch event, or an ``ERROR`` event came (its ``Status`` code).
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        resp = open_stream()
    except ApiException as exc:
        status, message = api_error_status(exc)
        raise error(f"{what}: {status} {message}", status) from None
    except (HTTPError, OSError) as exc:
        raise error(f"{what}: Kubernetes API unreachable: {exc}", 0) from None
    try:
        with contextlib.closing(watch_lines(resp)) as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                    kind, obj = event["type"], event.get("object") or {}
                except (ValueError, KeyError, TypeError) as exc:
                    raise error(f"{what}: unreadable watch event ({exc}): {line[:200]!r}", 0) from None
                if kind == "ERROR":
                    raise error(f"{what}: {obj.get('code')} {obj.get('message')}", int(obj.get("code") or 0))
                yield kind, obj
    except (HTTPError, OSError) as exc:
        raise error(f"{what}: watch broke: {exc}", 0) from None
