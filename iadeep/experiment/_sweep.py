"""Sweep: the same comparison over several trace windows, loads and seeds.

A policy that wins on one window and loses on another is not done: results differ a lot between
Philly windows (see the project's workload notes), so compare on many. Writes ``sweep.csv`` (one
row per setting and policy: the summary metrics plus ``avg_jct_vs_<reference>``) and
``sweep.png`` (each policy's avg JCT relative to the reference policy, per setting).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from iadeep.experiment._config import ExperimentConfig
from iadeep.experiment._steps import build_workload, fetch_inputs, run_policy

__all__ = ["check_grid", "run_sweep", "run_setting", "sweep_table", "plot_sweep", "guard_figures", "dedicated_floor", "write_sweep_files",
           "GUARD_GOALS"]


def run_setting(base: ExperimentConfig, paths: dict[str, str], start: int, load: float, seed: int, label: str = "",
                options: dict[str, dict] | None = None) -> list[dict]:
    """One setting of a sweep: every policy of ``base`` on the window from job ``start`` at target
    load ``load`` with ``seed``; files under ``<base.out>/<label><start>-<load>-<seed>/``.

    Args:
        paths: ``{"trace": ..., "throughputs": ...}`` from :func:`fetch_inputs`.
        options: per policy, extra constructor arguments (:func:`run_policy`).

    Returns:
        one ``sweep.csv`` row per policy (setting, start_job, target_load, seed, policy, summary metrics).
    """
    setting = f"{label}{start}-{load:g}-{seed}"
    cfg = dataclasses.replace(base, start_job=start, target_load=load, seed=seed, out=str(Path(base.out) / setting))
    workload, meta = build_workload(cfg, paths["trace"], paths["throughputs"])
    rows = []
    for name in cfg.policies:
        result = run_policy(cfg, name, workload, paths["throughputs"], options=(options or {}).get(name))
        s = result.summary(cfg.include_censored)
        rows.append({"setting": setting, "start_job": start, "target_load": load, "seed": seed, "policy": name,
                     "offered_load_peak": meta["offered_load_peak"],
                     "avg_dedicated_s": dedicated_floor(result.jobs, cfg.include_censored), **s})
    return rows


def check_grid(base: ExperimentConfig, paths: dict[str, str], start_jobs: Sequence[int], loads: Sequence[float],
               seeds: Sequence[int]) -> None:
    """Check a sweep's grid before its first setting runs (the CLI and the Airflow DAG ``iadeep_sweep``).

    Every value is given once (``1`` and ``1.0`` are one load: the settings would repeat), every
    setting's configuration is valid, and the window of the largest start job can be built (one
    past the trace's end would otherwise fail after the other settings ran). That window is built
    in a temporary folder, so nothing is written into ``base.out``.

    Raises:
        iadeep._params.ConfigError: naming the grid's option (``start_jobs``, ``loads``, ``seeds``).
    """
    import tempfile

    from iadeep._climain import one_line
    from iadeep._params import ConfigError
    from iadeep.traces import TraceFormatError

    for option, field_name, values in (("start_jobs", "start_job", start_jobs), ("loads", "target_load", loads),
                                       ("seeds", "seed", seeds)):
        if not values:
            raise ConfigError(option, "no value given")
        twice = sorted({v for v in values if list(values).count(v) > 1})
        if twice:
            raise ConfigError(option, f"{', '.join(f'{v:g}' for v in twice)} given more than once")
        for v in values:
            try:
                dataclasses.replace(base, **{field_name: v})
            except ConfigError as exc:
                raise ConfigError(option, exc.reason) from None
    with tempfile.TemporaryDirectory(prefix="iadeep-sweep-check-") as tmp:
        last = dataclasses.replace(base, start_job=max(start_jobs), out=tmp)
        try:
            build_workload(last, paths["trace"], paths["throughputs"])
        except (ValueError, TraceFormatError) as exc:
            raise ConfigError("start_jobs", f"the window starting at job {last.start_job} cannot be built: "
                                            f"{one_line(exc)}") from None


def sweep_table(rows: list[dict], reference: str = "iadeep") -> pd.DataFrame:
    """The ``sweep.csv`` table of :func:`run_setting` rows, with ``avg_jct_vs_<reference>``."""
    df = pd.DataFrame(rows)
    if reference in set(df["policy"]):
        ref = df[df["policy"] == reference].set_index("setting")["avg_jct_s"]
        df[f"avg_jct_vs_{reference}"] = df["avg_jct_s"] / df["setting"].map(ref)
    return df


def run_sweep(base: ExperimentConfig, start_jobs: Sequence[int], loads: Sequence[float], seeds: Sequence[int],
              reference: str = "iadeep", on_setting: Callable[[str], None] | None = None, label: str = "",
              write: bool = True) -> pd.DataFrame:
    """Run ``base`` for every (start job, target load, seed); returns the ``sweep.csv`` table.

    Each setting is named ``<label><start>-<load>-<seed>`` and writes its files under
    ``<base.out>/<setting>/``; ``write=False`` skips ``sweep.csv`` (for callers that combine sweeps).
    """
    rows = []
    paths = fetch_inputs(base, progress=False)
    for start, load, seed in itertools.product(start_jobs, loads, seeds):
        if on_setting:
            on_setting(f"{label}{start}-{load:g}-{seed}")
        rows += run_setting(base, paths, start, load, seed, label)
    df = sweep_table(rows, reference)
    if write:
        out = Path(base.out)
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "sweep.csv", index=False)
    return df


def write_sweep_files(rows: list[dict], out: str | Path, reference: str = "iadeep") -> dict[str, Any]:
    """``sweep.csv``, ``sweep.png`` (when ``reference`` was run) and ``guard.json`` of ``rows`` (the
    :func:`run_setting` rows of every setting) into ``out``; what the Airflow DAG ``iadeep_sweep``
    writes at its end. ``guard.json`` is strict JSON (:func:`iadeep.report.write_json`: an undefined
    figure is ``null``, with its reason), as the CLI writes it.

    Returns:
        ``{"out": str, "rows": n, "guard": the guard figures}``.
    """
    from iadeep.report import write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df = sweep_table(rows, reference)
    df.to_csv(out / "sweep.csv", index=False)
    if f"avg_jct_vs_{reference}" in df:
        plot_sweep(df, out / "sweep.png", reference)
    guard = write_json(out / "guard.json", guard_figures(df, reference))
    return {"out": str(out), "rows": len(df), "guard": guard}


def dedicated_floor(jobs: pd.DataFrame, include_censored: bool = False) -> float:
    """Mean dedicated run time (s) of the jobs the JCT statistics count (as
    :func:`iadeep.sim.summarise` selects them): the avg JCT of a cluster with no queueing and no
    interference. No policy's avg JCT can be lower on a cluster whose GPUs are no faster than the
    trace's: a job progresses at most at its dedicated speed (:func:`iadeep.goodput.progress` caps
    the rate at 1). NaN when no job counts."""
    keep = pd.Series(True, index=jobs.index)
    if "unschedulable" in jobs.columns:
        keep &= ~jobs["unschedulable"].astype(bool)
    if "censored" in jobs.columns and not include_censored:
        keep &= ~jobs["censored"].astype(bool)
    return float(jobs.loc[keep, "duration_s"].mean()) if keep.any() else float("nan")


#: The robustness goal of issue 9: iadeep's avg JCT over the better packing baseline's (antman,
#: gandiva) at most 1.0 on every setting and 0.8 at the median; over exclusive's at most 0.5 everywhere.
GUARD_GOALS = {"worst_vs_packing": 1.0, "median_vs_packing": 0.8, "worst_vs_exclusive": 0.5}
GUARD_FLAG = 1.05
"""A setting whose ratio to the better packing baseline exceeds this is named (``above_packing``)."""


def guard_figures(df: pd.DataFrame, policy: str = "iadeep", packing: Sequence[str] = ("antman", "gandiva"),
                  exclusive: str = "exclusive") -> dict[str, int | float | str | None]:
    """The sweep's guard against collapse: ``policy``'s avg JCT relative to the better packing baseline.

    Args:
        df: the ``sweep.csv`` table (:func:`run_sweep`).

    Returns:
        ``worst_vs_packing`` (max over settings of avg JCT / min(packing baselines' avg JCT)),
        ``worst_setting``, ``median_vs_packing``, ``worst_vs_exclusive`` (max of avg JCT /
        exclusive's), ``floor_vs_exclusive`` (max over settings of the dedicated floor /
        exclusive's avg JCT: where it exceeds the exclusive goal, no policy can meet that goal on
        that setting, see :func:`dedicated_floor`), ``unreachable_vs_exclusive`` (those settings,
        comma-separated), ``above_packing`` (the settings above :data:`GUARD_FLAG` x the better
        packing baseline, worst first, as ``"<setting> <ratio>"`` comma-separated; empty: none),
        ``settings`` (count), and ``met`` (``"yes"``/``"no"`` against
        :data:`GUARD_GOALS`); a figure is ``None`` when its policies were not run.
    """
    table = df.pivot(index="setting", columns="policy", values="avg_jct_s")
    out: dict[str, int | float | str | None] = {"settings": len(table), "worst_vs_packing": None, "worst_setting": None,
                                          "median_vs_packing": None, "worst_vs_exclusive": None,
                                          "floor_vs_exclusive": None, "unreachable_vs_exclusive": None, "above_packing": None,
                                          "met": None}
    if policy not in table:
        return out
    base = [p for p in packing if p in table]
    ratio = table[policy] / table[base].min(axis=1) if base else None
    if ratio is not None and ratio.notna().any():  # undefined everywhere (no job counted): no figures
        out.update(worst_vs_packing=float(ratio.max()), worst_setting=str(ratio.idxmax()),
                   median_vs_packing=float(ratio.median()),
                   above_packing=", ".join(f"{s} {r:.2f}" for s, r in ratio.sort_values(ascending=False).items()
                                           if r > GUARD_FLAG))
    if exclusive in table:
        out["worst_vs_exclusive"] = float((table[policy] / table[exclusive]).max())
        if "avg_dedicated_s" in df.columns:
            floor = df[df["policy"] == exclusive].set_index("setting")["avg_dedicated_s"] / table[exclusive]
            out["floor_vs_exclusive"] = float(floor.max())
            out["unreachable_vs_exclusive"] = ",".join(floor.index[floor > GUARD_GOALS["worst_vs_exclusive"]])
    figures = [(out[k], goal) for k, goal in GUARD_GOALS.items()]
    if all(v is not None for v, _ in figures):
        out["met"] = "yes" if all(v <= goal for v, goal in figures) else "no"
    return out


def plot_sweep(df: pd.DataFrame, path: Path, reference: str = "iadeep") -> Path:
    """Grouped bars: each policy's avg JCT / the reference's, per setting (log scale; > 1 = reference wins)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    col = f"avg_jct_vs_{reference}"
    table = df.pivot(index="setting", columns="policy", values=col).reindex(df["setting"].unique())
    others = [p for p in table.columns if p != reference]
    x = np.arange(len(table))
    width = 0.8 / max(len(others), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(table)), 4.0))
    for k, name in enumerate(others):
        ax.bar(x + (k - (len(others) - 1) / 2) * width, table[name], width, label=name)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter

    ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
    ax.set_xticks(x, table.index, rotation=60, ha="right", fontsize=8)
    ax.set_xlabel("setting: start job - target load - seed")
    ax.set_ylabel(f"avg JCT / {reference}'s (log)")
    ax.set_title(f"Above 1: {reference} is faster")
    if others:  # a sweep of the reference alone has no bars to name
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
