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

__all__ = ["GRADIENT_NOISE_SCALE", "statistical_efficiency", "progress_rate"]

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


def progress_rate(model: str, steps_per_s: float, batch_size: int, base_steps_per_s: float, base_batch_size: int) -> float:
    """Training progress rate relative to running alone at the original configuration.

    ``rate = (steps/s x b x E(b)) / (base steps/s x b0)``: 1.0 means the job progresses as fast as
    on a dedicated GPU at the batch size it was submitted with.

    Args:
        model: model family.
        steps_per_s: current steps/s (co-located or not).
        batch_size: current batch size (samples per step).
        base_steps_per_s: isolated steps/s at ``base_batch_size``.
        base_batch_size: the batch size the job was submitted with.
    """
    samples = steps_per_s * batch_size * statistical_efficiency(model, batch_size, base_batch_size)
    return samples / (base_steps_per_s * base_batch_size)
