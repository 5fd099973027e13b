"""The batch-size tuner service: one optuna study per tuning session, driven by ask and tell.

* ``iadeep tuner serve`` - the HTTP service (:func:`create_app`, :class:`TunerService`) and
  :class:`TunerClient`, its client for the node coordinator;
* the session and its search (:class:`TuningStudy`, :class:`SearchSpace`, :class:`TunedJob`,
  :class:`StopRule`, :func:`predicted_warm_start`, :func:`warm_queue`) are :mod:`iadeep.tuning`'s,
  the policy core's layer, and exported here too.
"""

from iadeep.tuning import (
    DEFAULT_TRIALS,
    Outcome,
    Proposal,
    SearchSpace,
    SpaceError,
    StopRule,
    StudyMismatch,
    Trial,
    TunedJob,
    TuningStudy,
    predicted_warm_start,
    warm_queue,
)

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
