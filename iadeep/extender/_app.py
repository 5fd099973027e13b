"""The HTTP face of the extender (FastAPI): routes decode, call :class:`ExtenderService`, encode.

=================================  ======  =======================================================
route                              method  answer
=================================  ======  =======================================================
``<prefix>/filter``                POST    ``ExtenderFilterResult``; failures in ``Error`` (200)
``<prefix>/prioritize``            POST    ``HostPriorityList`` (scores 0..10); 503 when the state
                                           is unknown (kube-scheduler ignores failed priorities)
``<prefix>/bind``                  POST    ``ExtenderBindingResult``; failures in ``Error`` (200)
``/healthz``                       GET     200 ``ok`` while the process serves
``/readyz``                        GET     200 ``ok``; 503 with the reason when etcd is unreachable
``/metrics``                       GET     Prometheus text format (see :mod:`._metrics`)
``/inspect``                       GET     per node, per GPU: memory, pods, predicted interference
                                           (``?node=NAME`` for one node)
=================================  ======  =======================================================

A body that is not JSON, or misses or mistypes a field, gets 400 with ``{"Error": "<field>: <what>"}``.
No route answers with a traceback: an unexpected exception is logged and answered in ``Error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from iadeep.extender._service import ExtenderService
from iadeep.extender._settings import ExtenderSettings
from iadeep.extender._wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriorityList,
    _Go,
    describe_validation_error,
)
from iadeep.state import StoreUnavailable

__all__ = ["create_app", "build_service", "app_from_environment"]

log = logging.getLogger("iadeep.extender")

M = TypeVar("M", bound=BaseModel)


def _json(answer: _Go | HostPriorityList, status: int = 200) -> Response:
    return Response(answer.to_json(), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"Error": message}, status_code=status)


def build_service(settings: ExtenderSettings) -> ExtenderService:
    """The service with its real dependencies: etcd store, Kubernetes API, Gavel measurements."""
    from iadeep.extender._bind import KubernetesPodApi
    from iadeep.interference import InterferenceModel
    from iadeep.state import EtcdStateStore

    if settings.throughputs_file is None:  # the service never downloads: configuration names the file
        raise ValueError("no throughputs file: set IADEEP_EXTENDER_THROUGHPUTS_FILE (the service never downloads it)")
    model = InterferenceModel.from_file(settings.throughputs_file, settings.gpu_type)
    store = EtcdStateStore(settings.etcd)
    return ExtenderService(settings, store=store, pod_api=KubernetesPodApi(settings.kube), model=model)


def app_from_environment() -> FastAPI:
    """The app with settings from the environment: the factory each uvicorn worker calls
    (``iadeep extender serve --workers N``). A worker gets SIGTERM when the server that started
    it dies, even by SIGKILL, so that none is left serving on the port."""
    import os
    import signal

    from iadeep._parent import die_with_parent
    from iadeep._serving import configure_logging

    parent = os.environ.get("IADEEP_EXTENDER_PARENT_PID", "")
    if parent.isdigit():
        die_with_parent(signal.SIGTERM, int(parent))
    settings = ExtenderSettings()
    configure_logging(settings.log_level)  # a worker is a fresh interpreter: the server's format and filters
    return create_app(settings)


def create_app(settings: ExtenderSettings | None = None, *, service: ExtenderService | None = None) -> FastAPI:
    """The ASGI app.

    Args:
        settings: the settings (default: from the environment).
        service: an existing service (tests inject one with their own store and API); built with
            :func:`build_service` otherwise. Its background threads run while the app is served.
    """
    settings = settings or (service.settings if service is not None else ExtenderSettings())
    svc = service if service is not None else build_service(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(svc.start)
        try:
            yield
        finally:
            await run_in_threadpool(svc.stop)

    app = FastAPI(title="iadeep scheduler extender", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = svc
    prefix = settings.url_prefix
    metrics = svc.metrics

    async def decode(request: Request, model: type[M], verb: str) -> M | Response:
        body = await request.body()
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            metrics.requests.labels(verb, "invalid").inc()
            return _error(400, f"invalid {verb} request: {describe_validation_error(exc)}")

    async def run(verb: str, fn: Callable[[Any], _Go | HostPriorityList], args: Any,
                  on_error: Callable[[str], Response], *, inline: bool = False) -> Response:
        t0 = time.perf_counter()
        try:
            # filter and prioritize only compute over the in-memory copy (about 1 ms, holding the
            # GIL anyway): run them on the event loop, saving two thread hand-offs per call.
            # bind waits for etcd and the Kubernetes API: a worker thread.
            if inline:
                result = fn(args)
            else:
                def timed(a: Any) -> Any:
                    metrics.bind_phase.labels("thread").observe(time.perf_counter() - t0)
                    return fn(a)

                result = await run_in_threadpool(timed, args)
            error = getattr(result, "error", "")
            metrics.requests.labels(verb, "error" if error else "ok").inc()
            return _json(result)
        except StoreUnavailable as exc:
            metrics.requests.labels(verb, "error").inc()
            return on_error(f"iadeep: {exc}")
        except Exception as exc:  # noqa: BLE001 - answered in the wire format, logged with its traceback
            log.exception("%s failed", verb)
            metrics.requests.labels(verb, "error").inc()
            return on_error(f"iadeep: internal error in {verb}: {type(exc).__name__}: {exc}")
        finally:
            metrics.latency.labels(verb).observe(time.perf_counter() - t0)

    # The three verbs are plain Starlette routes (kube-scheduler calls them once per pod each):
    # FastAPI's request handler (dependency solving, response validation) would add about a fifth
    # to their cost and nothing they use.
    async def filter_(request: Request) -> Response:
        args = await decode(request, ExtenderArgs, "filter")
        if isinstance(args, Response):
            return args
        if svc.releases_in_flight:  # the pod event that retried this pod freed memory: wait off the loop
            await run_in_threadpool(svc.await_releases)
        if svc.binds_in_flight(args.pod.uid):  # the previous pod's bind (answered on this loop): wait off it
            await run_in_threadpool(svc.await_binds, args.pod.uid)
        return await run("filter", svc.filter, args, lambda m: _json(ExtenderFilterResult.failure(m)), inline=True)

    async def prioritize(request: Request) -> Response:
        args = await decode(request, ExtenderArgs, "prioritize")
        if isinstance(args, Response):
            return args
        return await run("prioritize", svc.prioritize, args, lambda m: _error(503, m), inline=True)

    async def bind(request: Request) -> Response:
        args = await decode(request, ExtenderBindingArgs, "bind")
        if isinstance(args, Response):
            return args
        return await run("bind", svc.bind, args, lambda m: _json(ExtenderBindingResult(Error=m)))

    for verb, endpoint in (("filter", filter_), ("prioritize", prioritize), ("bind", bind)):
        app.add_route(f"{prefix}/{verb}", endpoint, methods=["POST"], include_in_schema=False)

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz")
    async def readyz() -> Response:
        ok, message = await run_in_threadpool(svc.ready)
        return PlainTextResponse(message, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics_() -> Response:
        data = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    @app.get("/inspect")
    async def inspect(node: str | None = None) -> Response:
        try:
            doc = await run_in_threadpool(svc.inspect, node)
        except StoreUnavailable as exc:
            return _error(503, f"iadeep: {exc}")
        if node is not None and node not in doc["nodes"]:
            return _error(404, f"node {node!r} has no published GPU inventory")
        return JSONResponse(doc)

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - last resort
        log.exception("unhandled error", exc_info=exc)
        return _error(500, f"iadeep: internal error: {type(exc).__name__}")

    return app
