"""Policy core: placement, scoring and tuning decisions over a read-only cluster view; no I/O.

``make_policy(name, model)`` instantiates a registered policy. Built in: ``iadeep``, ``exclusive``,
``antman``, ``gandiva``. A new policy is one module defining a :class:`Policy` subclass decorated
with :func:`register`, imported below.
"""

from iadeep.policy._base import MAX_COLOCATION_LIMIT, REASONS, Policy, choose_gpus, pod_size
from iadeep.policy._registry import POLICIES, make_policy, policy_names, register
from iadeep.policy._undo import Undo, undo_rule
from iadeep.policy._types import (ClusterView, FilterResult, JobRequest, Measure, OccupancyChanges, Placement, Preemption,
                                  TuningDecision, Wait)
from iadeep.policy import iadeep, exclusive, antman, gandiva  # noqa: F401,I001  (registration, in display order)

__all__ = [
    "MAX_COLOCATION_LIMIT",
    "POLICIES",
    "REASONS",
    "ClusterView",
    "FilterResult",
    "JobRequest",
    "Measure",
    "OccupancyChanges",
    "Placement",
    "Policy",
    "Preemption",
    "TuningDecision",
    "Undo",
    "Wait",
    "choose_gpus",
    "pod_size",
    "make_policy",
    "policy_names",
    "register",
    "undo_rule",
]
