"""Prometheus metrics of the coordinator (``iadeep_coordinator_*``), in a registry of its own so
that several coordinators in one test process do not collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CoordinatorMetrics"]


class CoordinatorMetrics:
    """The coordinator's counters.

    Attributes:
        sessions: sessions ended, by ``outcome`` (``converged``, ``job_left``, ``superseded``,
            ``deadline``, ``single_job``, ``untunable``, ``no_inventory``, ``error``).
        rounds: rounds (trials measured).
        round_seconds / session_seconds: durations.
        measurement_timeouts: rounds ended by their deadline.
        measurement_events: watch events the rounds received (only the session's jobs' reports:
            a round watches ``measurements/<pod>/`` of its jobs, not the whole folder).
        active_sessions: sessions running now.
        best_progress: summed progress rate of the last applied configuration, by ``gpu``.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Counter("iadeep_coordinator_sessions", "Tuning sessions ended, by outcome", ["outcome"], registry=r)
        self.rounds = Counter("iadeep_coordinator_rounds", "Rounds (configurations measured)", registry=r)
        self.round_seconds = Histogram("iadeep_coordinator_round_seconds", "Duration of a round (s)", registry=r,
                                       buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120))
        self.session_seconds = Histogram("iadeep_coordinator_session_seconds", "Duration of a session (s)", registry=r,
                                         buckets=(1, 5, 10, 20, 30, 60, 120, 300, 600))
        self.measurement_timeouts = Counter("iadeep_coordinator_measurement_timeouts",
                                            "Rounds ended by their deadline", registry=r)
        self.measurement_events = Counter("iadeep_coordinator_measurement_events",
                                          "Measurement watch events received by rounds", registry=r)
        self.active_sessions = Gauge("iadeep_coordinator_active_sessions", "Sessions running now", registry=r)
        self.best_progress = Gauge("iadeep_coordinator_applied_progress",
                                   "Summed progress rate of the configuration applied last", ["gpu"], registry=r)
