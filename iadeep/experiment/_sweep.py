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

import pandas as pd

from iadeep.experiment._config import ExperimentConfig
from iadeep.experiment._steps import build_workload, fetch_inputs, run_policy

__all__ = ["run_sweep", "plot_sweep"]


def run_sweep(base: ExperimentConfig, start_jobs: Sequence[int], loads: Sequence[float], seeds: Sequence[int],
              reference: str = "iadeep", on_setting: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Run ``base`` for every (start job, target load, seed); returns the ``sweep.csv`` table.

    Each setting writes its files under ``<base.out>/<start>-<load>-<seed>/``.
    """
    rows = []
    paths = fetch_inputs(base, progress=False)
    for start, load, seed in itertools.product(start_jobs, loads, seeds):
        setting = f"{start}-{load:g}-{seed}"
        if on_setting:
            on_setting(setting)
        cfg = dataclasses.replace(base, start_job=start, target_load=load, seed=seed, out=str(Path(base.out) / setting))
        workload, meta = build_workload(cfg, paths["trace"], paths["throughputs"])
        for name in cfg.policies:
            s = run_policy(cfg, name, workload, paths["throughputs"]).summary()
            rows.append({"setting": setting, "start_job": start, "target_load": load, "seed": seed, "policy": name,
                         "offered_load_peak": meta["offered_load_peak"], **s})
    df = pd.DataFrame(rows)
    if reference in set(df["policy"]):
        ref = df[df["policy"] == reference].set_index("setting")["avg_jct_s"]
        df[f"avg_jct_vs_{reference}"] = df["avg_jct_s"] / df["setting"].map(ref)
    out = Path(base.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "sweep.csv", index=False)
    return df


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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
