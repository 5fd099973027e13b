"""Simulator-live parity: the same trace slice, seed and cluster through both backends.

:func:`parity` compares two per-job tables (the simulator's and the kubernetes backend's, columns
of :data:`iadeep.sim.JOB_COLUMNS`) and :func:`run_compare` produces them and writes, per policy,
``parity-<policy>.csv`` (one row per job: placement GPU, co-location partners, start and JCT in
both) and ``parity.json`` / ``parity.md`` with the differences:

- avg JCT, p99 JCT and makespan, live relative to the simulator (``live / sim - 1``);
- ``partners_match``: the share of jobs whose set of co-location partners is the same in both;
- ``pairs_identical``: co-located pairs found in both over pairs found in either (Jaccard index
  of the two pair sets; 1.0 when neither co-located anything);
- ``placement_match``: the share of jobs that first started on the same node and GPU(s).

The live system runs on wall time: each wall second of latency is ``speedup`` emulated seconds.
To keep that apart from what the policy does, the report also gives

- ``harness``: the live run's overheads per job (medians and p90, wall and emulated seconds):
  how late each job arrived behind the arrival clock (``submit_lag``), arrival to the extender's
  bind (``bind_latency``, including any time the pod waited for GPUs), bind to the emulator
  starting the work (``start_lag``), and work done to the Job's ``Complete`` seen
  (``completion_lag``, which delays nothing: the GPUs are freed at the work's end);
- ``on_live_arrivals``: the simulator re-run on the arrival times the live run achieved
  (``sim-live-arrivals/``), with tuning trials as long as the live coordinator's rounds were
  (``trial_s`` = its mean round, wall s x speedup: a round's measurement window lasts as long as
  the machine takes, ``trial_s / speedup`` only on an idle one), compared with the live run: the
  difference left once the simulator is given the harness's arrival lag and trial length (what
  the policy, the queue and the other latencies make of it);
- ``arrivals_effect``: the simulator on the live arrivals relative to the simulator on the
  trace's: what the submission lag alone changes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iadeep.experiment._config import ExperimentConfig

__all__ = ["parity", "parity_table", "run_compare", "write_parity"]


def _sets(col: pd.Series) -> list[frozenset[str]]:
    return [frozenset(x for x in str(v).split(";") if x) if isinstance(v, str) else frozenset() for v in col]


def _pairs(jobs: pd.DataFrame) -> set[frozenset[str]]:
    out = set()
    for jid, ps in zip(jobs["job_id"].astype(str), _sets(jobs["partners"])):
        out.update(frozenset((jid, p)) for p in ps)
    return out


def parity_table(sim: pd.DataFrame, live: pd.DataFrame) -> pd.DataFrame:
    """Per job: placement, partners, start (s) and JCT (s) in both backends, and the JCT difference.

    Raises:
        ValueError: the two tables do not hold the same jobs (the message names some that differ).
    """
    a, b = sim.set_index(sim["job_id"].astype(str)), live.set_index(live["job_id"].astype(str))
    if set(a.index) != set(b.index):
        diff = sorted(set(a.index) ^ set(b.index))
        raise ValueError(f"the two runs hold different jobs, e.g. {diff[:5]}")
    b = b.loc[a.index]
    def text(col: pd.Series) -> np.ndarray:  # a column of empty strings reads back from CSV as NaN floats
        return np.array(["" if not isinstance(v, str) else v for v in col], dtype=object)

    table = pd.DataFrame({
        "job_id": a.index,
        "placement_sim": text(a["placement"]), "placement_live": text(b["placement"]),
        "partners_sim": text(a["partners"]), "partners_live": text(b["partners"]),
        "start_sim_s": a["start_s"].to_numpy(), "start_live_s": b["start_s"].to_numpy(),
        "jct_sim_s": a["jct_s"].to_numpy(), "jct_live_s": b["jct_s"].to_numpy(),
    })
    table["jct_diff_rel"] = table["jct_live_s"] / table["jct_sim_s"] - 1.0
    return table.reset_index(drop=True)


def parity(sim: pd.DataFrame, live: pd.DataFrame) -> dict[str, float]:
    """The parity figures of the module docstring for one policy.

    Raises:
        ValueError: the tables hold different jobs.
    """
    t = parity_table(sim, live)

    def rel(x: float, y: float) -> float:
        return float(y / x - 1.0) if x else float("nan")

    def makespan(df: pd.DataFrame) -> float:
        return float(df["end_s"].max() - df["submit_s"].min())

    ps, pl = _pairs(sim), _pairs(live)
    union = ps | pl
    same_partners = [x == y for x, y in zip(_sets(t["partners_sim"]), _sets(t["partners_live"]))]
    return {
        "jobs": int(len(t)),
        "avg_jct_sim_s": float(t["jct_sim_s"].mean()), "avg_jct_live_s": float(t["jct_live_s"].mean()),
        "avg_jct_diff_rel": rel(t["jct_sim_s"].mean(), t["jct_live_s"].mean()),
        "p99_jct_diff_rel": rel(float(np.percentile(t["jct_sim_s"], 99)), float(np.percentile(t["jct_live_s"], 99))),
        "makespan_diff_rel": rel(makespan(sim), makespan(live)),
        "partners_match": float(np.mean(same_partners)) if len(t) else 1.0,
        "pairs_sim": len(ps), "pairs_live": len(pl), "pairs_common": len(ps & pl),
        "pairs_identical": float(len(ps & pl) / len(union)) if union else 1.0,
        "placement_match": float(np.mean(t["placement_sim"] == t["placement_live"])) if len(t) else 1.0,
        "median_abs_jct_diff_rel": float(np.median(np.abs(t["jct_diff_rel"]))) if len(t) else 0.0,
    }


KEYS = ("avg_jct_diff_rel", "p99_jct_diff_rel", "makespan_diff_rel", "partners_match", "pairs_identical", "pairs_sim",
        "pairs_live", "pairs_common", "placement_match", "avg_jct_sim_s", "avg_jct_live_s")


def harness_overheads(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The live run's per-job overheads (``metrics-<policy>.json``) in wall and emulated seconds.

    Returns:
        ``{name: {"wall_s_median", "emulated_s_median", ...}}`` for ``submit_lag``,
        ``bind_latency``, ``start_lag``, ``completion_lag`` (p90 where measured).
    """
    speedup = float(metrics.get("speedup") or 1.0)
    b = metrics.get("breakdown_s") or {}
    raw = {"submit_lag": (metrics.get("submit_lag_s_median"), metrics.get("submit_lag_s_p90")),
           "bind_latency": (b.get("bind_latency_s_median"), b.get("bind_latency_s_p90")),
           "start_lag": (b.get("start_lag_s_median"), b.get("start_lag_s_p90")),
           "completion_lag": (b.get("completion_lag_s_median"), b.get("completion_lag_s_p90"))}
    out = {}
    for name, (med, p90) in raw.items():
        d = {}
        for key, v in (("median", med), ("p90", p90)):
            if v is not None:
                d[f"wall_s_{key}"] = float(v)
                d[f"emulated_s_{key}"] = float(v) * speedup
        out[name] = d
    return out


def _row(label: str, f: dict[str, Any]) -> str:
    return (f"| {label} | {f['avg_jct_sim_s'] / 3600:.2f} | {f['avg_jct_live_s'] / 3600:.2f} | "
            f"{f['avg_jct_diff_rel']:+.1%} | {f['p99_jct_diff_rel']:+.1%} | {f['makespan_diff_rel']:+.1%} | "
            f"{f['partners_match']:.0%} | {f['pairs_identical']:.0%} ({f['pairs_common']}/"
            f"{len_union(f)}) | {f['placement_match']:.0%} |")


def write_parity(out: Path, figures: dict[str, dict[str, Any]], config: dict[str, Any]) -> None:
    """``parity.json`` and ``parity.md`` (per policy: the simulator on the trace's arrivals and on
    the live run's against the live run, and the live run's overheads)."""
    (out / "parity.json").write_text(json.dumps({"config": config, "policies": figures}, indent=2) + "\n")
    lines = ["# Simulator-live parity", "",
             f"{config.get('jobs')} jobs of {config.get('trace')} from job {config.get('start_job')}, seed "
             f"{config.get('seed')}, {config.get('nodes')}x{config.get('gpus_per_node')} GPUs, simulator queue "
             f"`{config.get('queue')}`, live speedup {config.get('speedup'):g}x.", "",
             "| policy | avg JCT sim (h) | avg JCT live (h) | avg JCT diff | p99 diff | makespan diff | "
             "same partners | identical pairs | same placement |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, f in figures.items():
        lines.append(_row(name, f))
        if "on_live_arrivals" in f:
            lines.append(_row(f"{name}, sim on live arrivals", f["on_live_arrivals"]))
    held = bool(config.get("held_clock"))
    lines += ["", "Second row per policy: the simulator re-run on the arrival times the live run achieved"
              + (" (`sim-live-arrivals/`), i.e. without the submitter's lag in the difference; the live sessions held "
                 "the clock, so their rounds took no emulated time and the trials keep their configured length." if held
                 else ", with tuning trials as long as the live coordinator's rounds (`sim-live-arrivals/`), i.e. without "
                 "the submitter's lag and the rounds' wall time in the difference."), ""]
    for name, f in figures.items():
        r = f.get("tuning_rounds") or {}
        if r.get("rounds"):
            lines += [f"Live tuning of {name}: {r['rounds']} rounds of {r['round_s_mean']:.2f} s wall on average "
                      f"(trial_s {f['on_live_arrivals'].get('trial_s', 0):.0f} emulated s in the re-run; "
                      f"{config.get('trial_s', 0):g} s in the first simulator run); sessions by outcome: "
                      f"{r.get('sessions')}.", ""]
    for name, f in figures.items():
        h = f.get("harness") or {}
        if not h:
            continue
        c = f.get("clock") or {}
        held = (f" The run's clock was held {c['held_s']:.0f} s of its {c['wall_s']:.0f} s wall (`--held-clock`): "
                "held seconds took no emulated time, so the emulated column is an upper bound."
                if c.get("held") and c.get("held_s") is not None else "")
        lines += [f"Live overheads of {name} (per job; emulated = wall x {config.get('speedup'):g}).{held}", "",
                  "| overhead | median wall (s) | median emulated (s) | p90 wall (s) | p90 emulated (s) |",
                  "|---|---:|---:|---:|---:|"]
        for what, d in h.items():
            cells = [(f"{d[k]:.3f}" if k.startswith("wall") else f"{d[k]:.0f}") if k in d else "-"
                     for k in ("wall_s_median", "emulated_s_median", "wall_s_p90", "emulated_s_p90")]
            lines.append(f"| {what.replace('_', ' ')} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Per-job tables: `parity-<policy>.csv`."]
    (out / "parity.md").write_text("\n".join(lines) + "\n")


def len_union(f: dict[str, Any]) -> int:
    """Pairs found by either backend."""
    return int(f["pairs_sim"] + f["pairs_live"] - f["pairs_common"])


def run_compare(cfg: ExperimentConfig, on_policy=None) -> dict[str, dict[str, Any]]:
    """Both backends on the same workload; writes ``sim/``, ``live/`` and the parity files under
    ``cfg.out``. Returns the figures by policy.

    Raises:
        TimeoutError, RuntimeError: the live run failed (see :func:`iadeep.experiment._steps.run_live`).
    """
    from iadeep.experiment._steps import build_workload, fetch_inputs, run_live, run_policy, write_report

    out = cfg.out_dir
    paths = fetch_inputs(cfg, progress=False)
    sim_cfg = replace(cfg, backend="simulator", whole_gib=True, kube_time_scale=cfg.speedup, out=str(out / "sim"))
    live_cfg = replace(cfg, backend="kubernetes", out=str(out / "live"))
    workload, _ = build_workload(sim_cfg, paths["trace"])
    build_workload(live_cfg, paths["trace"])
    from iadeep.experiment._live import TUNED_POLICIES

    for name in cfg.policies:  # the simulator tunes what the live system tunes (coordinator and tuner)
        run_policy(replace(sim_cfg, tuning=cfg.tuning and name in TUNED_POLICIES), name, workload, paths["throughputs"])
    write_report(sim_cfg)
    run_live(live_cfg, workload, paths["throughputs"], on_policy)
    write_report(live_cfg)
    figures = {}
    for name in cfg.policies:
        sim = pd.read_csv(out / "sim" / f"jobs-{name}.csv", dtype={"job_id": str})
        live = pd.read_csv(out / "live" / f"jobs-{name}.csv", dtype={"job_id": str})
        parity_table(sim, live).to_csv(out / f"parity-{name}.csv", index=False)
        figures[name] = parity(sim, live)
        metrics = json.loads((out / "live" / f"metrics-{name}.json").read_text())
        figures[name]["reservations_left"] = metrics.get("reservations_left")
        figures[name]["live_wall_s"] = metrics.get("wall_s")
        figures[name]["harness"] = harness_overheads(metrics)
        figures[name]["clock"] = {"held": bool(metrics.get("held_clock")), "held_s": metrics.get("clock_held_s"),
                                  "wall_s": metrics.get("wall_s")}
        # the simulator on the arrivals the live run achieved: the submitter's lag is then in both
        arrived = dict(zip(live["job_id"].astype(str), live["submit_s"]))
        la_cfg = replace(sim_cfg, out=str(out / "sim-live-arrivals"), tuning=sim_cfg.tuning and name in TUNED_POLICIES)
        round_s = (metrics.get("tuning_rounds") or {}).get("round_s_mean")
        # and the trials as long as the live coordinator's rounds were (on a held clock a session
        # holds it: its rounds take no emulated time, and the configured trials stay)
        if la_cfg.tuning and round_s and not metrics.get("held_clock"):
            la_cfg = replace(la_cfg, trial_s=float(round_s) * cfg.speedup)
        la_workload = workload.copy()
        la_workload["submit_time"] = [arrived[str(j)] for j in workload["job_id"]]
        la = run_policy(la_cfg, name, la_workload, paths["throughputs"]).jobs
        figures[name]["on_live_arrivals"] = {**{k: v for k, v in parity(la, live).items() if k in KEYS},
                                             "trial_s": la_cfg.trial_s}
        figures[name]["tuning_rounds"] = metrics.get("tuning_rounds") or {}
        figures[name]["arrivals_effect"] = {k: v for k, v in parity(sim, la).items() if k in KEYS}
    write_parity(out, figures, cfg.to_dict())
    return figures
