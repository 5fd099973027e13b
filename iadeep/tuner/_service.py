"""The tuner service's state: open sessions by name, over one optuna storage.

Thread-safe: routes run on a thread pool; each session has a lock (ask and tell of one session
are serialised), the table of sessions has its own. A session not in memory (after a restart) is
reopened from the storage on first use. The sessions' life cycle is counted in
:class:`~iadeep.tuner._metrics.TunerMetrics` (``metrics``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import optuna

from iadeep.interference import InterferenceModel
from iadeep.tuner._metrics import TunerMetrics
from iadeep.tuning import Outcome, Proposal, StopRule, TunedJob, TuningStudy

__all__ = ["TunerService"]


class TunerService:
    """Sessions of one tuner.

    Args:
        model: the interference model.
        storage: optuna storage URL (``sqlite:///...``) or object.
        stop: the default stop rule of new sessions.
        seed: sampler seed.
    """

    def __init__(self, model: InterferenceModel, storage: str | optuna.storages.BaseStorage, *,
                 stop: StopRule = StopRule(), seed: int = 0) -> None:
        self.model = model
        self.storage = optuna.storages.RDBStorage(storage) if isinstance(storage, str) else storage
        self.stop = stop
        self.seed = seed
        self._sessions: dict[str, TuningStudy] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.metrics = TunerMetrics()
        self._active: set[str] = set()  # open in memory, stop rule not met (the active_sessions gauge)

    def _track(self, name: str, outcome: Outcome | None) -> None:
        """Session ``name`` is open with ``outcome`` (``None``: forgotten); the gauge follows."""
        with self._lock:
            if outcome is None or outcome.done:
                self._active.discard(name)
            else:
                self._active.add(name)
            self.metrics.active_sessions.set(len(self._active))

    def healthy(self) -> bool:
        """True when the storage answers."""
        try:
            self.storage.get_all_studies()
            return True
        except Exception:  # noqa: BLE001 - any storage failure means not ready
            return False

    def _session_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def open(self, name: str, jobs: Sequence[TunedJob], warm_start: Sequence[Mapping[str, int]] = (),
             stop: StopRule | None = None, *, gpu_mem_gib: float | None = None) -> TuningStudy:
        """Create a session, or reopen the stored one of that name (same jobs and GPU memory
        ``gpu_mem_gib``, GiB left to its jobs: :class:`~iadeep.tuner.SearchSpace`).

        Raises:
            SpaceError: unknown model or batch size. StudyMismatch: same name, other jobs.
        """
        with self._session_lock(name):
            study = TuningStudy(self.model, jobs, name=name, storage=self.storage, warm_start=warm_start,
                                stop=stop or self.stop, seed=self.seed, gpu_mem_gib=gpu_mem_gib)
            self._sessions[name] = study
            self.metrics.sessions_opened.labels("request").inc()
            self._track(name, study.outcome())
            return study

    def get(self, name: str) -> TuningStudy:
        """An open session, reopened from storage when needed.

        Raises:
            KeyError: no such session.
        """
        study = self._sessions.get(name)
        if study is None:
            with self._session_lock(name):
                study = self._sessions.get(name)
                if study is None:
                    study = TuningStudy.resume(self.model, name, self.storage, self.seed)
                    self._sessions[name] = study
                    self.metrics.sessions_opened.labels("storage").inc()
                    self._track(name, study.outcome())
        return study

    def ask(self, name: str) -> tuple[Proposal | None, Outcome]:
        """The session's next configuration (``None`` when done) and where it stands.

        Raises:
            KeyError: no such session.
        """
        study = self.get(name)
        with self._session_lock(name):
            return study.ask(), study.outcome()

    def tell(self, name: str, trial: int, normalised: Mapping[str, float]) -> Outcome:
        """Record a measurement (:meth:`TuningStudy.tell`); the one that meets the stop rule counts
        the session as finished.

        Raises:
            KeyError: no such session, ``trial`` not in flight, a job's value missing.
            ValueError: a value negative or not finite.
        """
        study = self.get(name)
        with self._session_lock(name):
            outcome = study.tell(trial, normalised)
        self.metrics.trials_told.inc()
        if outcome.done:
            self.metrics.sessions_finished.inc()
            self.metrics.session_trials.observe(outcome.trials)
        self._track(name, outcome)
        return outcome

    def close(self, name: str) -> bool:
        """Forget a finished session (its study is deleted from the storage); False when unknown."""
        with self._session_lock(name):
            self._sessions.pop(name, None)
            self._track(name, None)
            try:
                optuna.delete_study(study_name=name, storage=self.storage)
                return True
            except KeyError:
                return False
