"""Goodput model: how a batch-size change affects training progress.

Throughput in samples/s is not progress: larger batches need more samples to reach the same
accuracy. Following Pollux (Qiao et al., OSDI'21, Sec. 3.1, "statistical efficiency") which builds on
the gradient noise scale of McCandlish et al. ("An Empirical Model of Large-Batch Training", 2018),
the progress made per sample at batch size ``b``, relative to the job's original batch size ``b0``, is

    E(b) = (phi + b0) / (phi + b)

where ``phi`` is the gradient noise scale (in samples). ``goodput = samples/s x E(b)``. IADeep's
artifact uses the same efficiency term when it tunes batch sizes.

The per-family ``phi`` values below are order-of-magnitude critical batch sizes reported by
McCandlish et al. 2018 (Fig. 4/Table 1: CIFAR-10 image classification ~ 10^2-10^3, ImageNet
~ 10^3-10^4, LSTM/transformer language models ~ 10^2-10^3 sequences, Atari RL ~ 10^2-10^3); the
recommendation value is an assumption of ours (large sparse batches are known to scale well).
They only decide how strongly larger batches are discounted; they are not fitted to anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from iadeep.jobtypes import JobType

__all__ = ["GRADIENT_NOISE_SCALE", "statistical_efficiency", "gain_matrix", "progress"]

#: Gradient noise scale ``phi`` (samples) per Gavel model family; see the module docstring.
GRADIENT_NOISE_SCALE: dict[str, float] = {
    "ResNet-18": 500.0,
    "ResNet-50": 2000.0,
    "Transformer": 500.0,
    "LM": 200.0,
    "Recommendation": 20000.0,
    "A3C": 500.0,
    "CycleGAN": 100.0,
}


def statistical_efficiency(model: str, batch_size: int, base_batch_size: int) -> float:
    """Progress per sample at ``batch_size`` relative to ``base_batch_size`` (1.0 when equal).

    Raises:
        KeyError: unknown model family.
    """
    phi = GRADIENT_NOISE_SCALE[model]
    return (phi + base_batch_size) / (phi + batch_size)


def gain_matrix(types: Sequence[JobType], isolated_steps_per_s: np.ndarray) -> np.ndarray:
    """Goodput of running at type ``t`` relative to the job's submitted type ``b`` (both alone).

    ``gain[t, b] = (steps/s(t) x batch(t) x E(batch(t))) / (steps/s(b) x batch(b))`` for types of the
    same model family, 0 across families (a job never changes model).

    Args:
        types: job types, shape ``(n_types,)``.
        isolated_steps_per_s: isolated steps/s of each type, shape ``(n_types,)``.

    Returns:
        shape ``(n_types, n_types)``.
    """
    n = len(types)
    gain = np.zeros((n, n))
    for a, ta in enumerate(types):
        for b, tb in enumerate(types):
            if ta.model == tb.model:
                eff = statistical_efficiency(ta.model, ta.batch_size, tb.batch_size)
                gain[a, b] = isolated_steps_per_s[a] * ta.batch_size * eff / (isolated_steps_per_s[b] * tb.batch_size)
    gain.setflags(write=False)
    return gain


def progress(normalised_throughput: float, gain: float) -> float:
    """Progress rate (1.0 = dedicated run as submitted) of a job at ``normalised_throughput`` and ``gain``.

    Capped at 1: the trace's duration is the fastest a job runs, so tuning can only win back what
    interference took, never outrun the dedicated run.
    """
    return min(normalised_throughput * gain, 1.0)
