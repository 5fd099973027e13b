"""A heatmap of a co-location profile: each job type's normalised throughput beside each partner."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from iadeep.training._profile import ProfileResult

__all__ = ["plot_profile"]


def plot_profile(result: "ProfileResult", path: str | Path) -> Path:
    """Write a PNG: cell ``(i, j)`` is job type ``i``'s co-located steps/s beside ``j`` divided by
    its isolated steps/s (1.0: no slowdown; 0 and a cross: the pair did not fit).

    Args:
        result: the profiler's result.
        path: the PNG to write.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = sorted(result.isolated)
    n = len(types)
    norm = np.zeros((n, n))
    for i, a in enumerate(types):
        for j, b in enumerate(types):
            own = result.colocated[(a, b)][0] if (a, b) in result.colocated else result.colocated[(b, a)][1]
            norm[i, j] = own / result.isolated[a]
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * n, 1.0 + 0.5 * n))
    image = ax.imshow(norm, vmin=0.0, vmax=1.0, cmap="viridis")
    labels = [f"{t.model} {t.batch_size}" for t in types]
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, "x" if norm[i, j] == 0 else f"{norm[i, j]:.2f}", ha="center", va="center", fontsize=6,
                    color="white" if norm[i, j] < 0.6 else "black")
    ax.set_xlabel("partner")
    ax.set_ylabel("job (normalised throughput)")
    ax.set_title(f"Co-location on {result.gpu_type}")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
