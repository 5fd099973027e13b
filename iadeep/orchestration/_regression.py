"""The scheduled regression check: fixed simulator experiments compared with a stored baseline.

A regression run simulates every policy on fixed trace windows and seeds
(:func:`iadeep.experiment._sweep.run_setting`), then :func:`compare` checks each (setting, policy,
metric) against the baseline: all metrics here are lower-is-better (seconds), and a value more than
``tolerance`` (relative) above the baseline's is a regression. :func:`record` appends the run to
``history.csv``, redraws ``trend.png`` (each policy's metric, averaged over the settings, per run)
and writes ``baseline.json`` when there is none yet (the first run sets the baseline; a later one
replaces it only when asked, e.g. after an intended change).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RegressionSpec", "compare", "record", "load_baseline"]

METRICS = ("avg_jct_s", "p99_jct_s", "makespan_s")


@dataclass(frozen=True)
class RegressionSpec:
    """What the regression run simulates and how strictly it compares.

    Attributes:
        start_jobs: trace windows (first job of each; Philly).
        seeds: seeds of the workload mix.
        target_load: mean offered load of every window.
        jobs: jobs per window.
        policies: policies simulated.
        metrics: compared metrics (lower is better, seconds).
        tolerance: allowed relative increase over the baseline (0.05 = 5 %).
        policy_options: per policy, constructor arguments on top of the defaults.
    """

    start_jobs: tuple[int, ...] = (40_000, 60_000)
    seeds: tuple[int, ...] = (0,)
    target_load: float = 1.5
    jobs: int = 120
    policies: tuple[str, ...] = ("iadeep", "exclusive", "antman", "gandiva")
    metrics: tuple[str, ...] = METRICS
    tolerance: float = 0.05
    policy_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        unknown = set(self.metrics) - set(METRICS)
        if unknown:
            raise ValueError(f"unknown metrics {sorted(unknown)}; known: {', '.join(METRICS)}")
        if not self.start_jobs or not self.seeds or not self.policies:
            raise ValueError("start_jobs, seeds and policies must not be empty")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RegressionSpec:
        """From JSON (the DAG's params); lists become tuples."""
        known = set(cls.__dataclass_fields__)
        bad = set(d) - known
        if bad:
            raise ValueError(f"unknown regression parameters {sorted(bad)}; known: {', '.join(sorted(known))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def load_baseline(directory: Path) -> dict[str, Any] | None:
    """``baseline.json`` of ``directory`` or ``None``."""
    path = Path(directory) / "baseline.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _key(row: dict[str, Any]) -> str:
    return f"{row['setting']}/{row['policy']}"


def compare(rows: list[dict[str, Any]], baseline: dict[str, Any] | None, spec: RegressionSpec) -> list[dict[str, Any]]:
    """The regressions of ``rows`` (one per setting and policy) against ``baseline``.

    Returns:
        one entry per (setting, policy, metric) whose value exceeds ``baseline x (1 + tolerance)``:
        ``{"setting", "policy", "metric", "baseline", "value", "change"}`` (change relative); empty
        when there is no baseline or nothing regressed. A setting missing from the baseline is new,
        not a regression.
    """
    if not baseline:
        return []
    base = baseline.get("results", {})
    out = []
    for row in rows:
        ref = base.get(_key(row))
        if not ref:
            continue
        for m in spec.metrics:
            old, new = float(ref.get(m, math.nan)), float(row.get(m, math.nan))
            if math.isnan(old) or math.isnan(new):
                continue
            if new > old * (1.0 + spec.tolerance) + 1e-9:
                out.append({"setting": row["setting"], "policy": row["policy"], "metric": m, "baseline": old,
                            "value": new, "change": new / old - 1.0 if old else math.inf})
    return out


def record(directory: Path, rows: list[dict[str, Any]], regressions: list[dict[str, Any]], *, run_id: str,
           spec: RegressionSpec, update_baseline: bool = False) -> dict[str, Any]:
    """Append the run to ``history.csv``, redraw ``trend.png``, write the baseline when missing
    (or replace it when ``update_baseline``).

    Returns:
        ``{"history": path, "trend": path, "baseline": path, "baseline_written": bool, "runs": n}``.
    """
    import pandas as pd

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bad = {(r["setting"], r["policy"]) for r in regressions}
    hist = pd.DataFrame([{"run_id": run_id, **{k: row[k] for k in ("setting", "policy")},
                          **{m: row.get(m) for m in METRICS}, "regressed": (row["setting"], row["policy"]) in bad}
                         for row in rows])
    path = directory / "history.csv"
    if path.is_file():
        hist = pd.concat([pd.read_csv(path), hist], ignore_index=True)
    hist.to_csv(path, index=False)
    written = False
    baseline_path = directory / "baseline.json"
    if update_baseline or not baseline_path.is_file():
        doc = {"run_id": run_id, "spec": {k: v for k, v in spec.__dict__.items() if k != "policy_options"},
               "results": {_key(r): {m: r.get(m) for m in METRICS} for r in rows}}
        baseline_path.write_text(json.dumps(doc, indent=2, default=list) + "\n")
        written = True
    trend = plot_trend(hist, directory / "trend.png", spec.metrics[0])
    return {"history": str(path), "trend": str(trend), "baseline": str(baseline_path), "baseline_written": written,
            "runs": int(hist["run_id"].nunique())}


def plot_trend(hist: pd.DataFrame, path: Path, metric: str = "avg_jct_s") -> Path:
    """Each policy's ``metric`` (mean over settings) per run, runs in order; regressed runs marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = list(dict.fromkeys(hist["run_id"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(order)), 4.0))
    for policy, g in hist.groupby("policy", sort=True):
        by_run = g.groupby("run_id", sort=False).agg(value=(metric, "mean"), regressed=("regressed", "any")).reindex(order)
        x = [order.index(r) for r in by_run.index]
        ax.plot(x, by_run["value"], marker="o", label=policy)
        bad = by_run["regressed"].fillna(False).astype(bool).to_numpy()
        ax.scatter([xi for xi, b in zip(x, bad) if b], by_run["value"][bad], s=120, facecolors="none",
                   edgecolors="red", zorder=3)
    ax.set_xticks(range(len(order)), order, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(f"{metric} (mean over settings)")
    ax.set_title("iadeep regression: trend (red circles: regressed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
