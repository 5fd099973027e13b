"""Settings drawn at random: evaluation on windows, loads, clusters and seeds nobody chose.

A rule judged on a fixed set of settings fits that set. A *draw* is ``N`` settings taken at random
from one seed, each a whole experiment setting:

========================  ==========================================================================
field                     drawn from
========================  ==========================================================================
``trace``                 ``philly``, ``ms-itp`` and ``openb``, one third each
``virtual_cluster``       for ``ms-itp``: one of the five ITP clusters ``cluster01`` .. ``cluster05``
``mix``                   ``gavel`` for ``openb`` (its pods name no model), else ``iadeep``
``start_job``             uniform over the windows of ``jobs`` jobs the trace holds (after its filters)
``target_load``           uniform in ``[0.5, 3]`` (mean offered load; the trace's bursts peak above it)
``seed``                  uniform in ``[0, 2**31)`` (the job mix and the measurement noise)
``nodes``                 uniform in ``3 .. 8`` nodes
``gpus_per_node``         4 (three draws in four) or 8
========================  ==========================================================================

The draw is a pure function of ``(n, seed)`` and of the traces' job counts (:func:`draw_settings`);
the settings are written into ``sweep.csv`` (one column per field) and ``guard.json`` (``draw``),
so a draw is rerun exactly from either (:func:`settings_from_json`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DrawnSetting", "draw_settings", "settings_from_json", "read_draw", "read_draw_run", "ITP_CLUSTERS", "LOAD_RANGE", "NODES_RANGE"]

#: The five Microsoft ITP clusters the registry's ``ms-itp`` dataset holds as separate files.
ITP_CLUSTERS = ("cluster01", "cluster02", "cluster03", "cluster04", "cluster05")
#: Target mean offered load, drawn uniformly in this closed range.
LOAD_RANGE = (0.5, 3.0)
#: Nodes of the cluster, drawn uniformly in this closed range.
NODES_RANGE = (3, 8)
#: GPUs per node and their weights.
GPUS_PER_NODE = ((4, 0.75), (8, 0.25))


@dataclass(frozen=True)
class DrawnSetting:
    """One drawn setting: the fields an :class:`~iadeep.experiment.ExperimentConfig` takes from it.

    Attributes:
        trace: trace format (``philly``, ``ms-itp``, ``openb``).
        virtual_cluster: ITP cluster file stem (``ms-itp`` only), else ``None``.
        mix: workload mix.
        start_job: first job of the window (jobs, after the trace's filters).
        target_load: mean offered load of the window (arrivals rescaled to it).
        seed: seed of the mix and the measurement noise.
        nodes, gpus_per_node: the cluster (24 GiB GPUs, as the main job's).
    """

    trace: str
    virtual_cluster: str | None
    mix: str
    start_job: int
    target_load: float
    seed: int
    nodes: int
    gpus_per_node: int

    @property
    def name(self) -> str:
        """``<trace>[-<cluster>]-<start>-<load>-<seed>-<nodes>x<gpus>``, e.g. ``philly-12345-2.71-99-5x4``."""
        trace = self.trace if self.virtual_cluster is None else f"itp-{self.virtual_cluster}"
        return f"{trace}-{self.start_job}-{self.target_load:g}-{self.seed}-{self.nodes}x{self.gpus_per_node}"

    def fields(self) -> dict[str, Any]:
        """The :class:`~iadeep.experiment.ExperimentConfig` fields of this setting."""
        return dataclasses.asdict(self)


def draw_settings(n: int, seed: int, window_count: Callable[[str, str | None, int, int], int],
                  jobs: int) -> list[DrawnSetting]:
    """Draw ``n`` settings from ``seed`` (the table of the module docstring).

    Args:
        n: number of settings (>= 1).
        seed: the draw's seed (>= 0); the same ``(n, seed)`` gives the same settings, and the
            first ``m`` settings of a draw of ``n >= m`` are those of the draw of ``m``.
        window_count: ``(trace, virtual_cluster, nodes, gpus_per_node) -> jobs`` the trace holds
            for that cluster after its filters (the windows start below ``jobs - window``).
        jobs: jobs per window.

    Returns:
        the settings, in draw order; loads rounded to 0.01.

    Raises:
        ValueError: ``n < 1`` or ``seed < 0``.
    """
    if n < 1:
        raise ValueError(f"a draw needs at least one setting, got {n}")
    if seed < 0:
        raise ValueError(f"the draw seed must be >= 0, got {seed}")
    out = []
    counts: dict[tuple, int] = {}
    for i in range(n):
        # one generator per setting: the i-th setting does not depend on n
        rng = np.random.default_rng([seed, i])
        trace = ("philly", "ms-itp", "openb")[int(rng.integers(3))]
        vc = ITP_CLUSTERS[int(rng.integers(len(ITP_CLUSTERS)))] if trace == "ms-itp" else None
        nodes = int(rng.integers(NODES_RANGE[0], NODES_RANGE[1] + 1))
        sizes, weights = zip(*GPUS_PER_NODE)
        gpn = int(rng.choice(sizes, p=weights))
        u = float(rng.random())
        load = round(float(rng.uniform(*LOAD_RANGE)), 2)
        mix_seed = int(rng.integers(2**31))
        key = (trace, vc, nodes, gpn)
        if key not in counts:
            counts[key] = int(window_count(trace, vc, nodes, gpn))
        last = max(counts[key] - jobs, 0)
        out.append(DrawnSetting(trace, vc, "gavel" if trace == "openb" else "iadeep", int(math.floor(u * (last + 1))),
                                load, mix_seed, nodes, gpn))
    return out


def settings_from_json(items: Sequence[Mapping[str, Any]]) -> list[DrawnSetting]:
    """The settings of a draw as ``guard.json``'s ``draw.settings`` lists them.

    Raises:
        ValueError: an item lacks a field or has an unknown one (the message names the item).
    """
    names = {f.name for f in dataclasses.fields(DrawnSetting)}
    out = []
    for i, item in enumerate(items):
        keys = set(item) - {"setting"}
        if keys != names:
            missing, extra = sorted(names - keys), sorted(keys - names)
            raise ValueError(f"draw setting {i}: " + "; ".join(
                part for part in (f"missing {', '.join(missing)}" if missing else "",
                                  f"unknown {', '.join(extra)}" if extra else "") if part))
        out.append(DrawnSetting(**{k: item[k] for k in names}))
    return out


def read_draw(path: str | Path) -> list[DrawnSetting]:
    """The settings of the draw recorded in a ``guard.json`` (``draw.settings``).

    Raises:
        ValueError: no such file, a folder, a file that cannot be read, not JSON (with the line and
            column), or one that records no draw (the message starts with the path).
    """
    return settings_from_json(_draw_record(path)["settings"])


def read_draw_run(path: str | Path) -> dict[str, Any]:
    """How the draw recorded in a ``guard.json`` was run: ``jobs`` (jobs per setting, int),
    ``queues`` (queue models, list of names) and ``repeats`` (runs per setting, int), each only
    when the record holds it.

    Raises:
        ValueError: as :func:`read_draw`, or a recorded value of the wrong kind (named).
    """
    record = _draw_record(path)
    run = {k: record[k] for k in ("jobs", "queues", "repeats") if record.get(k) is not None}
    for key in ("jobs", "repeats"):
        if key in run and (not isinstance(run[key], int) or isinstance(run[key], bool) or run[key] < 1):
            raise ValueError(f"{path}: draw.{key} must be an integer >= 1, got {run[key]!r}")
    if "queues" in run and (not isinstance(run["queues"], list) or not run["queues"]
                            or not all(isinstance(q, str) for q in run["queues"])):
        raise ValueError(f"{path}: draw.queues must be a list of queue names, got {run['queues']!r}")
    return run


def _draw_record(path: str | Path) -> dict[str, Any]:
    """The ``draw`` object of a ``guard.json`` (of one queue model, or the first of several)."""
    from iadeep._files import read_json

    try:
        doc = read_json(Path(path), "guard.json")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    draws = [doc.get("draw")] if isinstance(doc, dict) and "draw" in doc else [
        g.get("draw") for g in doc.values() if isinstance(g, dict) and "draw" in g] if isinstance(doc, dict) else []
    if not draws or not isinstance(draws[0], dict) or "settings" not in draws[0]:
        raise ValueError(f"{path}: records no draw (no draw.settings)")
    return draws[0]
