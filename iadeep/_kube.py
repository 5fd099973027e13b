"""What the services' Kubernetes adapters share (the extender's, the device plugin's and the GPU
emulator's): loading the client's configuration with every way it fails as one error, the
``kubernetes`` client's errors as a status and a message, a watch as typed events with its
failures mapped to the adapter's own exception, and the pace and the log lines of a loop that
retries the API while it is unreachable (:class:`Backoff`)."""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from iadeep._host import watch_lines

__all__ = ["Backoff", "KubeConfigError", "api_error_status", "load_configuration", "watch_events"]


class KubeConfigError(ValueError):
    """The Kubernetes client's configuration cannot be loaded; the message, one line, names the
    source (``kubeconfig <path>`` or ``in-cluster service account``) and the reason."""


def load_configuration(*, in_cluster: bool = False, kubeconfig: str | Path | None = None,
                       context: str | None = None) -> Any:
    """A ``kubernetes.client.Configuration`` from the pod's service account or a kubeconfig.

    Args:
        in_cluster: the pod's service account (``kubeconfig`` and ``context`` unused).
        kubeconfig: the kubeconfig file; ``None``: ``$KUBECONFIG``, else ``~/.kube/config``.
        context: the kubeconfig's context; ``None``: its current context.

    Raises:
        KubeConfigError: ``cannot load the Kubernetes configuration (<source>): <reason>``: the
            file is missing or unreadable, is not YAML, or is YAML of another shape (the client
            reads a kubeconfig without checking types, so a list where a mapping belongs is a
            ``TypeError`` inside it), or the service account's token is missing.
    """
    import yaml
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=cfg)
    except (config.ConfigException, OSError, yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as exc:
        where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '($KUBECONFIG or ~/.kube/config)'}"
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, (TypeError, AttributeError, KeyError)):
            reason = f"not a kubeconfig ({type(exc).__name__}: {reason})"
        raise KubeConfigError(f"cannot load the Kubernetes configuration ({where}): {reason}") from None
    return cfg


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


class Backoff:
    """The waits of a loop that retries a failing call, and its log lines.

    The ``n``-th wait in a row is ``min(first_s * 2 ** (n - 1), max_s)`` less a random share of up
    to ``jitter`` of it (so that extender replicas do not retry in step); a success resets it.
    The log says each change of state once: the first failure at WARNING (the error and the next
    wait), the first wait at ``max_s`` at WARNING (still failing), the repeats between at DEBUG,
    and the recovery at INFO. An API down for an hour logs three lines, not one a second.

    Args:
        what: the loop, as the log names it (``"pod watch"``).
        logger: where the lines go.
        first_s: the first wait (s).
        max_s: the longest wait (s); 30 s bounds how late the loop notices the API is back.
        jitter: the largest share of a wait taken off at random (0 to 1).
        rand: a uniform draw in ``[0, 1)`` (tests pass a constant).

    Not thread-safe: one loop owns it.
    """

    def __init__(self, what: str, logger: logging.Logger, *, first_s: float = 1.0, max_s: float = 30.0,
                 jitter: float = 0.2, rand: Callable[[], float] = random.random) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(f"Backoff: need 0 < first_s <= max_s, got first_s={first_s}, max_s={max_s}")
        if not 0 <= jitter < 1:
            raise ValueError(f"Backoff: jitter must be in [0, 1), got {jitter}")
        self.what, self.log, self.first_s, self.max_s, self.jitter, self.rand = what, logger, first_s, max_s, jitter, rand
        self.failures = 0  # in a row, since the last success

    def failed(self, exc: object) -> float:
        """Count a failure, log it (class docstring) and return the wait before the next try (s)."""
        self.failures += 1
        full = min(self.first_s * 2 ** (self.failures - 1), self.max_s)
        wait = full * (1.0 - self.jitter * self.rand())
        if self.failures == 1:
            self.log.warning("%s failed: %s; retrying in %.1f s, then less often up to every %.0f s (repeats at DEBUG)",
                             self.what, exc, wait, self.max_s)
        elif full == self.max_s and full > self.first_s * 2 ** (self.failures - 2):
            self.log.warning("%s still failing after %d tries: %s; retrying every %.0f s", self.what, self.failures,
                             exc, self.max_s)
        else:
            self.log.debug("%s failed (%d in a row): %s; retrying in %.1f s", self.what, self.failures, exc, wait)
        return wait

    def succeeded(self) -> None:
        """The call worked: log the recovery after failures, and start again from ``first_s``."""
        if self.failures:
            self.log.info("%s works again after %d failed tries", self.what, self.failures)
        self.failures = 0
