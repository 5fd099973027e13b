"""Ground-truth interference model: normalised throughput of every job in a co-location set.

The *normalised throughput* of a job is its steps/s while co-located divided by its steps/s alone
on the same GPU (1.0 = no interference). Pairs come straight from Gavel's measurements
(:mod:`._gavel`); a pair measured at zero does not fit on one GPU.

Rule for more than two jobs on one GPU (no three-way measurements exist): each partner's slowdown
compounds multiplicatively, ``x_i = prod_{j != i} x_{i|j}``, i.e. contention from different
partners is assumed independent. This is an assumption, documented as such; the ``iadeep`` policy
never forms such sets (its co-location limit is 2), but packing baselines may.

Notations:
    n_types: number of job types known to the model.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from iadeep.interference._gavel import GavelMeasurements
from iadeep.interference._memory import memory_gib
from iadeep.jobtypes import JobType

__all__ = ["InterferenceModel", "UnknownJobType"]


class UnknownJobType(KeyError):
    """A job type that the measurements do not cover."""


class InterferenceModel:
    """Measured normalised throughputs, indexed by integer type ids for speed.

    Attributes:
        types: job types, shape ``(n_types,)``; a type's id is its position.
        isolated_steps_per_s: shape ``(n_types,)``.
        norm: ``norm[i, j]`` = normalised throughput of type ``i`` sharing with ``j``,
            shape ``(n_types, n_types)``; 0 where the pair does not fit.
        fits: ``fits[i, j]`` True where both directions were measured non-zero.
        mem_gib: memory estimate per type (GiB), shape ``(n_types,)``.
    """

    def __init__(self, measurements: GavelMeasurements):
        self.gpu_type = measurements.gpu_type
        self.types = measurements.types
        self._ids = {t: i for i, t in enumerate(self.types)}
        self.isolated_steps_per_s = measurements.isolated
        co = measurements.colocated
        self.fits = (co > 0) & (co.T > 0)
        norm = np.where(self.fits, co / measurements.isolated[:, None], 0.0)
        self.norm = norm
        self.mem_gib = np.array([memory_gib(t) for t in self.types])
        for arr in (self.fits, self.norm, self.mem_gib):
            arr.setflags(write=False)

    @classmethod
    def from_file(cls, path: str | Path, gpu_type: str = "v100") -> "InterferenceModel":
        """Build from Gavel's ``simulation_throughputs.json`` (see :class:`GavelMeasurements`).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file cannot be used (not JSON, no or an empty ``gpu_type`` table, a
                malformed entry); the message names the file, as :meth:`GavelMeasurements.load`.
        """
        return cls(GavelMeasurements.load(path, gpu_type))

    def whole_gib(self) -> "InterferenceModel":
        """A copy whose memory estimates are rounded up to whole GiB, as the live system reserves
        memory: a pod requests ``iadeep.io/gpu-mem`` in whole GiB (extended resources are
        integers; the device plugin advertises one device per GiB), and a tuned job's reservation
        follows its batch size in the same unit. The live tuner and coordinator use it, and the
        simulator when it checks parity with them."""
        out = copy.copy(self)
        whole = np.ceil(self.mem_gib - 1e-9)
        whole.setflags(write=False)
        out.mem_gib = whole
        return out

    def type_id(self, job_type: JobType) -> int:
        """Integer id of ``job_type``.

        Raises:
            UnknownJobType: the type was not measured.
        """
        try:
            return self._ids[job_type]
        except KeyError:
            raise UnknownJobType(f"{job_type.name!r} was not measured on {self.gpu_type}") from None

    def batch_sizes(self, model: str) -> tuple[int, ...]:
        """Measured batch sizes of ``model`` on this GPU type, ascending."""
        return tuple(sorted(t.batch_size for t in self.types if t.model == model))

    def set_fits(self, type_ids: Sequence[int]) -> bool:
        """True when every pair in the set was measured to fit on one GPU."""
        ids = list(type_ids)
        return all(self.fits[a, b] for k, a in enumerate(ids) for b in ids[k + 1 :])

    def normalised(self, type_ids: Sequence[int]) -> np.ndarray:
        """Normalised throughput of each job in a co-location set, shape ``(len(type_ids),)``.

        One job: 1.0. Two: the measured pair. More: the multiplicative rule (module docstring).
        A set that does not fit gives zeros.
        """
        ids = list(type_ids)
        k = len(ids)
        if k == 1:
            return np.ones(1)
        if k == 2:  # the simulator's most frequent call: a pair, read without building the submatrix
            a, b = ids
            return np.array([self.norm[a, b], self.norm[b, a]])
        sub = self.norm[np.ix_(ids, ids)]
        np.fill_diagonal(sub, 1.0)
        return np.prod(sub, axis=1)
