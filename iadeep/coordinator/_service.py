"""The node coordinator: follows its node's tuning requests and runs one session per GPU.

A session whose best measured progress is below the extender's ``undo_below`` (read from its
:class:`~iadeep.state.PlacementPolicy` at each session) is undone: the session records an
:class:`~iadeep.state.UndoRecord`, which the extender carries out (:mod:`iadeep.coordinator._session`).
The record's ``session`` says which session runs: ``tune`` (:func:`~iadeep.coordinator.run_session`,
with the tuner; also without a record) or ``profile`` (:func:`~iadeep.coordinator.run_profile`, one
round at the current sizes, no tuner).

Loop (one thread): list the node's pending :class:`~iadeep.state.TuningRequest` records and
start a session thread for each GPU that has none running; then wait for a change under
``tuning/<node>/`` with a watch bounded by ``idle_s`` (every wait on etcd is bounded; after it
the requests are listed again, so nothing is missed between two watches). A session that fails
(etcd or the tuner unreachable) is retried with back-off by the next pass: its request stays in
etcd until a session acknowledges it, which is also how a coordinator killed mid-session resumes
after a restart (same session name, so the tuner's stored study goes on).

``/healthz`` answers while the process runs; ``/readyz`` is 503 while etcd does not answer;
``/metrics`` is Prometheus text (``iadeep_coordinator_*``).
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import FastAPI

from iadeep._host import HeldClock
from iadeep._serving import probe_app

from iadeep.coordinator._metrics import CoordinatorMetrics
from iadeep.coordinator._profile import run_profile
from iadeep.coordinator._session import SessionResult, TunerApi, run_session
from iadeep.coordinator._settings import CoordinatorSettings
from iadeep.interference import InterferenceModel
from iadeep.state import RecordError, StateStore, StoreUnavailable, TuningRequest

__all__ = ["CoordinatorService"]

log = logging.getLogger(__name__)


class CoordinatorService:
    """One node's coordinator.

    Args:
        settings: node, timing, round settings.
        store: the state store.
        tuner: the tuner (its HTTP client).
        model: the interference model.
    """

    def __init__(self, settings: CoordinatorSettings, *, store: StateStore, tuner: TunerApi,
                 model: InterferenceModel) -> None:
        self.settings = settings
        self.store = store
        self.tuner = tuner
        self.model = model
        self.held = HeldClock(settings.clock_file) if settings.clock_file is not None else None
        self.clock = self.held.now if self.held is not None else time.time
        self.metrics = CoordinatorMetrics()
        self.results: list[tuple[TuningRequest, SessionResult]] = []
        self._running: dict[tuple[str, int], threading.Thread] = {}
        self._failures: dict[tuple[str, int], tuple[int, float]] = {}  # (node, gpu) -> (failures, retry not before)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> CoordinatorService:
        """Follow the requests on a background thread."""
        self._thread = threading.Thread(target=self.run, name="iadeep-coordinator", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop following; running sessions finish their current wait first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for t in list(self._running.values()):
            t.join(timeout_s)

    def run(self) -> None:
        """Follow until :meth:`stop` (never raises: etcd failures, and any other error of a pass,
        are logged and retried with back-off)."""
        backoff = self.settings.retry_backoff_s
        node = self.settings.node
        log.info("coordinator of %s following tuning requests", f"node {node}" if node else "every node")
        while not self._stop.is_set():
            try:
                events = self.store.watch(f"tuning/{node}/" if node else "tuning/", timeout_s=self.settings.idle_s)
                self._dispatch([r for r in self.store.tuning_requests() if not node or r.node == node])
                for _ in events:
                    break  # something changed: list again
                events.close()  # type: ignore[attr-defined]
                backoff = self.settings.retry_backoff_s
            except StoreUnavailable as exc:
                log.warning("etcd unavailable, retrying in %.1f s: %s", backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception:  # noqa: BLE001 - nothing may end the follower while /healthz says it runs
                log.exception("following tuning requests failed; retrying in %.1f s", backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _dispatch(self, requests: list[TuningRequest]) -> None:
        now = time.monotonic()
        with self._lock:
            for req in requests:
                key = (req.node, req.gpu)
                t = self._running.get(key)
                if t is not None and t.is_alive():
                    continue
                _, not_before = self._failures.get(key, (0, 0.0))
                if now < not_before:
                    continue
                t = threading.Thread(target=self._session, args=(req,), name=f"iadeep-session-{req.node}-{req.gpu}",
                                     daemon=True)
                self._running[key] = t
                t.start()

    def _session(self, req: TuningRequest) -> None:
        self.metrics.active_sessions.inc()
        if self.held is not None:
            self.held.hold()
        try:
            undo_below, kind = self._placement()
            if kind == "profile":
                result = run_profile(req, store=self.store, model=self.model, rounds=self.settings.round,
                                     metrics=self.metrics, undo_below=undo_below, clock=self.clock)
            else:
                result = run_session(req, store=self.store, tuner=self.tuner, model=self.model,
                                     rounds=self.settings.round, metrics=self.metrics, undo_below=undo_below,
                                     clock=self.clock)
            self.metrics.sessions.labels(result.outcome).inc()
            if result.applied:
                self.metrics.best_progress.labels(str(req.gpu) if self.settings.node else f"{req.node}/{req.gpu}").set(result.progress)
            with self._lock:
                self.results.append((req, result))
                if result.outcome == "no_inventory":  # retried with back-off, not at every re-list
                    self._back_off(req)
                else:
                    self._failures.pop((req.node, req.gpu), None)
            log.info("GPU %d: session %s after %d rounds, applied %s", req.gpu, result.outcome, result.rounds,
                     result.applied)
        except Exception as exc:  # noqa: BLE001 - any failure: retry the request later, never die
            self.metrics.sessions.labels("error").inc()
            with self._lock:
                wait = self._back_off(req)
            log.warning("GPU %d: session failed, retrying in %.1f s: %s: %s", req.gpu, wait, type(exc).__name__, exc)
        finally:
            if self.held is not None:
                self.held.release()
            self.metrics.active_sessions.dec()

    def _placement(self) -> tuple[float | None, str]:
        """The extender's undo threshold and session kind (:class:`~iadeep.state.PlacementPolicy`):
        ``(None, "tune")`` (never undo; tune) when no extender published one or its record is
        malformed (logged): a session is never held back by it."""
        try:
            placement = self.store.placement()
        except RecordError as exc:
            log.warning("the extender's placement record is malformed; sessions tune and do not undo: %s", exc)
            return None, "tune"
        if placement is None:
            return None, "tune"
        return (placement.undo_below if placement.undo_below > 0 else None), placement.session

    def _back_off(self, req: TuningRequest) -> float:
        """Hold ``req``'s GPU back from dispatch for an exponentially growing wait (s, at most 30;
        call with the lock held); returns the wait."""
        n, _ = self._failures.get((req.node, req.gpu), (0, 0.0))
        wait = min(self.settings.retry_backoff_s * 2**n, 30.0)
        self._failures[(req.node, req.gpu)] = (n + 1, time.monotonic() + wait)
        return wait

    # -- HTTP -----------------------------------------------------------------------------------

    def app(self) -> FastAPI:
        """Health and metrics endpoints (:func:`iadeep._serving.probe_app`; ready while etcd answers)."""
        return probe_app("iadeep coordinator", self.metrics.registry,
                         lambda: None if self.store.healthy() else "etcd unreachable")
