"""Parse Gavel's measured throughputs into dense arrays.

Source: Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI'20; file ``scheduler/simulation_throughputs.json`` of stanford-futuredata/gavel
(MIT licence), fetched by the dataset registry as ``gavel-throughputs``.

Layout of the JSON: ``{gpu_type: {job_key: {"null": isolated_steps_per_s,
other_key: [own_steps_per_s, other_steps_per_s], ...}}}`` where ``job_key`` is
``"('<name>', <scale_factor>)"``. A pair measured as ``[0, 0]`` did not fit on one GPU.

Notations:
    n_types: number of job types with scale factor 1 (26 in the published file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iadeep._files import read_json
from iadeep.jobtypes import JobType

__all__ = ["GavelMeasurements", "GPU_TYPES"]

#: GPU types measured by Gavel (keys of the JSON; the ``*_unconsolidated`` variants are ignored).
GPU_TYPES = ("v100", "p100", "k80")


@dataclass(frozen=True)
class GavelMeasurements:
    """Isolated and pairwise co-located throughputs of single-GPU job types on one GPU type.

    Attributes:
        gpu_type: "v100", "p100" or "k80".
        types: the job types, shape ``(n_types,)``, sorted.
        isolated: steps/s of each type alone on the GPU, shape ``(n_types,)``.
        colocated: ``colocated[i, j]`` is the steps/s of type ``i`` while sharing the GPU with
            type ``j``, shape ``(n_types, n_types)``; 0 where the pair does not fit.
    """

    gpu_type: str
    types: tuple[JobType, ...]
    isolated: np.ndarray
    colocated: np.ndarray

    @classmethod
    def load(cls, path: str | Path, gpu_type: str = "v100") -> "GavelMeasurements":
        """Read ``simulation_throughputs.json``.

        Args:
            path: the JSON file.
            gpu_type: a table key of the file: one of :data:`GPU_TYPES` in Gavel's published
                file; ``iadeep profile`` writes its own (e.g. ``"cpu"``, ``"nvidia-h200"``).

        Raises:
            FileNotFoundError: no such file.
            ValueError: every other problem, the message naming the file: a folder or unreadable
                file, not JSON (with the line and column), ``gpu_type`` not in the file (the
                message lists the file's) or its table empty, a malformed key, an isolated
                throughput (steps/s) that is missing, not finite or not > 0, or a pair missing
                from the matrix, not a list of two numbers, or with a value that is not finite or
                is negative (the message names the entry's key path: GPU type, job key, partner
                key).
        """
        path = Path(path)
        raw = read_json(path, "throughputs JSON file")
        table = raw.get(gpu_type) if isinstance(raw, dict) else None
        if isinstance(table, dict) and not table:
            raise ValueError(f"{path}: the {gpu_type!r} table is empty (no job type measured)")
        if not isinstance(table, dict):
            known = sorted(k for k, v in raw.items() if isinstance(v, dict) and k != "iadeep_profile") if isinstance(raw, dict) else []
            raise ValueError(f"{path}: unknown GPU type {gpu_type!r}; the file has {', '.join(known) or 'none'}")
        keys = {}
        for key in table:
            try:
                jt, scale = JobType.from_gavel_key(key)
            except ValueError as e:
                raise ValueError(f"{path}: {gpu_type}: {e}") from None
            if scale == 1:
                keys[jt] = key
        types = tuple(sorted(keys))
        n = len(types)
        iso = np.empty(n)
        co = np.zeros((n, n))
        for i, a in enumerate(types):
            entry = table[keys[a]]
            if not isinstance(entry, dict) or "null" not in entry:
                raise ValueError(f"{path}: {gpu_type} {keys[a]}: expected a mapping with a \"null\" (isolated) throughput")
            iso[i] = _number(entry["null"])
            if not (np.isfinite(iso[i]) and iso[i] > 0):
                raise ValueError(f"{path}: {gpu_type} {keys[a]} \"null\": isolated throughput "
                                 f"must be a finite number > 0 (steps/s), got {entry['null']!r}")
            for j, b in enumerate(types):
                try:
                    pair = entry[keys[b]]
                except KeyError:
                    raise ValueError(f"{path}: {gpu_type} has no co-located measurement for {keys[a]} with {keys[b]}") from None
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ValueError(f"{path}: {gpu_type} {keys[a]} {keys[b]}: co-located measurement: "
                                     f"expected [own, other] steps/s, got {pair!r}")
                values = [_number(v) for v in pair]
                if not all(np.isfinite(v) and v >= 0 for v in values):
                    raise ValueError(f"{path}: {gpu_type} {keys[a]} {keys[b]}: co-located measurement: "
                                     f"each steps/s must be a finite number >= 0, got {pair!r}")
                co[i, j] = values[0]
        for arr in (iso, co):
            arr.setflags(write=False)
        return cls(gpu_type, types, iso, co)


def _number(value: object) -> float:
    """``value`` as a float; NaN for anything that is not a JSON number (a string, a bool, null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return float("nan")
    return float(value)
