"""The batch-size tuner: one optuna study per tuning session, driven by ask and tell.

* :class:`TuningStudy` - the session (library; the simulator drives it with in-memory storage,
  through the policy core's :class:`~iadeep.policy._tuning.BatchSizeTuner`);
* :func:`predicted_warm_start`, :func:`warm_queue`, :class:`StopRule` - its search strategy, pure
  (:mod:`iadeep.tuner._strategy`), the same for the simulator and the live tuner;
* :class:`SearchSpace`, :class:`TunedJob` - what is tuned and the objective;
* ``iadeep tuner serve`` - the HTTP service (:func:`create_app`, :class:`TunerService`) and
  :class:`TunerClient`, its client for the node coordinator.
"""

from iadeep.tuner._space import SearchSpace, SpaceError, TunedJob
from iadeep.tuner._strategy import DEFAULT_TRIALS, Outcome, Proposal, StopRule, Trial, predicted_warm_start, warm_queue
from iadeep.tuner._study import StudyMismatch, TuningStudy

__all__ = ["DEFAULT_TRIALS", "SearchSpace", "SpaceError", "TunedJob", "Outcome", "Proposal", "StopRule", "StudyMismatch",
           "Trial", "TuningStudy", "predicted_warm_start", "warm_queue", "TunerService", "TunerClient", "TunerError", "TunerUnavailable", "TunerSettings",
           "create_app"]


def __getattr__(name: str) -> object:
    """The service side (FastAPI, httpx, SQLAlchemy) loads on first use, so that the simulator's
    use of :class:`TuningStudy` does not import a web framework."""
    if name in ("TunerService",):
        from iadeep.tuner._service import TunerService

        return TunerService
    if name in ("TunerClient", "TunerError", "TunerUnavailable"):
        from iadeep.tuner import _client

        return getattr(_client, name)
    if name == "TunerSettings":
        from iadeep.tuner._settings import TunerSettings

        return TunerSettings
    if name == "create_app":
        from iadeep.tuner._app import create_app

        return create_app
    raise AttributeError(f"module 'iadeep.tuner' has no attribute {name!r}")
