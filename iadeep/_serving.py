"""What the long-running services share: validated setting types and the HTTP serving loop.

The tuner, the node coordinator and the device plugin (and the extender's settings) use these
so that a bad value is refused when the settings are built (one line naming the setting, exit
code 2, :func:`iadeep._climain.run_cli`) instead of failing later with a traceback, and so that
SIGTERM (what the kubelet sends a pod) runs each service's own shutdown.
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Callable
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator

__all__ = ["HttpUrl", "LogLevel", "NodeName", "configure_logging", "node_name", "probe_app", "quiet_client_retries",
           "serve_http", "settings_from"]

_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
# A Kubernetes node name is a DNS subdomain (RFC 1123): lowercase alphanumerics, '-' and '.',
# starting and ending alphanumeric, at most 253 characters (Kubernetes "Object Names and IDs").
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _log_level(value: str) -> str:
    level = value.strip().upper()
    if level not in _LEVELS:
        raise ValueError(f"not a log level: {value!r} (one of {', '.join(x.lower() for x in _LEVELS)})")
    return level


def node_name(value: str) -> str:
    """``value`` if it is a Kubernetes node name (RFC 1123 subdomain).

    Raises:
        ValueError: naming the value and the rule.
    """
    if not (0 < len(value) <= 253 and _SUBDOMAIN.fullmatch(value)):
        raise ValueError(f"{value!r} is not a Kubernetes node name (RFC 1123 subdomain: lowercase letters, "
                         "digits, '-' and '.', at most 253 characters)")
    return value


def _http_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8890")
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in 0..65535
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    return value.strip()


#: A Python logging level name, any case (``info``, ``DEBUG``); stored upper case.
LogLevel = Annotated[str, AfterValidator(_log_level)]
#: A Kubernetes node name (RFC 1123 subdomain).
NodeName = Annotated[str, AfterValidator(node_name)]
#: An ``http://`` or ``https://`` URL with a host (a service's base URL), kept as given.
HttpUrl = Annotated[str, AfterValidator(_http_url)]


S = TypeVar("S")


def settings_from(cls: type[S], flags: dict[str, Any], prog: str) -> S:
    """Build a service's settings (its environment, then the ``flags`` given, ``None`` = not given).

    A bad value is one line on stderr naming where it came from as a user would set it, the flag
    and the variable (``iadeep tuner: invalid settings: --port / IADEEP_TUNER_PORT: Input should be
    a valid integer (got 'abc')``; a nested setting by its variable,
    ``IADEEP_COORDINATOR_ROUND__DEADLINE_S``), then exit code 2.

    Args:
        cls: a pydantic-settings class (its ``env_prefix`` and ``env_nested_delimiter`` name the
            variables).
        flags: the command's options by setting name; nested settings as dicts.
        prog: the command, e.g. ``"iadeep tuner"``.

    Raises:
        typer.Exit: (code 2) after printing the line.
    """
    import typer
    from pydantic import ValidationError

    try:
        return cls(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        config = getattr(cls, "model_config", {})
        prefix, delim = config.get("env_prefix", ""), config.get("env_nested_delimiter") or "__"
        parts = []
        for err in exc.errors(include_url=False):
            loc = [str(x) for x in err["loc"]]
            msg = err["msg"].removeprefix("Value error, ")
            if not loc:  # a rule over several settings: its message names them
                parts.append(msg)
                continue
            env = prefix.upper() + delim.join(loc).upper()
            where = f"--{loc[0].replace('_', '-')} / {env}" if len(loc) == 1 and loc[0] in flags else env
            got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
            parts.append(f"{where}: {msg}{got}")
        typer.echo(f"{prog}: invalid settings: " + "; ".join(parts), err=True)
        raise typer.Exit(2) from None


class _ClientRetries(logging.Filter):
    """urllib3's line for each retry inside one HTTP call (``Retrying (Retry(total=2, ...)) after
    connection broken by ...``, WARNING, three per call to an unreachable API server) as DEBUG:
    the call's own failure is what the caller logs, paced by its backoff."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and isinstance(record.msg, str) and record.msg.startswith("Retrying ("):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def quiet_client_retries() -> None:
    """Log urllib3's per-attempt retry lines at DEBUG (:class:`_ClientRetries`); idempotent."""
    pool = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _ClientRetries) for f in pool.filters):
        pool.addFilter(_ClientRetries())


def configure_logging(level: str) -> None:
    """The services' log format on stderr at ``level`` (a :data:`LogLevel`), with urllib3's
    per-attempt retry lines at DEBUG (:func:`quiet_client_retries`)."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_client_retries()


class _Stop(Exception):
    """SIGTERM arrived outside uvicorn's own handling (before it started, or re-raised by it after
    its graceful shutdown)."""


def probe_app(title: str, registry: Any, not_ready: Callable[[], str | None]) -> Any:
    """The health and metrics app of a service: ``GET /healthz`` (200 while the process answers),
    ``GET /readyz`` (200 ``{"status": "ok"}``, or 503 with the reason ``not_ready()`` gives) and
    ``GET /metrics`` (Prometheus text format of ``registry``).

    Args:
        title: the app's title (``iadeep <service>``).
        registry: the service's ``prometheus_client.CollectorRegistry``.
        not_ready: ``None`` when the service is ready, else why not (one line).

    Returns:
        A FastAPI app (no OpenAPI or docs routes).
    """
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        why = not_ready()
        return JSONResponse({"status": why or "ok"}, status_code=503 if why else 200)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def serve_http(app: Any, *, host: str, port: int, log_level: str = "warning",
               on_stop: Callable[[], None] | None = None) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT, then run ``on_stop`` and return.

    uvicorn handles both signals itself while it runs (it stops accepting, finishes requests),
    and then raises the captured signal again (uvicorn 0.54, ``Server.capture_signals``): with
    the default SIGTERM handler the process would die there with exit code 143, before any
    shutdown code of the caller's. Here SIGTERM becomes a normal return (exit code 0), with
    ``on_stop`` run first; SIGINT keeps Python's ``KeyboardInterrupt`` (``Aborted!`` from the CLI),
    also after ``on_stop``.

    Args:
        app: the ASGI application.
        host / port: where to listen.
        log_level: uvicorn's log level.
        on_stop: the service's shutdown (stop threads, remove sockets); run once, whatever ended
            the serving, even an error.
    """
    import uvicorn

    def _term(_signum: int, _frame: object) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGTERM, _term)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level.lower())
    except _Stop:
        pass
    finally:
        try:
            if on_stop is not None:
                on_stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
