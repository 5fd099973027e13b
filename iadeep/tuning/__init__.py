"""The batch-size search of a tuning session, shared by the policy core and the tuner service.

* :class:`SearchSpace`, :class:`TunedJob` - what one session tunes and its objective;
* :func:`predicted_warm_start`, :func:`warm_queue`, :class:`StopRule` - the search strategy,
  pure (no optuna), the same for the simulator and the live tuner;
* :class:`TuningStudy` - one session as an optuna study driven by ask and tell (in-memory storage
  in the simulator, through :class:`iadeep.policy.BatchSizeTuner`; the tuner service's database
  live: :mod:`iadeep.tuner`).

This package is in the policy core's layer: it imports optuna and numpy, never a web framework,
a database driver or the state store.
"""

from iadeep.tuning._space import MAX_CONFIGURATIONS, SearchSpace, SpaceError, TunedJob
from iadeep.tuning._strategy import DEFAULT_TRIALS, Outcome, Proposal, StopRule, Trial, predicted_warm_start, warm_queue
from iadeep.tuning._study import StudyMismatch, TuningStudy

__all__ = ["DEFAULT_TRIALS", "MAX_CONFIGURATIONS", "SearchSpace", "SpaceError", "TunedJob", "Outcome", "Proposal", "StopRule", "StudyMismatch",
           "Trial", "TuningStudy", "predicted_warm_start", "warm_queue"]
