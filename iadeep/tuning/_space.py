"""The search space of one tuning session and its objective.

Notations:
    J: jobs co-located on the GPU; n_types: job types of the interference model.

A session tunes the batch size of every co-located job (not only the newest). Job ``j`` may run
at any batch size the interference model measured for its model family (``iadeep.jobtypes``)
whose estimated memory (:func:`iadeep.interference.memory_gib`) fits the GPU memory left to the
session's jobs (``gpu_mem_gib``: the GPU's memory less what pods outside the session reserve), and
a per-pod cap when the driver gives one (``mem_limit_gib``). A job reserves the larger of its
batch size's memory and its pod's request (``mem_request_gib``: what the kubelet counted for the
pod never falls), so a configuration is feasible when those reservations sum within
``gpu_mem_gib``: a session may grow a job into memory no pod reserved, and the driver moves the
reservations with the configuration (live: :meth:`iadeep.state.StateStore.resize`; the
simulator's GPU memory follows the same rule). A job that is not tunable (a gang, a fixed-batch
family) keeps its size. A configuration whose pairs were measured not to fit on one GPU is
infeasible (objective 0: it would run out of memory).

The objective is the policy core's (:class:`iadeep.policy._tuning.BatchSizeTuner`): the sum of
the jobs' progress rates, ``sum_j min(x_j * gain[t_j, b_j], 1)`` with ``x_j`` the measured
normalised throughput, ``t_j`` the type the job ran at and ``b_j`` its submitted type
(:func:`iadeep.goodput.progress`, :func:`iadeep.goodput.gain_matrix`).
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iadeep.goodput import gain_matrix, progress
from iadeep.interference import InterferenceModel, UnknownJobType
from iadeep.jobtypes import JobType

__all__ = ["MAX_CONFIGURATIONS", "TunedJob", "SearchSpace", "SpaceError"]

#: The most configurations (the product of the jobs' numbers of allowed batch sizes) a session's
#: space may hold: its feasible set is enumerated whole, some 5 us and 0.4 KB a configuration.
#: 4,096 is well above a real session's (a GPU's jobs: at most ``5 ** 4 = 625`` over the Gavel
#: measurements at the extender's largest co-location limit, :data:`iadeep.policy.MAX_COLOCATION_LIMIT`)
#: and takes some 20 ms to enumerate; ten jobs of five sizes would be 9,765,625 (gigabytes).
MAX_CONFIGURATIONS = 4096


class SpaceError(ValueError):
    """A job the session cannot tune (unknown model or batch size); the message names the job."""


@dataclass(frozen=True)
class TunedJob:
    """One co-located job of a session.

    Attributes:
        key: the job's name in the session (the pod UID live, a handle in the simulator).
        model: Gavel model family, e.g. ``"ResNet-50"``.
        base_batch_size: the batch size it was submitted with (its progress rate is relative to it).
        batch_size: the batch size it runs at now.
        mem_limit_gib: the most GPU memory its pod may hold (GiB); ``None``: no cap beyond the
            session's ``gpu_mem_gib``.
        tunable: False keeps ``batch_size`` (gangs, fixed-batch families).
        mem_request_gib: its pod's request (GiB): it reserves at least this much whatever its
            batch size; ``None``: its batch size's memory alone.
    """

    key: str
    model: str
    base_batch_size: int
    batch_size: int
    mem_limit_gib: float | None = None
    tunable: bool = True
    mem_request_gib: float | None = None


class SearchSpace:
    """Batch sizes each job may take, feasibility and the objective (module docstring).

    Args:
        model: the interference model (types, isolated steps/s, which pairs fit, memory).
        jobs: the co-located jobs, shape ``(J,)``, keys unique.
        gpu_mem_gib: the GPU memory left to the session's jobs (GiB): configurations whose
            reservations (module docstring) sum above it are infeasible; ``None``: only the
            per-pod caps apply.

    Raises:
        SpaceError: a repeated key, a job whose submitted or current type was not measured, or
            more configurations than :data:`MAX_CONFIGURATIONS` (checked before any is enumerated).
    """

    def __init__(self, model: InterferenceModel, jobs: Sequence[TunedJob], gpu_mem_gib: float | None = None) -> None:
        keys = [j.key for j in jobs]
        if len(set(keys)) != len(keys) or not keys:
            raise SpaceError(f"jobs must be a non-empty list with unique keys, got {keys}")
        self.model = model
        self.jobs = tuple(jobs)
        self.gpu_mem_gib = gpu_mem_gib
        self._keys = tuple(keys)
        tables = _tables(model)
        self._tables = tables
        self.gain = tables.gain
        # everything below but the keys follows from the jobs' other fields and the GPU memory:
        # remembered per model for such a description (a simulated trace opens a session per
        # co-location change, over a few hundred distinct pairs)
        shape = (gpu_mem_gib, tuple([(j.model, j.base_batch_size, j.batch_size, j.mem_limit_gib, j.tunable, j.mem_request_gib)
                                     for j in self.jobs]))
        template = tables.spaces.get(shape)
        if template is None:
            base_ids = tuple([self._tid(j, j.base_batch_size) for j in jobs])
            floors = tuple(float(j.mem_request_gib or 0.0) for j in jobs)
            options = []
            for j in jobs:
                current = self._tid(j, j.batch_size)
                if not j.tunable:
                    options.append((j.batch_size,))
                    continue
                sizes = [b for b in tables.sizes.get(j.model, ())
                         if j.mem_limit_gib is None or tables.mem[self._tid(j, b)] <= j.mem_limit_gib + 1e-9]
                options.append(tuple(sizes) if sizes else (model.types[current].batch_size,))
            size = math.prod(len(o) for o in options)
            if size > MAX_CONFIGURATIONS:  # checked once per description: only spaces within it are remembered
                raise SpaceError(f"the search space of {len(keys)} jobs has {size} configurations (batch sizes per "
                                 f"job: {' x '.join(str(len(o)) for o in options)}), more than the "
                                 f"{MAX_CONFIGURATIONS} a session may hold")
            template = _Template(base_ids, floors, tuple(options))
            if len(tables.spaces) >= _MEMO_SIZE:
                tables.spaces.clear()
            tables.spaces[shape] = template
        self._template = template
        self.base_ids = list(template.base_ids)
        self._floors = template.floors
        self.options: dict[str, tuple[int, ...]] = dict(zip(keys, template.options))
        self._feasible_set: _Feasible | None = template.feasible

    def _tid(self, job: TunedJob, batch_size: int) -> int:
        tid = self._tables.ids.get((job.model, batch_size))
        if tid is not None:
            return tid
        try:
            return self.model.type_id(JobType(job.model, batch_size))
        except UnknownJobType as exc:
            raise SpaceError(f"job {job.key}: {exc.args[0]}") from None

    def _feasible(self) -> _Feasible:
        """The feasible configurations, from the per-model memo (the same jobs' types and GPU
        memory give the same set: a simulated trace repeats a few hundred pairs)."""
        if self._feasible_set is None:
            opt_ids = tuple(tuple((b, self._tid(j, b)) for b in self.options[j.key]) for j in self.jobs)
            memo_key = (opt_ids, self.gpu_mem_gib, self._floors)
            found = self._tables.feasible.get(memo_key)
            if found is None:
                combos, rows = [], []
                for combo in itertools.product(*opt_ids):
                    ids = tuple(t for _, t in combo)
                    if self._ids_feasible(ids):
                        combos.append(tuple(b for b, _ in combo))
                        rows.append(ids)
                found = _Feasible(combos, {c: r for c, r in zip(combos, rows)},
                                  np.array(rows, dtype=np.intp).reshape(len(rows), len(opt_ids)), rows)
                if len(self._tables.feasible) >= _MEMO_SIZE:
                    self._tables.feasible.clear()
                self._tables.feasible[memo_key] = found
            self._feasible_set = self._template.feasible = found
        return self._feasible_set

    def _ids_feasible(self, ids: Sequence[int]) -> bool:
        if not self.model.set_fits(ids):
            return False
        return self.gpu_mem_gib is None or self.reserved_gib(ids) <= self.gpu_mem_gib + 1e-9

    def reserved_gib(self, ids: Sequence[int]) -> float:
        """GPU memory (GiB) the jobs reserve at type ids ``ids`` (job order): each the larger of
        its type's estimate and its pod's request (module docstring)."""
        mem = self._tables.mem
        return sum([max(mem[t], f) for t, f in zip(ids, self._floors, strict=True)])

    def reservations_gib(self, config: Mapping[str, int]) -> dict[str, float]:
        """Per job key, the memory (GiB) it reserves at ``config`` (key -> batch size)."""
        mem = self._tables.mem
        return {j.key: max(mem[t], f) for j, t, f in zip(self.jobs, self.type_ids(config), self._floors, strict=True)}

    def _combo(self, config: Mapping[str, int]) -> tuple[int, ...]:
        return tuple([int(config[k]) for k in self._keys])

    def type_ids(self, config: Mapping[str, int]) -> list[int]:
        """Interference-model type ids of a configuration (key -> batch size), in job order.

        Raises:
            KeyError: a job is missing. SpaceError: a size the model did not measure.
        """
        feasible = self._feasible_set if self._feasible_set is not None else self._feasible()
        ids = feasible.ids.get(tuple([int(config[k]) for k in self._keys]))  # _combo, inlined (a few calls a trial)
        if ids is not None:
            return list(ids)
        return [self._tid(j, int(config[j.key])) for j in self.jobs]

    def feasible(self, config: Mapping[str, int]) -> bool:
        """All sizes allowed, every pair measured to fit on one GPU, and reservations within ``gpu_mem_gib``."""
        return self._combo(config) in self._feasible().ids

    def configurations(self) -> list[dict[str, int]]:
        """Every feasible configuration (at most a few dozen for two jobs), in the order of the
        options' product."""
        return [dict(zip(self._keys, c)) for c in self._feasible().combos]

    def current(self) -> dict[str, int]:
        """The configuration running now."""
        return {j.key: j.batch_size for j in self.jobs}

    def objective(self, config: Mapping[str, int], normalised: Mapping[str, float]) -> float:
        """Summed progress rate of ``config`` at measured normalised throughputs ``normalised``.

        Raises:
            KeyError: a job's throughput is missing.
        """
        feasible = self._feasible_set if self._feasible_set is not None else self._feasible()
        ids = feasible.ids.get(tuple([int(config[k]) for k in self._keys]))  # type_ids without its copy
        if ids is None:
            ids = self.type_ids(config)
        gain = self.gain.item
        return float(sum([progress(float(normalised[k]), gain(t, b))
                          for k, t, b in zip(self._keys, ids, self.base_ids, strict=True)]))

    def predicted_normalised(self, config: Mapping[str, int], predicted: np.ndarray) -> dict[str, float]:
        """Normalised throughputs a pairwise prediction ``(n_types, n_types)`` gives ``config``
        (slowdowns compound multiplicatively for more than two jobs, as in the core)."""
        ids = self.type_ids(config)
        out = {}
        for i, j in enumerate(self.jobs):
            x = 1.0
            for k, other in enumerate(ids):
                if k != i:
                    x *= float(predicted[ids[i], other])
            out[j.key] = x
        return out

    def ranked(self, predicted: np.ndarray, n: int | None = None) -> list[tuple[float, dict[str, int]]]:
        """Feasible configurations by predicted objective, best first (ties: the options' product
        order, i.e. smaller batch sizes of the first job first); the first ``n`` only when given.

        The same values as :meth:`objective` of :meth:`predicted_normalised`, computed over all
        configurations at once (one tuning session per co-location change of a simulated trace).
        """
        f = self._feasible()
        rows = f.rows
        if not rows:
            return []
        # Plain floats, not numpy: a session ranks a few dozen configurations, where numpy's
        # per-call overhead dominated (some 75 us per session). The same IEEE operations in the
        # same order as the vectorised form (x = 1 * p_1 * p_2 ..., total = 0 + v_1 + v_2 ...),
        # so the values and the stable order are identical.
        pred, gain, base = predicted.item, self.gain.item, self.base_ids
        k = len(rows[0])
        totals = []
        if k == 2:  # a pair, the common case: the loop below unrolled (1.0 * p is p exactly)
            b0, b1 = base
            for t0, t1 in rows:
                v0 = pred(t0, t1) * gain(t0, b0)
                v1 = pred(t1, t0) * gain(t1, b1)
                totals.append(0.0 + (v0 if v0 < 1.0 else 1.0) + (v1 if v1 < 1.0 else 1.0))
        for ids in rows if k != 2 else ():
            total = 0.0
            for i in range(k):
                x = 1.0
                t = ids[i]
                for o in range(k):
                    if o != i:
                        x = x * pred(t, ids[o])
                v = x * gain(t, base[i])
                total = total + (v if v < 1.0 else 1.0)
            totals.append(total)
        order = sorted(range(len(rows)), key=lambda r: -totals[r])[:n]
        combos, keys = f.combos, self._keys
        return [(totals[r], dict(zip(keys, combos[r]))) for r in order]

    def n_feasible(self) -> int:
        """How many feasible configurations there are."""
        return len(self._feasible().combos)


@dataclass(frozen=True)
class _Feasible:
    combos: list[tuple[int, ...]]  # feasible batch sizes per job, in the options' product order
    ids: dict[tuple[int, ...], tuple[int, ...]]  # combo -> type ids
    array: np.ndarray  # type ids of the combos, shape (n, J)
    rows: list[tuple[int, ...]]  # the same as tuples


_MEMO_SIZE = 4096  # feasible sets and templates remembered per model (a trace repeats a few hundred pairs)


@dataclass
class _Template:
    """What a :class:`SearchSpace` derives from its jobs' descriptions and GPU memory, in job
    order: the submitted types, the memory floors, the batch sizes allowed, and the feasible set
    once computed."""

    base_ids: tuple[int, ...]
    floors: tuple[float, ...]
    options: tuple[tuple[int, ...], ...]
    feasible: _Feasible | None = None


@dataclass(frozen=True)
class _Tables:
    gain: np.ndarray  # (n_types, n_types), iadeep.goodput.gain_matrix
    sizes: dict[str, tuple[int, ...]]  # model family -> measured batch sizes, ascending
    mem: list[float]  # memory estimate per type (GiB)
    ids: dict[tuple[str, int], int]  # (model family, batch size) -> type id
    feasible: dict[tuple, _Feasible]  # memo: (options with type ids, GPU memory) -> feasible set
    spaces: dict[tuple, _Template]  # memo: (GPU memory, the jobs' descriptions without keys) -> template


_TABLES: weakref.WeakKeyDictionary[InterferenceModel, _Tables] = weakref.WeakKeyDictionary()


def _tables(model: InterferenceModel) -> _Tables:
    """Per-model tables, computed once per model (a session is opened per co-location change)."""
    t = _TABLES.get(model)
    if t is None:
        sizes: dict[str, list[int]] = {}
        for jt in model.types:
            sizes.setdefault(jt.model, []).append(jt.batch_size)
        t = _Tables(gain_matrix(model.types, model.isolated_steps_per_s),
                    {m: tuple(sorted(v)) for m, v in sizes.items()}, [float(x) for x in model.mem_gib],
                    {(jt.model, jt.batch_size): k for k, jt in enumerate(model.types)}, {}, {})
        _TABLES[model] = t
    return t
