"""The simulator's rate model: how fast each running job progresses on its GPUs.

On each GPU a job progresses at ``min(normalised throughput x goodput gain, 1)`` times its GPU
model's speed (:func:`iadeep.goodput.progress`, :mod:`iadeep.interference`); a job holding a GPU
share runs at normalised throughput 1 (shares do not interfere); a gang advances at the rate of its
slowest GPU (synchronous data parallelism). The rule and its sources: :mod:`iadeep.sim._engine`'s
module docstring.

:class:`RateModel` is a part of :class:`iadeep.sim.Simulator` (a base class of it), over the
engine's state: ``gpus``, ``type``, ``gpu_rate`` (progress rate per GPU slot, work s per s),
``model``, and the slot helpers ``_slot``/``_occupants``.
"""

from __future__ import annotations

import numpy as np

from iadeep.goodput import progress

__all__ = ["RateModel"]


class RateModel:
    """Progress rates of the jobs on their GPUs (module docstring)."""

    def _gang_rate(self, h: int):
        """Job ``h``'s progress rate: the lowest of its GPUs' rates (a gang advances at its slowest)."""
        gs = self.gpus[h]
        if len(gs) == 1:
            g = gs[0]
            return self.gpu_rate.item(g, self._slot(g, h))
        rate, slots = self.gpu_rate.item, self._slot_list
        return min([rate(g, slots[g].index(h)) for g in gs])  # the same value as the array minimum (_slot inlined: gangs of up to 64 GPUs)

    def _refresh_gpu(self, g: int, affected: set[int]) -> None:
        """Recompute true rates on ``g`` from its occupants' current types."""
        occ = self._occupants(g)
        if not occ:
            return
        types = [self.type.item(h) for h in occ]
        row = self.gpu_rate[g]
        # occupant i sits in slot i (ClusterView's slot contract: occupied slots first)
        for i, (h, t, x) in enumerate(zip(occ, types, self._normalised(occ, types))):
            row[i] = self._true_rate(g, h, t, x)
            affected.add(h)

    def _normalised(self, handles: list[int], types: list[int]) -> list[float]:
        """Normalised throughputs of ``handles`` running ``types`` together; 1 for share holders (see the module doc).

        Plain floats (the values of :meth:`InterferenceModel.normalised`): a pair, the common case,
        is read from the table without building arrays."""
        if len(types) == 2:
            a, b = types
            norm = [self._norm_of(a, b), self._norm_of(b, a)]
        elif len(types) == 1:  # alone: InterferenceModel.normalised's 1.0
            norm = [1.0]
        else:
            norm = np.asarray(self.model.normalised(types), dtype=float).tolist()
        share = self._has_share
        return [1.0 if share[h] else x for h, x in zip(handles, norm)]

    def _true_rate(self, g: int, h: int, t: int, x: float) -> float:
        """Progress rate of job ``h`` as type ``t`` at normalised throughput ``x`` on GPU ``g``."""
        return progress(x, self._gain_of(t, self._base_of[h])) * self._speed_of(g, t)
