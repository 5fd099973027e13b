"""The plot of the services' series a live run's Prometheus recorded (:mod:`iadeep.experiment._prometheus`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_service_series"]


def plot_service_series(docs: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """One panel per series group of ``docs`` (policy -> :func:`iadeep.experiment._prometheus.collect_series`
    document), each policy's series against wall seconds since its run started.

    Raises:
        ValueError: ``docs`` is empty.
    """
    if not docs:
        raise ValueError("no series to plot")
    titles = list(dict.fromkeys(t for d in docs.values() for t in d["panels"]))
    cols = 2
    rows = (len(titles) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(10.0, 3.2 * rows), squeeze=False)
    for ax, title in zip(axes.flat, titles, strict=False):
        unit = ""
        for policy, doc in docs.items():
            panel = doc["panels"].get(title) or {}
            unit = panel.get("unit", unit)
            for label, points in (panel.get("series") or {}).items():
                ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.2, drawstyle="steps-post",
                        label=f"{policy}: {label}" if len(docs) > 1 else label)
        ax.set_title(title)
        ax.set_xlabel("wall time since the run's start (s)")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in list(axes.flat)[len(titles):]:
        ax.set_visible(False)
    fig.suptitle("Services' metrics (Prometheus)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
