"""Per-GPU-model speeds from Gavel's measured throughputs.

Gavel (Narayanan et al., OSDI'20; ``scheduler/simulation_throughputs.json``) measured every job
type alone on K80, P100 and V100 GPUs. A job type's speed on a GPU model, relative to the
reference type the trace's durations are taken on, is the ratio of its isolated throughputs:
``isolated[model's type][job type] / isolated[reference][job type]``. Trace GPU model names map
to Gavel's types by prefix (openb's ``V100M16`` / ``V100M32`` -> ``v100``, ``P100`` -> ``p100``;
``K80`` -> ``k80``); any other model (openb's ``T4``, ``A10``, ``G1``-``G3``) has no measurement
and runs at the reference speed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iadeep.interference import GPU_TYPES, InterferenceModel

__all__ = ["gavel_type_of", "type_speeds"]


def gavel_type_of(gpu_model: str) -> str | None:
    """Gavel's GPU type for a trace's model name (``"V100M32"`` -> ``"v100"``), or ``None``."""
    m = gpu_model.strip().lower()
    for t in GPU_TYPES:
        if m.startswith(t):
            return t
    return None


def type_speeds(throughputs: str | Path, model: InterferenceModel) -> dict[str, np.ndarray]:
    """Relative speed of each job type of ``model`` on each Gavel GPU type.

    Args:
        throughputs: Gavel's ``simulation_throughputs.json``.
        model: the interference model (its ``gpu_type`` is the reference, its ``types`` the order).

    Returns:
        Gavel GPU type -> array ``(n_types,)`` of speeds relative to ``model.gpu_type`` (1.0 on the
        reference type itself).

    Raises:
        ValueError: the file lacks a GPU type or a job type of ``model``.
    """
    out: dict[str, np.ndarray] = {}
    for t in GPU_TYPES:
        other = InterferenceModel.from_file(throughputs, t) if t != model.gpu_type else model
        ids = {jt: i for i, jt in enumerate(other.types)}
        missing = [jt for jt in model.types if jt not in ids]
        if missing:
            raise ValueError(f"{throughputs}: no {t} measurement for {missing[0]}")
        iso = np.array([other.isolated_steps_per_s[ids[jt]] for jt in model.types])
        out[t] = iso / model.isolated_steps_per_s
    return out
