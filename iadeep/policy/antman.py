"""``antman``: first-fit packing by GPU memory, as the IADeep artifact's AntMan baseline.

AntMan (Xiao et al., OSDI'20) shares GPUs by memory; the IADeep artifact models it as first fit: the
lowest-numbered GPU with enough free memory, interference ignored. Pairs measured not to fit are
still refused (the job would crash with out-of-memory).
"""

from __future__ import annotations

import numpy as np

from iadeep.policy._base import Policy
from iadeep.policy._registry import register
from iadeep.policy._types import ClusterView, JobRequest


@register
class AntMan(Policy):
    """First fit by memory, up to ``colocation_limit`` jobs per GPU (default 2: pairs are measured)."""

    name = "antman"
    colocation_limit = 2

    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """Lower GPU id is better: first fit."""
        return 1.0 - np.arange(view.n_gpus) / max(view.n_gpus, 1)
