"""Workload mixes: which model (and batch size) each trace job trains.

Traces say when jobs arrive, how long they run and how many GPUs they need, but not what they
train. A *mix* assigns each job an ``app`` (the mix's own model name), the Gavel model family it
is measured as (``model``) and a ``batch_size`` among those Gavel measured for that family
(:data:`iadeep.jobtypes.MEASURED_BATCH_SIZES`), so the interference data applies to it.

Mixes
-----
``"iadeep"`` (default): IADeep's five benchmark models, with the weights of the IADeep
artifact's workload generator (as reported in the project's issue; normalised to sum to 1),
each mapped to the nearest family Gavel measured (see :data:`IADEEP_MIX_TABLE`):

==========  ======  ===============  ===========================================================
app         weight  Gavel family     why
==========  ======  ===============  ===========================================================
vgg16       0.14    ResNet-50        large ImageNet CNN; VGG is not in Gavel
resnet50    0.14    ResNet-50        the same model
squeezenet  0.14    ResNet-18        small CNN; Gavel's ResNet-18 is the small (CIFAR-10) CNN
neumf       0.12    Recommendation   collaborative filtering, as NeuMF (Gavel: ML-20M autoencoder)
lstm        0.12    LM               Gavel's LM is an LSTM language model (Wikitext-2)
==========  ======  ===============  ===========================================================

(Raw weights sum to 0.66, so e.g. vgg16 has probability 0.14 / 0.66 = 0.212.) The batch size is
uniform over the family's measured batch sizes.

``"gavel"``: each of Gavel's 26 job types (every family x measured batch size; A3C and CycleGAN
with batch size 1) with equal weight; ``app`` is the family name.

Add a mix by adding one entry to :data:`MIXES`.

Randomness
----------
Each job's draw is a keyed hash (BLAKE2b) of its ``job_id``, keyed by
``numpy.random.SeedSequence(seed)``: the same seed gives every job the same model whatever the
row order, and whichever other jobs are in the table (so overlapping windows agree). Different
seeds give independent draws.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from iadeep.jobtypes import MEASURED_BATCH_SIZES

__all__ = ["MixEntry", "WorkloadMix", "IADEEP_MIX_TABLE", "MIXES", "assign_mix", "mix_probabilities"]


@dataclass(frozen=True)
class MixEntry:
    """One app of a mix.

    Attributes:
        app: the mix's model name (the job table's ``app``).
        model: the Gavel family it is measured as (a key of ``MEASURED_BATCH_SIZES``).
        weight: relative frequency (> 0; a mix's weights are normalised to sum to 1).
        batch_sizes: the batch sizes drawn from, uniformly; default: all measured for ``model``.
        rationale: why this family stands for this app.
    """

    app: str
    model: str
    weight: float
    batch_sizes: tuple[int, ...] = ()
    rationale: str = ""

    def __post_init__(self) -> None:
        if self.model not in MEASURED_BATCH_SIZES:
            raise ValueError(f"{self.app}: unknown Gavel family {self.model!r}")
        if not self.weight > 0:
            raise ValueError(f"{self.app}: weight must be > 0, got {self.weight!r}")
        if not self.batch_sizes:
            object.__setattr__(self, "batch_sizes", MEASURED_BATCH_SIZES[self.model])
        bad = [b for b in self.batch_sizes if b not in MEASURED_BATCH_SIZES[self.model]]
        if bad:
            raise ValueError(f"{self.app}: batch sizes {bad} not measured for {self.model}")


@dataclass(frozen=True)
class WorkloadMix:
    """A named list of apps with weights.

    Attributes:
        name: the mix's key in :data:`MIXES`.
        entries: the apps (an app may appear in several entries, e.g. one per batch size).
        source: where the weights come from.
    """

    name: str
    entries: tuple[MixEntry, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError(f"mix {self.name!r} has no entries")

    @property
    def probabilities(self) -> np.ndarray:
        """Normalised weights, shape ``(len(entries),)``, summing to 1."""
        w = np.array([e.weight for e in self.entries], dtype=np.float64)
        return w / w.sum()


#: IADeep's benchmark models -> nearest Gavel family (weights: IADeep artifact's generator).
IADEEP_MIX_TABLE: tuple[MixEntry, ...] = (
    MixEntry("vgg16", "ResNet-50", 0.14, rationale="large ImageNet CNN; VGG is not in Gavel"),
    MixEntry("resnet50", "ResNet-50", 0.14, rationale="the same model"),
    MixEntry("squeezenet", "ResNet-18", 0.14, rationale="small CIFAR-sized CNN"),
    MixEntry("neumf", "Recommendation", 0.12, rationale="collaborative filtering, as NeuMF"),
    MixEntry("lstm", "LM", 0.12, rationale="Gavel's LM is an LSTM language model"),
)

_GAVEL_TABLE: tuple[MixEntry, ...] = tuple(
    MixEntry(fam, fam, 1.0, (bs,), rationale="Gavel job type")
    for fam, sizes in MEASURED_BATCH_SIZES.items()
    for bs in sizes
)

#: Registry of workload mixes by name.
MIXES: dict[str, WorkloadMix] = {
    "iadeep": WorkloadMix(
        "iadeep", IADEEP_MIX_TABLE, source="IADeep artifact workload generator (project issue)"
    ),
    "gavel": WorkloadMix("gavel", _GAVEL_TABLE, source="Gavel's 26 measured job types, equal weight"),
}


def mix_probabilities(mix: str | WorkloadMix) -> dict[tuple[str, str, int], float]:
    """Probability of each ``(app, model, batch_size)`` under a mix (for checks and reports)."""
    m = MIXES[mix] if isinstance(mix, str) else mix
    out: dict[tuple[str, str, int], float] = {}
    for e, p in zip(m.entries, m.probabilities):
        for b in e.batch_sizes:
            key = (e.app, e.model, b)
            out[key] = out.get(key, 0.0) + p / len(e.batch_sizes)
    return out


def _uniforms(job_ids: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two independent U[0, 1) draws per job, from a keyed hash of its id."""
    key = np.random.SeedSequence(int(seed)).generate_state(8, np.uint32).tobytes()
    digests = b"".join(
        hashlib.blake2b(str(j).encode("utf-8"), digest_size=16, key=key).digest() for j in job_ids
    )
    h = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
    u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u[:, 0], u[:, 1]


def assign_mix(jobs: pd.DataFrame, mix: str | WorkloadMix, seed: int) -> pd.DataFrame:
    """Add ``model``, ``batch_size`` and ``app`` columns to a table with a ``job_id`` column.

    Args:
        jobs: table with a unique ``job_id`` column, shape ``(n, ...)``.
        mix: a key of :data:`MIXES` or a :class:`WorkloadMix`.
        seed: non-negative integer.

    Returns:
        A copy of ``jobs`` with ``model`` (str), ``batch_size`` (int64) and ``app`` (str).

    Raises:
        KeyError: for an unknown mix name.
    """
    m = MIXES[mix] if isinstance(mix, str) else mix
    ids = jobs["job_id"].to_numpy(dtype=object)
    u_app, u_bs = _uniforms(ids, seed)
    cum = np.cumsum(m.probabilities)
    cum[-1] = 1.0
    which = np.minimum(np.searchsorted(cum, u_app, side="right"), len(m.entries) - 1)
    models = np.array([e.model for e in m.entries], dtype=object)[which]
    apps = np.array([e.app for e in m.entries], dtype=object)[which]
    batch = np.empty(len(ids), dtype=np.int64)
    for k, e in enumerate(m.entries):
        sel = which == k
        sizes = np.asarray(e.batch_sizes, dtype=np.int64)
        pick = np.minimum((u_bs[sel] * len(sizes)).astype(np.int64), len(sizes) - 1)
        batch[sel] = sizes[pick]
    out = jobs.copy()
    out["model"] = models
    out["batch_size"] = batch
    out["app"] = apps
    return out
