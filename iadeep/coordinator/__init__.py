"""The node coordinator: runs a tuning session whenever a GPU's co-location set changes.

``iadeep coordinator serve`` (one per node, a DaemonSet) follows the node's tuning requests in
etcd, drives the tuner by ask and tell, writes the jobs' batch sizes, measures through the jobs'
own reports (:mod:`iadeep.workload`), applies the best configuration to every co-located job
and stores what it learned (see :mod:`iadeep.coordinator._session`); a session measured below the
extender's undo threshold is recorded as an :class:`iadeep.state.UndoRecord` for the extender
to carry out (:func:`iadeep.policy.undo_rule`, the simulator's rule). When the extender's policy
profiles instead of tuning (gandiva: :attr:`iadeep.state.PlacementPolicy.session` ``profile``), a
session is one measurement round at the jobs' current sizes without the tuner, judged by the same
rule (:func:`run_profile`).
"""

from iadeep.coordinator._metrics import CoordinatorMetrics
from iadeep.coordinator._profile import run_profile
from iadeep.coordinator._service import CoordinatorService
from iadeep.coordinator._session import SessionResult, TunerApi, run_session, session_name
from iadeep.coordinator._settings import CoordinatorSettings, RoundSettings

__all__ = ["CoordinatorMetrics", "CoordinatorService", "CoordinatorSettings", "RoundSettings", "SessionResult",
           "TunerApi", "run_profile", "run_session", "session_name"]
