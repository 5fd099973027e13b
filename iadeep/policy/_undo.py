"""The undo rule of a tuning session: one function that both drivers call.

After a GPU's tuning session, if even the best configuration it *measured* progresses less than
the jobs would by taking turns on the GPU (summed progress rate below ``undo_below``, 1 by
default: :func:`iadeep.goodput.progress`, normalised throughput x statistical efficiency), the
co-location is undone: the newest occupant leaves the GPU (its pod is evicted; its Job's
replacement queues again with the work it did) and the pair of job types, as submitted, is never
formed again (:meth:`iadeep.policy.Policy.avoid`). Gandiva's undo (Xiao et al., OSDI'18, Sec. 4,
"packing") judged on normalised throughput after one trial; IADeep judges on goodput after tuning.

Who calls it:

* the simulator, through :meth:`iadeep.policy.IADeep.tune` (occupants are job handles, types are
  job-type ids): the decision carries the eviction and the ban
  (:attr:`~iadeep.policy.TuningDecision.evict`, :attr:`~iadeep.policy.TuningDecision.avoid`), and
  the simulator applies both when the session ends, as the live system does;
* the live node coordinator (:mod:`iadeep.coordinator`) at the end of a converged session
  (occupants are pod UIDs in reservation order, types are ``(model, submitted batch size)``): it
  writes an :class:`iadeep.state.UndoRecord`; the extender applies the ban to its policy and evicts
  the pod.

No I/O; the threshold is the policy's ``undo_below`` (the extender publishes it to the node side
in :class:`iadeep.state.PlacementPolicy`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Undo", "undo_rule"]

K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True)
class Undo(Generic[K, T]):
    """An undone co-location.

    Attributes:
        evict: the newest occupant (the last in placement order), to take off the GPU.
        avoid: every occupant's job type as submitted (placement order): these types are not to
            be co-located with each other again.
        progress: the session's best measured summed progress rate (dimensionless; 1 = taking turns).
        below: the threshold it was judged against.
        reason: one line for logs and records.
    """

    evict: K
    avoid: tuple[T, ...]
    progress: float
    below: float
    reason: str


def undo_rule(progress: float, occupants: Sequence[K], types: Sequence[T], undo_below: float | None) -> Undo[K, T] | None:
    """Whether a finished tuning session undoes its GPU's co-location (module docstring).

    Args:
        progress: the best measured summed progress rate of the session (NaN: nothing measured).
        occupants: the GPU's jobs in placement order (oldest first: the
            :class:`~iadeep.policy.ClusterView` slot contract; the live GPU state's reservation order).
        types: each occupant's job type as submitted, in the same order.
        undo_below: the threshold (``None``: never undo).

    Returns:
        The :class:`Undo` when ``progress < undo_below`` with at least two occupants, else ``None``
        (also for a NaN progress: an unmeasured session never undoes).

    Raises:
        ValueError: ``occupants`` and ``types`` differ in length.
    """
    if len(occupants) != len(types):
        raise ValueError(f"{len(occupants)} occupants but {len(types)} types")
    if undo_below is None or len(occupants) < 2 or math.isnan(progress) or not progress < undo_below:
        return None
    return Undo(occupants[-1], tuple(types), float(progress), float(undo_below),
                f"co-location undone: best measured progress {progress:.2f} < {undo_below:g}")
