"""Prometheus metrics of the tuner service (``/metrics``, ``iadeep_tuner_*``), in a registry of
its own per service so that several tuners in one test process do not collide.

=============================================  =========  =============================================
name                                           type       labels
=============================================  =========  =============================================
``iadeep_tuner_requests_total``                counter    ``route`` (create, ask, tell, status, delete),
                                                          ``outcome`` (ok, invalid: 400, not_found: 404,
                                                          conflict: 409, error: 5xx)
``iadeep_tuner_request_seconds``               histogram  ``route``: time to answer a session route (s)
``iadeep_tuner_sessions_opened_total``         counter    ``source`` (request: ``POST /sessions``,
                                                          storage: reopened from the storage on first
                                                          use, after a restart)
``iadeep_tuner_sessions_finished_total``       counter    (none): tells that met the stop rule
``iadeep_tuner_session_trials``                histogram  (none): trials of a session when it finished
``iadeep_tuner_trials_told_total``             counter    (none): measurements told (``tell`` accepted)
``iadeep_tuner_active_sessions``               gauge      (none): sessions open in this process and not
                                                          finished
=============================================  =========  =============================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["TunerMetrics", "ROUTES"]

#: the session routes a request is counted under (the app's route names)
ROUTES = ("create", "ask", "tell", "status", "delete")
_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TRIAL_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)


def outcome_of(status: int) -> str:
    """The ``outcome`` label of an HTTP status code."""
    if status < 400:
        return "ok"
    return {400: "invalid", 404: "not_found", 409: "conflict"}.get(status, "error")


class TunerMetrics:
    """The tuner's metrics (module docstring).

    Attributes:
        registry: what ``/metrics`` serves.
        requests / request_seconds: per session route.
        sessions_opened / sessions_finished / session_trials / trials_told / active_sessions:
            the sessions' life cycle (:class:`~iadeep.tuner.TunerService` updates them).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("iadeep_tuner_requests", "Tuner session requests, by route and outcome",
                                ["route", "outcome"], registry=r)
        self.request_seconds = Histogram("iadeep_tuner_request_seconds", "Tuner session request latency (s)", ["route"],
                                         buckets=_BUCKETS, registry=r)
        self.sessions_opened = Counter("iadeep_tuner_sessions_opened", "Tuning sessions opened, by source", ["source"],
                                       registry=r)
        self.sessions_finished = Counter("iadeep_tuner_sessions_finished", "Tuning sessions whose stop rule was met",
                                         registry=r)
        self.session_trials = Histogram("iadeep_tuner_session_trials", "Trials of a tuning session when it finished",
                                        buckets=_TRIAL_BUCKETS, registry=r)
        self.trials_told = Counter("iadeep_tuner_trials_told", "Measurements told (trials completed)", registry=r)
        self.active_sessions = Gauge("iadeep_tuner_active_sessions", "Tuning sessions open in this process, not finished",
                                     registry=r)
