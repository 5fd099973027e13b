"""Gavel's throughput table with the interference taken out: a ceiling for any co-location policy.

Every co-located pair that Gavel measured (both throughputs above 0, so the pair fits on one GPU)
gets each job's isolated throughput (its ``"null"`` entry): two jobs on one GPU each run as if
alone. Pairs that do not fit stay as they are, so memory, the two-jobs-per-GPU limit, gangs and the
queue are unchanged. No measured pair does better than that, so a policy's avg JCT on this table
bounds from below what better pairing could give it on the measured one.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["without_interference"]


def without_interference(table: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of a Gavel table in which every measured pair runs both jobs at their isolated speed.

    Args:
        table: Gavel's ``simulation_throughputs.json`` document (GPU type -> job -> other job or
            ``"null"`` -> steps/s; a pair entry is ``[this job's, the other's]``).

    Returns:
        ``(new table, number of pair entries changed)``.
    """
    out = json.loads(json.dumps(table))
    changed = 0
    for per_type in out.values():
        if not isinstance(per_type, dict):
            continue
        alone = {job: row.get("null") for job, row in per_type.items() if isinstance(row, dict)}
        for job, row in per_type.items():
            if not isinstance(row, dict):
                continue
            for other, value in row.items():
                if other != "null" and _fits(value) and _rate(alone.get(job)) and _rate(alone.get(other)):
                    row[other] = [float(alone[job]), float(alone[other])]
                    changed += 1
    return out, changed


def _rate(value: Any) -> float:
    """A throughput in steps/s, or 0 when the entry is not a positive number."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 0.0
    return rate if rate > 0 else 0.0


def _fits(value: Any) -> bool:
    """A pair entry that Gavel measured: two positive throughputs (``[0, 0]``: the pair does not fit)."""
    return isinstance(value, list) and len(value) == 2 and all(_rate(v) for v in value)
