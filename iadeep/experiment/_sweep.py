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

import numpy as np
import pandas as pd

from iadeep.experiment._config import ExperimentConfig
from iadeep.experiment._steps import build_workload, fetch_inputs, run_policy

__all__ = ["check_grid", "run_sweep", "run_setting", "run_draw", "draw_inputs", "CEILING_POLICIES", "guard_lines", "headroom_captured", "sweep_table", "plot_sweep", "guard_figures", "dedicated_floor", "write_sweep_files",
           "GUARD_GOALS", "noise_seed", "by_chance"]


def run_setting(base: ExperimentConfig, paths: dict[str, str], start: int, load: float, seed: int, label: str = "",
                options: dict[str, dict] | None = None, name: str | None = None, fields: dict[str, Any] | None = None,
                oracle: bool = False, ceiling: str | None = None, repeats: int = 1) -> list[dict]:
    """One setting of a sweep: every policy of ``base`` on the window from job ``start`` at target
    load ``load`` with ``seed``; files under ``<base.out>/<name>/``.

    Args:
        paths: ``{"trace": ..., "throughputs": ...}`` from :func:`fetch_inputs`.
        options: per policy, extra constructor arguments (:func:`run_policy`).
        name: the setting's name (default ``<label><start>-<load>-<seed>``).
        fields: other :class:`ExperimentConfig` fields of the setting (a drawn setting's trace,
            cluster and mix: :class:`iadeep.experiment.DrawnSetting`), also written into its rows.
        oracle: also run iadeep with the measured table as its predictor (``predictor="oracle"``),
            as the policy row ``iadeep@oracle`` (files under ``<name>/oracle/``).
        ceiling: a zero-interference table (:func:`iadeep.interference.without_interference`):
            run iadeep (oracle), antman and gandiva on it too and add ``ceiling_avg_jct_s``, the best
            of them, to every row (files under ``<name>/ceiling/``).
        repeats: runs of every policy, each with its own measurement noise (:func:`noise_seed`;
            the jobs are the same): a row's metrics are their means, ``avg_jct_lo_s`` and
            ``avg_jct_hi_s`` the least and the greatest avg JCT of one run (files of run ``r >= 1``
            under ``<name>/noise-<r>/``; the ceiling runs once).

    Returns:
        one ``sweep.csv`` row per policy (setting, its fields, policy, summary metrics, ``repeats``,
        ``avg_jct_lo_s``, ``avg_jct_hi_s``).

    Raises:
        ValueError: ``repeats`` below 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    setting = name or f"{label}{start}-{load:g}-{seed}"
    cfg = dataclasses.replace(base, start_job=start, target_load=load, seed=seed, out=str(Path(base.out) / setting),
                              **(fields or {}))
    workload, meta = build_workload(cfg, paths["trace"], paths["throughputs"])
    runs: list[tuple[str, ExperimentConfig, str, dict | None]] = [
        (policy, cfg, policy, (options or {}).get(policy)) for policy in cfg.policies]
    if oracle and "iadeep" in cfg.policies:
        runs.append(("iadeep@oracle", dataclasses.replace(cfg, out=str(cfg.out_dir / "oracle")), "iadeep",
                     {**((options or {}).get("iadeep") or {}), "predictor": "oracle"}))
    rows = []
    for label_, run_cfg, policy, opts in runs:
        summaries = []
        for r in range(repeats):
            cfg_r = run_cfg if r == 0 else dataclasses.replace(run_cfg, noise_seed=noise_seed(seed, r),
                                                               out=str(run_cfg.out_dir / f"noise-{r}"))
            result = run_policy(cfg_r, policy, workload, paths["throughputs"], options=opts)
            summaries.append(result.summary(cfg.include_censored))
        runs_jct = [x["avg_jct_s"] for x in summaries]
        rows.append({"setting": setting, "start_job": start, "target_load": load, "seed": seed, **(fields or {}),
                     "policy": label_, "offered_load_peak": meta["offered_load_peak"],
                     "avg_dedicated_s": dedicated_floor(result.jobs, cfg.include_censored),
                     **(summaries[0] if repeats == 1 else {k: float(np.mean([x[k] for x in summaries])) for k in summaries[0]}),
                     "repeats": repeats, "avg_jct_lo_s": float(np.min(runs_jct)), "avg_jct_hi_s": float(np.max(runs_jct))})
    if ceiling:
        zero = dataclasses.replace(cfg, out=str(cfg.out_dir / "ceiling"))
        best = float("nan")
        for policy in CEILING_POLICIES:
            opts = {"predictor": "oracle"} if policy == "iadeep" else None
            jct = run_policy(zero, policy, workload, ceiling, options=opts).summary(cfg.include_censored)["avg_jct_s"]
            best = jct if not best <= jct else best  # NaN-safe minimum
        for row in rows:
            row["ceiling_avg_jct_s"] = best
    return rows


def noise_seed(seed: int, repeat: int) -> int:
    """The measurement-noise seed of a setting's ``repeat``-th run (:attr:`ExperimentConfig.noise_seed`):
    ``seed`` itself for run 0 (a sweep of one run is the plain experiment), otherwise the first
    32-bit word of numpy's ``SeedSequence((seed, repeat))``, so that no two runs of a sweep share
    a noise stream."""
    if repeat == 0:
        return seed
    return int(np.random.SeedSequence((seed, repeat)).generate_state(1)[0])


#: The sharing policies whose best avg JCT on the zero-interference table is a setting's ceiling.
CEILING_POLICIES = ("iadeep", "antman", "gandiva")


def _run_drawn(args: tuple) -> list[dict]:
    """:func:`run_setting` of one drawn setting (a process pool's task: arguments as one tuple)."""
    base, paths, setting, queue, oracle, ceiling, repeats = args
    fields = setting.fields()
    start, load, seed = fields.pop("start_job"), fields.pop("target_load"), fields.pop("seed")
    name = f"{queue}:{setting.name}" if queue else setting.name
    rows = run_setting(base, paths, start, load, seed, name=name, fields=fields, oracle=oracle, ceiling=ceiling,
                       repeats=repeats)
    return [{**row, "queue": base.queue} for row in rows]


def draw_inputs(base: ExperimentConfig, n: int, seed: int, cache_dir: str | Path | None = None):
    """``n`` settings drawn from ``seed`` for ``base`` (:func:`iadeep.experiment.draw_settings`,
    windows of ``base.jobs`` jobs; ``n = 0``: none) and a function giving a setting's inputs
    (:func:`fetch_inputs` of its trace, once per trace; ``cache_dir`` as there).

    Returns:
        ``(settings, inputs_of)``.
    """
    from iadeep.experiment._draw import draw_settings
    from iadeep.experiment._steps import count_jobs

    fetched: dict[str, dict[str, str]] = {}

    def inputs(setting: Any) -> dict[str, str]:
        trace = setting if isinstance(setting, str) else setting.trace
        if trace not in fetched:
            fetched[trace] = fetch_inputs(dataclasses.replace(base, trace=trace), progress=False, cache_dir=cache_dir)
        return fetched[trace]

    def window_count(trace: str, vc: str | None, nodes: int, gpus: int) -> int:
        cfg = dataclasses.replace(base, trace=trace, virtual_cluster=vc, nodes=nodes, gpus_per_node=gpus,
                                  mix="gavel" if trace == "openb" else "iadeep")
        paths = inputs(trace)
        return count_jobs(cfg, paths["trace"], paths["throughputs"])

    return (draw_settings(n, seed, window_count, base.jobs or 400) if n else []), inputs


def run_draw(bases: dict[str, ExperimentConfig], settings: Sequence[Any], paths_of: Callable[[Any], dict[str, str]],
             oracle: bool = False, ceiling: str | None = None, workers: int = 1,
             on_done: Callable[[str], None] | None = None, reference: str = "iadeep", repeats: int = 1) -> pd.DataFrame:
    """Every drawn setting under every queue model of ``bases``; returns the ``sweep.csv`` table.

    Args:
        bases: queue model -> the experiment every setting starts from (policies, predictor, ...).
        settings: :class:`iadeep.experiment.DrawnSetting` items (:func:`iadeep.experiment.draw_settings`).
        paths_of: a setting -> its inputs (:func:`fetch_inputs` of its trace).
        oracle, ceiling, repeats: as :func:`run_setting`.
        workers: settings run in this many processes at once (1: in this process); the table is
            the same row for row whatever the number (each setting is its own deterministic run).
        on_done: called with each setting's name as it ends.

    Returns:
        the rows of every setting in draw order (queue models in ``bases``' order within one), with
        ``queue`` and the setting's fields as columns.
    """
    label = len(bases) > 1
    tasks = [(b, paths_of(s), s, q if label else "", oracle, ceiling, repeats) for s in settings for q, b in bases.items()]
    parts: list[list[dict]] = [[] for _ in tasks]
    if workers <= 1:
        for i, task in enumerate(tasks):
            parts[i] = _run_drawn(task)
            if on_done:
                on_done(parts[i][0]["setting"])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
            futures = {pool.submit(_run_drawn, task): i for i, task in enumerate(tasks)}
            for future in as_completed(futures):
                parts[futures[future]] = future.result()
                if on_done:
                    on_done(parts[futures[future]][0]["setting"])
    return sweep_table([row for part in parts for row in part], reference)


def check_grid(base: ExperimentConfig, paths: dict[str, str], start_jobs: Sequence[int], loads: Sequence[float],
               seeds: Sequence[int]) -> None:
    """Check a sweep's grid before its first setting runs (the CLI and the Airflow DAG ``iadeep_sweep``).

    Every value is given once (``1`` and ``1.0`` are one load: the settings would repeat), every
    setting's configuration is valid, and the window of the largest start job can be built (one
    past the trace's end would otherwise fail after the other settings ran). That window is built
    in a temporary folder, so nothing is written into ``base.out``.

    Raises:
        iadeep._params.ConfigError: naming the grid's option (``start_jobs``, ``loads``, ``seeds``),
            or ``virtual_cluster`` when the trace has no such cluster.
    """
    import tempfile

    from iadeep._climain import one_line
    from iadeep._params import ConfigError
    from iadeep.traces import TraceFormatError, UnknownVirtualClusterError

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
        except UnknownVirtualClusterError as exc:
            raise ConfigError("virtual_cluster", one_line(exc)) from None
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
              write: bool = True, oracle: bool = False, ceiling: str | None = None, repeats: int = 1) -> pd.DataFrame:
    """Run ``base`` for every (start job, target load, seed); returns the ``sweep.csv`` table.

    Each setting is named ``<label><start>-<load>-<seed>`` and writes its files under
    ``<base.out>/<setting>/``; ``write=False`` skips ``sweep.csv`` (for callers that combine sweeps);
    ``oracle``, ``ceiling`` and ``repeats`` as :func:`run_setting`.
    """
    rows = []
    paths = fetch_inputs(base, progress=False)
    for start, load, seed in itertools.product(start_jobs, loads, seeds):
        if on_setting:
            on_setting(f"{label}{start}-{load:g}-{seed}")
        rows += run_setting(base, paths, start, load, seed, label, oracle=oracle, ceiling=ceiling, repeats=repeats)
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


#: The robustness goals, judged on a draw the policy was not designed on: iadeep's avg JCT over the
#: better packing baseline's (antman, gandiva) at most 1.02 on every setting and 0.85 at the median;
#: never above exclusive's (at most 1.0); at the median, at least 0.7 of the headroom to the
#: zero-interference ceiling captured (:func:`guard_figures`).
GUARD_GOALS = {"worst_vs_packing": 1.02, "median_vs_packing": 0.85, "worst_vs_exclusive": 1.0,
               "median_headroom_captured": 0.7}
GUARD_FLAG = 1.05
"""A setting whose ratio to the better packing baseline exceeds this is named (``above_packing``)."""
ORACLE_SLACK = 0.01
"""``oracle_worse`` names the settings where iadeep with perfect prediction is more than this
(relative) slower than with its learned predictor."""


HEADROOM_AT_LEAST = 0.01
"""A setting has headroom when its ceiling is at least this (relative) below the better packing
baseline; below that the share captured is a ratio of two noises and left out (NaN)."""


def headroom_captured(policy_s: pd.Series, packing_s: pd.Series, ceiling_s: pd.Series) -> pd.Series:
    """Share of the headroom to the ceiling a policy captures, per setting:
    ``(1 - policy/packing) / (1 - ceiling/packing)`` (1: as good as no interference at all;
    0: as the better packing baseline; negative: worse than it). NaN where the ceiling is less than
    :data:`HEADROOM_AT_LEAST` below packing (no headroom) or a figure is missing. Arguments: avg JCTs (s) indexed by
    setting."""
    room = 1.0 - ceiling_s / packing_s
    return ((1.0 - policy_s / packing_s) / room).where(room > HEADROOM_AT_LEAST)


def guard_figures(df: pd.DataFrame, policy: str = "iadeep", packing: Sequence[str] = ("antman", "gandiva"),
                  exclusive: str = "exclusive") -> dict[str, int | float | str | None]:
    """The sweep's guard against collapse: ``policy``'s avg JCT relative to the better packing baseline.

    Args:
        df: the ``sweep.csv`` table (:func:`run_sweep`, :func:`run_draw`); its optional columns
            ``ceiling_avg_jct_s`` and the policy ``<policy>@oracle`` add the headroom and predictor figures.

    Returns:
        ``worst_vs_packing`` (max over settings of avg JCT / min(packing baselines' avg JCT)),
        ``worst_setting``, ``median_vs_packing``, ``worst_vs_exclusive`` (max of avg JCT /
        exclusive's), ``floor_vs_exclusive`` (max over settings of the dedicated floor /
        exclusive's avg JCT, see :func:`dedicated_floor`: how far below exclusive any policy
        could be), ``above_packing`` (the settings above :data:`GUARD_FLAG` x the better packing baseline,
        worst first, as ``"<setting> <ratio>"`` comma-separated; empty: none),
        ``above_exclusive`` (the same for exclusive, above 1), ``median_headroom_captured``
        (:func:`headroom_captured`'s median over the settings with headroom) and
        ``ceiling_median_vs_packing``, ``oracle_worst_vs_packing`` / ``oracle_median_vs_packing``
        (the same ratios of ``<policy>@oracle``) and ``oracle_worse`` (settings where it is
        :data:`ORACLE_SLACK` slower than ``policy``, worst first), ``settings`` (count),
        ``repeats`` (runs a setting: :func:`run_setting`; the figures above are of their mean avg
        JCTs), with more than one run ``noise_band_median`` / ``noise_band_max`` /
        ``noise_band_setting`` (the greatest over the least avg JCT of one run of ``policy``: how
        far measurement noise alone moves one setting), ``oracle_worse_every_run`` (the settings
        where every run of ``<policy>@oracle`` is slower than every run of ``policy``, as
        ``oracle_worse`` names them; :func:`by_chance` says how often that happens without a
        difference) and ``oracle_better_every_run`` (how many settings the reverse), and
        ``met`` (against :data:`GUARD_GOALS`: ``"no"`` when a measured figure misses its goal,
        ``"yes"`` when every figure is measured and meets it, else ``None``); a figure is ``None``
        when its policies were not run.
    """
    table = df.pivot(index="setting", columns="policy", values="avg_jct_s")
    out: dict[str, int | float | str | None] = {
        "settings": len(table), "worst_vs_packing": None, "worst_setting": None, "median_vs_packing": None,
        "worst_vs_exclusive": None, "floor_vs_exclusive": None, "above_packing": None,
        "above_exclusive": None, "median_headroom_captured": None, "ceiling_median_vs_packing": None,
        "oracle_worst_vs_packing": None, "oracle_median_vs_packing": None, "oracle_worse": None,
        "repeats": _repeats(df), "noise_band_median": None, "noise_band_max": None, "noise_band_setting": None,
        "oracle_worse_every_run": None, "oracle_better_every_run": None, "met": None}
    if policy not in table:
        return out
    oracle = f"{policy}@oracle"
    base = [p for p in packing if p in table]
    best_packing = table[base].min(axis=1) if base else None
    ratio = table[policy] / best_packing if base else None
    if ratio is not None and ratio.notna().any():  # undefined everywhere (no job counted): no figures
        out.update(worst_vs_packing=float(ratio.max()), worst_setting=str(ratio.idxmax()),
                   median_vs_packing=float(ratio.median()), above_packing=_above(ratio, GUARD_FLAG))
        if "ceiling_avg_jct_s" in df.columns:
            ceiling = df.groupby("setting")["ceiling_avg_jct_s"].first().reindex(table.index)
            captured = headroom_captured(table[policy], best_packing, ceiling)
            if captured.notna().any():
                out["median_headroom_captured"] = float(captured.median())
            if ceiling.notna().any():
                out["ceiling_median_vs_packing"] = float((ceiling / best_packing).median())
        if oracle in table:
            by_oracle = table[oracle] / best_packing
            out.update(oracle_worst_vs_packing=float(by_oracle.max()), oracle_median_vs_packing=float(by_oracle.median()),
                       oracle_worse=_above(table[oracle] / table[policy], 1.0 + ORACLE_SLACK))
    if out["repeats"] > 1 and {"avg_jct_lo_s", "avg_jct_hi_s"} <= set(df.columns):  # with or without packing
        lo = df.pivot(index="setting", columns="policy", values="avg_jct_lo_s")
        hi = df.pivot(index="setting", columns="policy", values="avg_jct_hi_s")
        band = (hi[policy] / lo[policy]).dropna()
        if len(band):
            out.update(noise_band_median=float(band.median()), noise_band_max=float(band.max()),
                       noise_band_setting=str(band.idxmax()))
        if oracle in table:
            worse = lo[oracle] > hi[policy]  # its fastest run slower than the learned predictor's slowest
            out["oracle_worse_every_run"] = _above((table[oracle] / table[policy]).where(worse), 1.0)
            out["oracle_better_every_run"] = int((hi[oracle] < lo[policy]).sum())
    if exclusive in table:
        vs_excl = table[policy] / table[exclusive]
        out["worst_vs_exclusive"] = float(vs_excl.max())
        out["above_exclusive"] = _above(vs_excl, 1.0)
        if "avg_dedicated_s" in df.columns:
            floor = df[df["policy"] == exclusive].set_index("setting")["avg_dedicated_s"] / table[exclusive]
            out["floor_vs_exclusive"] = float(floor.max())
    if any(out[k] is not None and (out[k] < goal if k == "median_headroom_captured" else out[k] > goal)
           for k, goal in GUARD_GOALS.items()):  # decided by the figures measured, whatever was not
        out["met"] = "no"
    elif all(out[k] is not None for k in GUARD_GOALS):
        out["met"] = "yes"
    return out


def _repeats(df: pd.DataFrame) -> int:
    """Runs per setting and policy of a ``sweep.csv`` table (its ``repeats`` column; 1 without one)."""
    if "repeats" not in df.columns or not df["repeats"].notna().any():
        return 1
    return int(df["repeats"].max())


def by_chance(repeats: int) -> float:
    """The chance that every one of ``repeats`` runs of one variant is slower than every one of
    ``repeats`` runs of another when the two do not differ (all orders of the ``2 repeats`` runs
    equally likely): ``1 / C(2 repeats, repeats)``; 1/20 for 3 runs each (the exact one-sided
    p-value of the Mann-Whitney U test at U = 0)."""
    import math

    return 1.0 / math.comb(2 * repeats, repeats)


def guard_lines(guard: dict, queue: str, policies: Sequence[str]) -> list[str]:
    """The guard figures of one queue model as the lines ``iadeep experiment sweep`` prints."""
    if guard["worst_vs_packing"] is None:
        return [f"guard ({queue} queue): none: it compares iadeep with antman and gandiva, and neither ran"] \
            if "iadeep" in policies else []
    packing = [p for p in ("antman", "gandiva") if p in policies]
    against = "better of " + ", ".join(packing) if len(packing) > 1 else ", ".join(packing)
    excl = guard["worst_vs_exclusive"]
    captured = guard.get("median_headroom_captured")
    met = guard["met"] or "n/a, not every figure was measured (the others meet their goals)"
    goals = GUARD_GOALS
    n = guard["settings"]
    lines = [f"guard ({queue} queue, {n} setting{'' if n == 1 else 's'}): iadeep / {against}: worst {guard['worst_vs_packing']:.2f} "
             f"({guard['worst_setting']}), median {guard['median_vs_packing']:.2f}; worst vs exclusive "
             f"{'n/a (exclusive did not run)' if excl is None else f'{excl:.2f}'}; median headroom captured "
             f"{'n/a (no --ceiling)' if captured is None else f'{captured:.2f}'} (goals <= {goals['worst_vs_packing']}, "
             f"<= {goals['median_vs_packing']}, <= {goals['worst_vs_exclusive']}, >= {goals['median_headroom_captured']}: "
             f"met {met})"]
    if guard.get("oracle_worst_vs_packing") is not None:
        lines.append(f"  with perfect prediction (iadeep@oracle): worst {guard['oracle_worst_vs_packing']:.2f}, median "
                     f"{guard['oracle_median_vs_packing']:.2f}; slower than learned by over {ORACLE_SLACK:.0%} on: "
                     f"{guard['oracle_worse'] or 'none'}")
    k = guard.get("repeats") or 1
    if k > 1 and guard.get("noise_band_median") is not None:
        lines.append(f"  {k} runs a setting, each with its own measurement noise (figures: their means); one run's avg JCT "
                     f"spans x{guard['noise_band_median']:.2f} at the median setting, up to x{guard['noise_band_max']:.2f} "
                     f"({guard['noise_band_setting']})")
    if k > 1 and guard.get("oracle_worse_every_run") is not None:
        expected = guard["settings"] * by_chance(k)
        lines.append(f"  perfect prediction slower than learned in every run ({expected:.1f} settings expected by chance "
                     f"alone): {guard['oracle_worse_every_run'] or 'none'}; faster in every run: "
                     f"{guard['oracle_better_every_run']} setting{'' if guard['oracle_better_every_run'] == 1 else 's'}")
    if guard.get("above_packing"):
        lines.append(f"  above {GUARD_FLAG} x packing: {guard['above_packing']}")
    if guard.get("above_exclusive"):
        lines.append(f"  above exclusive: {guard['above_exclusive']}")
    return lines


def _above(ratio: pd.Series, limit: float) -> str:
    """``"<setting> <ratio>"`` of the settings whose ratio exceeds ``limit``, worst first, comma-separated."""
    return ", ".join(f"{s} {r:.2f}" for s, r in ratio.sort_values(ascending=False).items() if r > limit)


def plot_sweep(df: pd.DataFrame, path: Path, reference: str = "iadeep") -> Path:
    """Grouped bars: each policy's avg JCT / the reference's, per setting (log scale; > 1 = reference
    wins; with several runs a setting, their means, and lines from the least to the greatest run's
    avg JCT over the reference's mean, the reference's own runs in grey); with ``ceiling_avg_jct_s`` and both packing baselines in ``df``, a second panel below:
    the share of the headroom to the zero-interference ceiling the reference captures per setting
    (:func:`headroom_captured`) and its median."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter

    col = f"avg_jct_vs_{reference}"
    table = df.pivot(index="setting", columns="policy", values=col).reindex(df["setting"].unique())
    others = [p for p in table.columns if p != reference]
    jct = df.pivot(index="setting", columns="policy", values="avg_jct_s").reindex(table.index)
    packing = [p for p in ("antman", "gandiva") if p in jct]
    captured = None
    if "ceiling_avg_jct_s" in df.columns and packing and reference in jct:
        ceiling = df.groupby("setting")["ceiling_avg_jct_s"].first().reindex(table.index)
        captured = headroom_captured(jct[reference], jct[packing].min(axis=1), ceiling)
    x = np.arange(len(table))
    width = 0.8 / max(len(others), 1)
    spread = None  # with several runs a setting: each one's least and greatest avg JCT over the reference's mean
    if _repeats(df) > 1 and {"avg_jct_lo_s", "avg_jct_hi_s"} <= set(df.columns) and reference in jct:
        spread = {end: df.pivot(index="setting", columns="policy", values=f"avg_jct_{end}_s").reindex(table.index)
                  .div(jct[reference], axis=0) for end in ("lo", "hi")}
    panels = 2 if captured is not None else 1
    fig, axes = plt.subplots(panels, 1, figsize=(max(6.0, 0.3 * len(table) + 2.0), 4.0 * panels), sharex=True,
                             squeeze=False)
    ax = axes[0, 0]
    for k, name in enumerate(others):
        at = x + (k - (len(others) - 1) / 2) * width
        ax.bar(at, table[name], width, label=name)
        if spread is not None:
            lo, hi = spread["lo"][name], spread["hi"][name]
            ax.vlines(at, lo, hi, color="black", lw=0.7)
    if spread is not None:
        ax.vlines(x, spread["lo"][reference], spread["hi"][reference], color="grey", lw=3.0, alpha=0.6,
                  label=f"{reference}'s runs (black: each policy's runs)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
    ax.set_ylabel(f"avg JCT / {reference}'s (log)")
    ax.set_title(f"Above 1: {reference} is faster")
    if others:  # a sweep of the reference alone has no bars to name
        ax.legend(fontsize=8)
    if captured is not None:
        low = axes[1, 0]
        values = captured.clip(-1.0, 1.0)
        low.bar(x, values.fillna(0.0), 0.8, color=np.where(values.fillna(0.0) >= 0, "tab:green", "tab:red"))
        median = float(captured.median()) if captured.notna().any() else float("nan")
        low.axhline(0.0, color="black", lw=0.8)
        if median == median:
            low.axhline(median, color="tab:blue", lw=1.0, ls="--", label=f"median {median:.2f}")
            low.legend(fontsize=8)
        low.set_ylim(-1.05, 1.05)
        low.set_ylabel("headroom captured\n(1 = no interference, 0 = packing)")
    bottom = axes[-1, 0]
    bottom.set_xticks(x, table.index, rotation=70, ha="right", fontsize=7)
    bottom.set_xlabel("setting")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
