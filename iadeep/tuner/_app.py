"""The tuner's HTTP API (FastAPI, served by uvicorn as the extender).

==========================================  =================================================
route                                       answer
==========================================  =================================================
``POST /sessions``                          create (or reopen, same jobs) a session:
                                            ``{"name", "space": {job: [sizes]}, "outcome"}``
``POST /sessions/{name}/ask``               ``{"trial", "config": {job: size}, "outcome"}``;
                                            ``trial`` and ``config`` are null when done
``POST /sessions/{name}/tell``              ``{"outcome"}`` after ``{"trial",
                                            "normalised_throughputs": {job: x}}``
``GET /sessions/{name}``                    ``{"outcome"}``
``DELETE /sessions/{name}``                 ``{"deleted": bool}``
``GET /healthz``, ``/readyz``               readyz is 503 when the storage does not answer
``GET /metrics``                            Prometheus text (:mod:`iadeep.tuner._metrics`)
==========================================  =================================================

``outcome`` is ``{"done", "best": {job: size}, "best_objective", "trials", "reason"}``: always a
well-formed answer, never a bare value (``best_objective`` is null before any measurement).
Errors: a malformed body gets 400 ``{"error": "<field>: <what>"}`` (e.g.
``jobs.0.model: Field required``; a field the API does not have, a session name with ``/``, a
warm-start batch size never measured for the job's model, a tell naming a job the session does
not have: each a 400 naming it); an unknown model or batch size 400 naming the job; a session
not known, 404; a session name reused with other jobs, or a tell for a trial not in flight, 409.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from iadeep.policy import MAX_COLOCATION_LIMIT
from iadeep.tuner._metrics import ROUTES, outcome_of
from iadeep.tuner._service import TunerService
from iadeep.tuner._settings import StopSettings
from iadeep.tuning import Outcome, SpaceError, StopRule, StudyMismatch, TunedJob

__all__ = ["create_app", "SessionRequest", "TellRequest", "JobSpec"]

log = logging.getLogger(__name__)

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


_STRICT = ConfigDict(strict=True, extra="forbid")
"""Request bodies take JSON's own types: a string ``"32"`` or ``true`` where a number belongs is a
400 naming the field, not a silent conversion (pydantic's strict mode; an integer is still a number).
A field the API does not have (a misspelt ``gpu_mem_gb``) is a 400 naming it, never ignored."""

#: A session name: it is a path segment of the session's routes (no ``/``); the coordinator's are
#: ``<node>.<gpu>.<microseconds>``.
SESSION_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"


class StopSpec(StopSettings):
    """A session's stop rule in a request body (the fields of :class:`StopSettings`, strictly)."""

    model_config = _STRICT


class JobSpec(BaseModel):
    """A co-located job (see :class:`iadeep.tuner.TunedJob`)."""

    model_config = _STRICT

    key: str = Field(min_length=1)
    model: str = Field(min_length=1)
    base_batch_size: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    mem_limit_gib: float | None = Field(None, gt=0, allow_inf_nan=False)
    tunable: bool = True
    mem_request_gib: float | None = Field(None, gt=0, allow_inf_nan=False)


class SessionRequest(BaseModel):
    """Body of ``POST /sessions``."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=200, pattern=SESSION_NAME)
    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_COLOCATION_LIMIT)
    """The GPU's co-located jobs: at most as many as the extender places on one GPU."""
    warm_start: list[dict[str, int]] = Field(default_factory=list)
    stop: StopSpec | None = None
    gpu_mem_gib: float | None = Field(None, gt=0, allow_inf_nan=False)
    """GPU memory left to the session's jobs (GiB): the GPU's less what other pods reserve."""


class TellRequest(BaseModel):
    """Body of ``POST /sessions/{name}/tell``."""

    model_config = _STRICT

    trial: int = Field(ge=0)
    normalised_throughputs: dict[str, NonNegative]


def outcome_json(o: Outcome) -> dict[str, Any]:
    """The wire form of an :class:`Outcome` (NaN becomes null)."""
    return {"done": o.done, "best": o.best, "trials": o.trials, "reason": o.reason,
            "best_objective": None if math.isnan(o.best_objective) else round(o.best_objective, 6)}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(service: TunerService) -> FastAPI:
    """The ASGI app over ``service``."""
    app = FastAPI(title="iadeep tuner", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = service.metrics

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "name", None)  # set by the router once matched
        if route in ROUTES:
            metrics.requests.labels(route, outcome_of(response.status_code)).inc()
            metrics.request_seconds.labels(route).observe(time.perf_counter() - t0)
        return response

    @app.get("/metrics")
    def metrics_() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":  # its loc is a character position, not a field
                parts.append(f"body: not valid JSON ({err.get('ctx', {}).get('error', 'invalid')} at character "
                             f"{err.get('loc', ('', '?'))[-1]})")
                continue
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        return _error(400, "; ".join(parts))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - last resort
        log.exception("unhandled error", exc_info=exc)
        return _error(500, f"iadeep tuner: internal error: {type(exc).__name__}")

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        ok = service.healthy()
        return JSONResponse({"status": "ok" if ok else "storage unreachable"}, status_code=200 if ok else 503)

    @app.post("/sessions", name="create")
    def create(req: SessionRequest) -> JSONResponse:
        jobs = [TunedJob(**j.model_dump()) for j in req.jobs]
        keys = {j.key for j in jobs}
        for i, config in enumerate(req.warm_start):
            if set(config) != keys:
                return _error(400, f"warm_start.{i}: must name exactly the jobs {sorted(keys)}")
            for j in jobs:
                sizes = service.model.batch_sizes(j.model)  # () for an unknown model: the space says so below
                if sizes and config[j.key] not in sizes:
                    return _error(400, f"warm_start.{i}.{j.key}: {config[j.key]} is not a measured batch size of "
                                       f"{j.model} {list(sizes)}")
        stop = StopRule(**req.stop.model_dump()) if req.stop else None
        try:
            study = service.open(req.name, jobs, req.warm_start, stop, gpu_mem_gib=req.gpu_mem_gib)
        except SpaceError as exc:
            return _error(400, f"jobs: {exc}")
        except StudyMismatch as exc:
            return _error(409, str(exc))
        return JSONResponse({"name": req.name, "space": {k: list(v) for k, v in study.space.options.items()},
                             "outcome": outcome_json(study.outcome())})

    @app.post("/sessions/{name}/ask", name="ask")
    def ask(name: str) -> JSONResponse:
        try:
            proposal, outcome = service.ask(name)
        except KeyError as exc:
            return _error(404, str(exc.args[0]))
        return JSONResponse({"trial": proposal.trial if proposal else None,
                             "config": proposal.config if proposal else None, "outcome": outcome_json(outcome)})

    @app.post("/sessions/{name}/tell", name="tell")
    def tell(name: str, req: TellRequest) -> JSONResponse:
        try:
            study = service.get(name)
        except KeyError as exc:
            return _error(404, str(exc.args[0]))
        unknown = sorted(set(req.normalised_throughputs) - {j.key for j in study.space.jobs})
        if unknown:
            return _error(400, f"normalised_throughputs: job(s) {unknown} not in session {name!r} "
                               f"(its jobs: {sorted(j.key for j in study.space.jobs)})")
        try:
            outcome = service.tell(name, req.trial, req.normalised_throughputs)
        except KeyError as exc:
            msg = str(exc.args[0])
            return _error(400 if msg.startswith("normalised_throughputs") else 409, msg)
        return JSONResponse({"outcome": outcome_json(outcome)})

    @app.get("/sessions/{name}", name="status")
    def status(name: str) -> JSONResponse:
        try:
            return JSONResponse({"outcome": outcome_json(service.get(name).outcome())})
        except KeyError as exc:
            return _error(404, str(exc.args[0]))

    @app.delete("/sessions/{name}", name="delete")
    def delete(name: str) -> JSONResponse:
        return JSONResponse({"deleted": service.close(name)})

    return app
