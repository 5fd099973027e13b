"""PNG plots of an experiment: JCT CDF per policy, metrics normalised to iadeep, queue length over time."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from iadeep.sim import SimResult  # noqa: E402

__all__ = ["plot_jct_cdf", "plot_normalised_bars", "plot_queue_length"]

_HOURS = 3600.0


def plot_jct_cdf(results: Mapping[str, SimResult], path: Path) -> Path:
    """CDF of JCT (hours, log x axis) per policy."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, r in results.items():
        jct = np.sort(r.jobs["jct_s"].to_numpy()) / _HOURS
        ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name, lw=1.8)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Job completion time CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return _save(fig, path)


def plot_normalised_bars(summaries: Mapping[str, Mapping[str, float]], path: Path, reference: str = "iadeep",
                         metrics: tuple[str, ...] = ("avg_jct_s", "p99_jct_s", "makespan_s", "mean_slowdown")) -> Path:
    """Grouped bars of each metric divided by ``reference``'s (as the IADeep paper's Fig. 7a)."""
    names = list(summaries)
    ref = summaries.get(reference) or summaries[names[0]]
    x = np.arange(len(metrics))
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    for k, name in enumerate(names):
        vals = [summaries[name][m] / ref[m] if ref[m] else np.nan for m in metrics]
        bars = ax.bar(x + (k - (len(names) - 1) / 2) * width, vals, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, [m.removesuffix("_s").replace("_", " ") for m in metrics])
    ax.set_ylabel(f"normalised to {reference if reference in summaries else names[0]}")
    ax.set_title("Lower is better")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_queue_length(results: Mapping[str, SimResult], path: Path) -> Path:
    """Queued jobs over time (hours) per policy, as steps."""
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for name, r in results.items():
        tl = r.timeline
        if len(tl):
            ax.step(tl["t_s"] / _HOURS, tl["queue_len"], where="post", label=name, lw=1.2)
    ax.set_xlabel("time since first submission (hours)")
    ax.set_ylabel("queued jobs")
    ax.set_title("Queue length over time")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
