"""Whether a Kubernetes Job has finished, and how, from the conditions the Job API defines.

A ``batch/v1`` Job's ``status.conditions`` has at most one condition of each type; a condition
counts when its ``status`` is ``"True"``. The terminal ones, and the outcome each means here:

- ``SuccessCriteriaMet`` -> Complete: the Job's ``successPolicy`` is met, or all completions
  succeeded; the Job's remaining pods may still be terminating;
- ``Complete`` -> Complete: as above, once no pod of the Job is left terminating;
- ``FailureTarget`` -> Failed: a ``podFailurePolicy`` rule with action ``FailJob`` matched, the
  ``backoffLimit`` or ``backoffLimitPerIndex`` was reached, or ``activeDeadlineSeconds`` passed;
  pods may still be terminating;
- ``Failed`` -> Failed: as above, once no pod of the Job is left terminating.

Since Kubernetes 1.31 the controller adds ``SuccessCriteriaMet`` or ``FailureTarget`` first and
``Complete`` or ``Failed`` only after the last pod has terminated (seconds later, or never while
a pod's finalizer holds it). The outcome is decided by the first of the two, so a waiter does not
wait on pod termination. ``Suspended`` is not terminal. The API server refuses a Job that carries
both a success and a failure condition; were one read, the failure conditions are looked at
first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["FAILURE_CONDITIONS", "SUCCESS_CONDITIONS", "JobOutcome", "job_outcome"]

JobOutcome = Literal["Complete", "Failed"]

SUCCESS_CONDITIONS = ("Complete", "SuccessCriteriaMet")
"""Job condition types that mean the Job succeeded."""
FAILURE_CONDITIONS = ("Failed", "FailureTarget")
"""Job condition types that mean the Job failed."""


def job_outcome(status: Mapping[str, Any] | None) -> JobOutcome | None:
    """The outcome of a Job from its status, as the API server sends it (JSON, camelCase keys).

    Args:
        status: The Job's ``status`` object, e.g. ``{"conditions": [{"type": "SuccessCriteriaMet",
            "status": "True", ...}], ...}``; ``None`` or ``{}`` for a Job the controller has not
            seen yet. Malformed entries (not objects) are ignored.

    Returns:
        ``"Complete"`` when a success condition of the module table is true, ``"Failed"`` when a
        failure condition is, ``None`` while the Job is not finished.
    """
    true = {c.get("type") for c in (status or {}).get("conditions") or []
            if isinstance(c, Mapping) and c.get("status") == "True"}
    if true.intersection(FAILURE_CONDITIONS):
        return "Failed"
    if true.intersection(SUCCESS_CONDITIONS):
        return "Complete"
    return None
