"""``gandiva``: pack onto the least-loaded GPU, undo packings that hurt.

Gandiva (Xiao et al., OSDI'18, Sec. 4 "packing"): when GPUs are scarce, pack jobs on the least-loaded
GPU, profile the packed jobs, and undo the packing when the combined normalised throughput is below
1 (worse than time-slicing). Here: a free GPU is always preferred; otherwise the GPU with the fewest
jobs and least memory used; after a packing one trial measures the jobs and, if the measured sum is
below 1, the newest job is evicted back to the queue and the pair is remembered as bad.
"""

from __future__ import annotations

import numpy as np

from iadeep.policy._base import Policy
from iadeep.policy._registry import register
from iadeep.policy._types import ClusterView, JobRequest, Measure, TuningDecision


@register
class Gandiva(Policy):
    """Least-loaded packing with measured undo."""

    name = "gandiva"
    colocation_limit = 2

    def __init__(self, model, **options):
        super().__init__(model, **options)
        self._bad = np.zeros_like(model.fits, dtype=bool)

    def eligible(self, job: JobRequest, view: ClusterView):
        """As the base, minus GPUs holding a job type that was measured to pack badly with this one."""
        mask, reason = super().eligible(job, view)
        occupied = view.slots >= 0
        occ_types = np.where(occupied, view.job_type[np.maximum(view.slots, 0)], 0)
        bad = np.any(occupied & self._bad[job.type_id, occ_types], axis=1)
        reason[mask & bad] = 4
        return mask & ~bad, reason

    def utility(self, job: JobRequest, view: ClusterView, mask: np.ndarray) -> np.ndarray:
        """Fewer jobs first, then less memory used."""
        load = view.gpu_njobs() + view.gpu_mem_used_gib / view.gpu_mem_total_gib
        return 1.0 - load / (self.limit + 1)

    def tune(self, gpu: int, view: ClusterView, measure: Measure) -> TuningDecision | None:
        """Profile a packed GPU once; evict the newest job when the normalised throughputs sum below 1."""
        handles = [int(h) for h in view.slots[gpu] if h >= 0]
        if len(handles) < 2:
            return super().tune(gpu, view, measure)
        config = {h: int(view.job_type[h]) for h in handles}
        observed = measure(config)
        total = sum(observed.values())
        if total >= 1.0:
            return TuningDecision(gpu, trials=1, reason=f"packing kept: measured sum {total:.2f}")
        newest = handles[-1]
        types = [config[h] for h in handles]
        for a in types:
            for b in types:
                if a != b or types.count(a) > 1:
                    self._bad[a, b] = True
        return TuningDecision(gpu, trials=1, evict=(newest,), reason=f"packing undone: measured sum {total:.2f} < 1")
