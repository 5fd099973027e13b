"""``exclusive``: one job per GPU, FIFO — the no-sharing baseline."""

from __future__ import annotations

import numpy as np

from iadeep.policy._base import Policy
from iadeep.policy._registry import register
from iadeep.policy._types import ClusterView, JobRequest


@register
class Exclusive(Policy):
    """Never co-locates: a GPU is either free or holds one job."""

    name = "exclusive"
    colocation_limit = 1

    def __init__(self, model, **_: object):
        super().__init__(model, colocation_limit=1)

    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """All free GPUs are equal (first fit by GPU id)."""
        return np.ones(view.n_gpus)
