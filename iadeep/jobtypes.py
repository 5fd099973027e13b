"""Job types: a model family and a batch size, named as in the Gavel throughput measurements.

A *job type* is the unit the interference data is measured in. Gavel (Narayanan et al., OSDI'20,
``scheduler/simulation_throughputs.json``) names them ``"<Family> (batch size <B>)"``; two families
(A3C, CycleGAN) were measured at a single batch size and are named by family alone. We represent
those with ``batch_size == 1`` and treat them as not tunable.

Measured batch sizes per family (facts read from the Gavel JSON, V100/P100/K80 alike):
ResNet-18 {16..256}, ResNet-50 {16..128}, Transformer {16..256}, LM {5..80},
Recommendation {512..8192}, A3C and CycleGAN (fixed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["JobType", "MEASURED_BATCH_SIZES", "FIXED_BATCH_FAMILIES"]

#: Batch sizes measured by Gavel for each model family (the tuner may only choose among these).
MEASURED_BATCH_SIZES: dict[str, tuple[int, ...]] = {
    "ResNet-18": (16, 32, 64, 128, 256),
    "ResNet-50": (16, 32, 64, 128),
    "Transformer": (16, 32, 64, 128, 256),
    "LM": (5, 10, 20, 40, 80),
    "Recommendation": (512, 1024, 2048, 4096, 8192),
    "A3C": (1,),
    "CycleGAN": (1,),
}

#: Families Gavel measured without a batch size in the name.
FIXED_BATCH_FAMILIES = frozenset({"A3C", "CycleGAN"})

_KEY_RE = re.compile(r"^\('(?P<family>[^'(]+?)(?: \(batch size (?P<bs>\d+)\))?', (?P<scale>\d+)\)$")


@dataclass(frozen=True, order=True)
class JobType:
    """A model family at one batch size, e.g. ``JobType("ResNet-50", 64)``.

    Attributes:
        model: Gavel model family name (a key of :data:`MEASURED_BATCH_SIZES`).
        batch_size: per-GPU mini-batch size in samples (1 for fixed-batch families).
    """

    model: str
    batch_size: int

    @property
    def name(self) -> str:
        """Gavel's display name, e.g. ``"ResNet-50 (batch size 64)"`` or ``"A3C"``."""
        if self.model in FIXED_BATCH_FAMILIES:
            return self.model
        return f"{self.model} (batch size {self.batch_size})"

    def gavel_key(self, scale_factor: int = 1) -> str:
        """The key used in Gavel's JSON, e.g. ``"('ResNet-50 (batch size 64)', 1)"``."""
        return f"('{self.name}', {scale_factor})"

    @classmethod
    def from_gavel_key(cls, key: str) -> tuple["JobType", int]:
        """Parse a Gavel JSON key into ``(JobType, scale_factor)``.

        Raises:
            ValueError: if ``key`` is not of the form ``"('<name>', <int>)"``.
        """
        m = _KEY_RE.match(key)
        if not m:
            raise ValueError(f"not a Gavel job-type key: {key!r}")
        bs = int(m["bs"]) if m["bs"] else 1
        return cls(m["family"], bs), int(m["scale"])

    def __str__(self) -> str:  # pragma: no cover - display only
        return self.name
