"""The scheduled regression check: fixed simulator experiments compared with a stored baseline.

A regression run simulates every policy on fixed trace windows and seeds
(:func:`iadeep.experiment._sweep.run_setting`), then :func:`compare` checks each (setting, policy,
metric) against the baseline: all metrics here are lower-is-better (seconds), and a value more than
``tolerance`` (relative) above the baseline's is a regression. :func:`record` appends the run to
``history.csv``, redraws ``trend.png`` (each policy's metric, averaged over the settings, per run)
and writes ``baseline.json`` when there is none yet (the first run sets the baseline; a later one
replaces it only when asked, e.g. after an intended change).

A baseline holds only for the experiment it measured: :func:`check_baseline` refuses a run whose
jobs per window or target load differ from the baseline's (the same setting name would compare
different workloads), or whose settings the baseline has none of (nothing would be compared). A
run with ``policy_options`` is a trial of a parameter change: it is compared and recorded in the
history (with its options), but never becomes the baseline, which holds the code's defaults.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RegressionSpec", "check_baseline", "compare", "record", "load_baseline", "draw_seed_of", "record_draw"]

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
        policy_options: per policy (one of ``policies``), constructor arguments on top of the defaults
            (names checked against the policy's constructor).

    Raises:
        ValueError: (on construction) a negative tolerance, an unknown metric, an empty list, or
            an unknown policy, or ``policy_options`` naming a policy not simulated or an argument its
            constructor lacks (:meth:`check_policy_values` tries the values).
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
        self._check_policy_options()

    def _check_policy_options(self) -> None:
        import inspect

        from iadeep.policy import POLICIES

        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"policies: unknown {unknown}; known: {', '.join(POLICIES)}")
        for name, options in self.policy_options.items():
            if name not in self.policies:
                raise ValueError(f"policy_options: {name!r} is not among the policies simulated "
                                 f"({', '.join(self.policies)})")
            if not isinstance(options, dict):
                raise ValueError(f"policy_options[{name!r}]: expected an object of constructor arguments, got {options!r}")
            params = [p for p in inspect.signature(POLICIES[name].__init__).parameters if p not in ("self", "model", "_")]
            bad = sorted(set(options) - set(params))
            if bad:
                raise ValueError(f"policy_options[{name!r}]: unknown arguments {bad}; {name} takes: "
                                 f"{', '.join(params) or 'none'}")

    def check_policy_values(self, throughputs: str | Path, gpu_type: str = "v100") -> None:
        """Build each policy of :attr:`policy_options` once with its options, before any simulation.

        Raises:
            ValueError: a value its constructor refuses (``{"colocation_limit": "two"}``); the
                message names the policy and the options.
        """
        from iadeep.interference import InterferenceModel
        from iadeep.policy import make_policy

        if not self.policy_options:
            return
        model = InterferenceModel.from_file(throughputs, gpu_type)
        for name, options in self.policy_options.items():
            try:
                make_policy(name, model, **options)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"policy_options[{name!r}] = {json.dumps(options)}: {exc}") from None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RegressionSpec:
        """From JSON (the DAG's params); lists become tuples."""
        known = set(cls.__dataclass_fields__)
        bad = set(d) - known
        if bad:
            raise ValueError(f"unknown regression parameters {sorted(bad)}; known: {', '.join(sorted(known))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def load_baseline(directory: Path) -> dict[str, Any] | None:
    """``baseline.json`` of ``directory`` or ``None`` when there is none.

    Raises:
        ValueError: the file is not a JSON object with ``results`` (the message names the file:
            repair or delete it, or replace it with ``update_baseline``).
    """
    from iadeep._files import read_json

    path = Path(directory) / "baseline.json"
    if not path.exists():
        return None
    doc = read_json(path, "regression baseline")
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise ValueError(f"{path}: not a regression baseline (a JSON object with 'results'); delete it or run with "
                         "update_baseline: true to write a new one")
    return doc


#: Spec fields that must equal the baseline's: the same setting name with other values is another experiment.
BASELINE_FIELDS = ("jobs", "target_load")


def check_baseline(baseline: dict[str, Any] | None, spec: RegressionSpec, settings: list[str]) -> None:
    """Refuse to compare with a baseline of another experiment.

    Args:
        baseline: ``baseline.json`` (:func:`load_baseline`) or ``None`` (nothing to check).
        settings: this run's setting names (``<start>-<load>-<seed>``).

    Raises:
        ValueError: the baseline's ``jobs`` or ``target_load`` differ from the spec's, or the baseline
            has no (setting, policy) of this run; the message names the fields and says how to go on
            (``update_baseline: true`` or another regression folder).
    """
    if not baseline:
        return
    recorded = baseline.get("spec") or {}
    fixes = "set update_baseline: true to replace it, or give this experiment its own regression_dir"
    diff = [f"{k} {recorded[k]!r} (this run: {getattr(spec, k)!r})" for k in BASELINE_FIELDS
            if k in recorded and recorded[k] != getattr(spec, k)]
    if diff:
        raise ValueError(f"baseline.json (run {baseline.get('run_id')!r}) measured another experiment: "
                         + ", ".join(diff) + f"; {fixes}")
    mine = {f"{setting}/{policy}" for setting in settings for policy in spec.policies}
    if not mine & set(baseline.get("results", {})):
        known = sorted(baseline.get("results", {}))
        raise ValueError(f"baseline.json (run {baseline.get('run_id')!r}) has none of this run's settings and policies "
                         f"({', '.join(sorted(mine))}; it has {', '.join(known) or 'none'}): nothing would be "
                         f"compared; {fixes}")


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
    (or replace it when ``update_baseline``). A trial (``spec.policy_options`` set) never writes the
    baseline; its rows carry the options in the history's ``policy_options`` column (JSON).

    Returns:
        ``{"history": path, "trend": path, "baseline": path, "baseline_written": bool, "runs": n}``.

    Raises:
        ValueError: ``update_baseline`` with ``policy_options`` (the baseline holds the defaults).
    """
    import pandas as pd

    if update_baseline and spec.policy_options:
        raise ValueError("update_baseline with policy_options: the baseline holds the policies' defaults; change the "
                         "defaults in the code, then update the baseline with a run without policy_options")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bad = {(r["setting"], r["policy"]) for r in regressions}
    hist = pd.DataFrame([{"run_id": run_id, **{k: row[k] for k in ("setting", "policy")},
                          **{m: row.get(m) for m in METRICS}, "regressed": (row["setting"], row["policy"]) in bad,
                          "policy_options": json.dumps(spec.policy_options[row["policy"]], sort_keys=True)
                          if row["policy"] in spec.policy_options else ""}
                         for row in rows])
    path = directory / "history.csv"
    if path.is_file():
        hist = pd.concat([pd.read_csv(path), hist], ignore_index=True)
    hist.to_csv(path, index=False)
    written = False
    baseline_path = directory / "baseline.json"
    if update_baseline or (not baseline_path.is_file() and not spec.policy_options):
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


def draw_seed_of(logical_date: Any) -> int:
    """The seed of a run's drawn settings: its logical date as ``YYYYMMDD`` (a new draw every day,
    the same one when a day's run is repeated)."""
    return int(f"{logical_date:%Y%m%d}")


def record_draw(directory: Path, rows: list[dict[str, Any]], *, seed: int, run_id: str) -> dict[str, Any]:
    """Append the guard of one day's drawn settings to ``draws.csv`` in ``directory`` and write its
    rows to ``draws/<seed>.csv``; returns the guard figures
    (:func:`iadeep.experiment.guard_figures`, with ``seed`` and ``run_id``).

    The drawn settings differ every day, so they have no baseline: the guard's history shows a
    change of the policy that hurts settings nobody fixed (a rising ``worst_vs_packing``).
    """
    import pandas as pd

    from iadeep.experiment import guard_figures, sweep_table

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "draws").mkdir(exist_ok=True)
    df = sweep_table(rows)
    df.to_csv(directory / "draws" / f"{seed}.csv", index=False)
    guard = {"run_id": run_id, "seed": seed, **guard_figures(df)}
    history = directory / "draws.csv"
    line = pd.DataFrame([guard])
    if history.exists():
        line = pd.concat([pd.read_csv(history), line], ignore_index=True)
    line.to_csv(history, index=False)
    return guard
