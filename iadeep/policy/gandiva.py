"""``gandiva``: pack onto the least-loaded GPU, undo packings that hurt.

Gandiva (Xiao et al., OSDI'18, Sec. 4 "packing"): when GPUs are scarce, pack jobs on the least-loaded
GPU, profile the packed jobs, and undo the packing when the combined normalised throughput is below
1 (worse than time-slicing). Here: a free GPU is always preferred; otherwise the GPU with the fewest
jobs and least memory used; after a packing one trial measures the jobs and, if the measured sum is
below 1, the newest job is evicted back to the queue and the pair is remembered as bad.

Both drivers apply the decision when the profile ends (one ``trial_s`` in the simulator; in the
live system the node coordinator's profile session, :attr:`~iadeep.policy.Policy.node_session`
``profile``, measures one round at the jobs' current sizes and records the undo, then the extender
bans the pair and evicts the pod): the ban and the eviction together, as for iadeep's undo.
"""

from __future__ import annotations

import numpy as np

from iadeep.policy._base import Policy
from iadeep.policy._registry import register
from iadeep.policy._types import ClusterView, JobRequest, Measure, TuningDecision
from iadeep.policy._undo import undo_rule


@register
class Gandiva(Policy):
    """Least-loaded packing with measured undo."""

    name = "gandiva"
    colocation_limit = 2
    node_session = "profile"
    #: The packing is undone when the profiled normalised throughputs sum below this (1: worse
    #: than taking turns; Xiao et al., Sec. 4); the extender publishes it to the node coordinators.
    undo_below: float = 1.0

    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """Fewer jobs first, then less memory used."""
        load = view.gpu_njobs() + view.gpu_mem_used_gib / view.gpu_mem_total_gib
        return 1.0 - load / (self.limit + 1)

    def tune(self, gpu: int, view: ClusterView, measure: Measure) -> TuningDecision | None:
        """Profile a packed GPU once; evict the newest job when the normalised throughputs sum below 1."""
        handles = [int(h) for h in view.occupants(gpu)]  # placement order: the last is the newest
        if len(handles) < 2:
            return super().tune(gpu, view, measure)
        config = {h: int(view.job_type[h]) for h in handles}
        observed = measure(config)
        total = sum(observed.values())
        undo = undo_rule(total, handles, [config[h] for h in handles], self.undo_below)  # the rule iadeep's undo shares
        if undo is None:
            return TuningDecision(gpu, trials=1, reason=f"packing kept: measured sum {total:.2f}")
        # the driver bans the types and evicts when the profile ends (module docstring)
        return TuningDecision(gpu, trials=1, evict=(undo.evict,), avoid=undo.avoid,
                              reason=f"packing undone: measured sum {total:.2f} < {self.undo_below:g}")
