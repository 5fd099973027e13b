"""Regenerate the result tables of README.md from runs, so that they cannot drift from the code.

``make results`` runs this: the main job (``iadeep experiment run`` with its defaults) and the
default sweep (``iadeep experiment sweep``), then rewrites the README blocks between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` (``main``, ``sweep``, ``guard``,
``holdout``, ``draw``) and copies the main job's plot to ``docs/img/normalised.png``. Outputs stay
under ``runs/results/``.

``--check`` only reports whether the README would change (exit 1).

The guard beyond the sweep (``holdout``) runs settings that no rule of the policy was designed on
(:data:`HOLDOUT`: other Philly windows, other seeds, other ITP seeds), under both queue models, so
that the guard is not only measured where the rules were tuned; like the draw, each of its
settings runs ``--repeats`` times with its own measurement noise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _hours(s: float) -> str:
    return f"{s / 3600:.2f}"


def main_table(summary: dict) -> str:
    """Markdown table of the main job's summary (times in hours)."""
    pol = summary["policies"]
    ref = pol["iadeep"]["avg_jct_s"]
    lines = ["| policy | avg JCT (h) | vs iadeep | p99 JCT (h) | makespan (h) | mean slowdown |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in pol.items():
        lines.append(f"| {name} | {_hours(s['avg_jct_s'])} | {s['avg_jct_s'] / ref:.2f}x | {s['p99_jct_s'] / 3600:.1f} | "
                     f"{s['makespan_s'] / 3600:.1f} | {s['mean_slowdown']:.2f} |")
    t = summary["trace"]
    lines.append("")
    lines.append(f"{t['jobs']} jobs of `{t['name']}`; seed {summary['seed']}; produced by `make results`.")
    return "\n".join(lines)


def sweep_table(df) -> str:
    """Markdown table: every policy's avg JCT over iadeep's, per sweep setting."""
    pivot = df.pivot(index="setting", columns="policy", values="avg_jct_vs_iadeep").reindex(df["setting"].unique())
    cols = [c for c in pivot.columns if c != "iadeep"]
    lines = ["| setting ([trace-]start job - load - seed) | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for setting, row in pivot.iterrows():
        lines.append(f"| {setting} | " + " | ".join(f"{row[c]:.2f}" for c in cols) + " |")
    lines.append("")
    lines.append("Each cell: that policy's avg JCT / iadeep's (above 1: iadeep is faster), strict FIFO queue. "
                 "Produced by `make results`.")
    return "\n".join(lines)


def guard_text(guard: dict, queue: str) -> str:
    """One paragraph with the guard figures of one queue model against the goals."""
    from iadeep.experiment import GUARD_GOALS

    return (f"**{queue} queue**, {int(guard['settings'])} settings: iadeep's avg JCT / the better of antman and gandiva is "
            f"**{guard['worst_vs_packing']:.2f} at worst** ({guard['worst_setting']}) and **{guard['median_vs_packing']:.2f} "
            f"at the median**; iadeep / exclusive is at most **{guard['worst_vs_exclusive']:.2f}**. Goals: worst <= "
            f"{GUARD_GOALS['worst_vs_packing']}, median <= {GUARD_GOALS['median_vs_packing']}, vs exclusive <= "
            f"{GUARD_GOALS['worst_vs_exclusive']} "
            f"(met: {_met(guard)}). Produced by `make results`.")


def _met(guard: dict) -> str:
    """``guard["met"]``; where it is undecided (a figure not measured, the others within their
    goals), which figures were not measured."""
    from iadeep.experiment import GUARD_GOALS

    return guard["met"] or "n/a, " + ", ".join(k for k in GUARD_GOALS if guard.get(k) is None) + " not measured"


HOLDOUT = {
    "philly": [([10_000, 30_000, 50_000, 70_000], [2, 3]), ([20_000, 40_000, 60_000], [4, 5])],
    "itp_seeds": [2, 3, 4],
}
"""Settings beyond the sweep: Philly windows between the sweep's with seeds 2 and 3, the sweep's
windows with seeds 4 and 5 (loads 1 and 2), and ITP seeds 2-4. No rule of the policy was designed
on them (the policy is judged on windows, seeds and traces its rules were not tuned on). They are fixed, so the fresh draw (:func:`run_fresh_draw`) is the
figure that no rule can have been tuned on."""


def _runs_clause(repeats: int) -> str:
    """How the draw's and the settings beyond the sweep's figures were measured (``--repeats``)."""
    return f"each policy run {repeats} times a setting with its own measurement noise, figures of their mean"


def holdout_text(guards: dict) -> str:
    """The guard beyond the sweep: one paragraph per queue model, naming every setting above
    :data:`~iadeep.experiment._sweep.GUARD_FLAG` x the better packing baseline."""
    from iadeep.experiment import GUARD_FLAG

    return "\n\n".join(
        f"**{queue} queue, beyond the sweep**, {int(g['settings'])} settings"
        + (f" ({_runs_clause(g['repeats'])}; one run of iadeep spans up to x{g['noise_band_max']:.2f} of its avg JCT)"
           if g.get("repeats", 1) > 1 else "")
        + f": worst **{g['worst_vs_packing']:.2f}** "
        f"({g['worst_setting']}), median **{g['median_vs_packing']:.2f}**, iadeep / exclusive at most "
        f"**{g['worst_vs_exclusive']:.2f}**; above {GUARD_FLAG} x the better packing baseline: "
        f"{g['above_packing'] or 'none'}. Produced by `make results`." for queue, g in guards.items())


def run_set(out: Path, queue: str, philly: list, itp_seeds: list[int] = (), openb_seeds: list[int] = (), say=None,
            repeats: int = 1):
    """Sweep settings under one queue model and return the combined ``sweep.csv`` table: Philly
    (``philly``: (start jobs, seeds) groups, loads 1 and 2), the openb pods (Gavel mix) and the two
    Microsoft ITP clusters (load 1) with the given seeds, each policy run ``repeats`` times a
    setting with its own measurement noise (the table holds their means); outputs under ``out``."""
    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment import run_sweep

    import pandas as pd

    parts = [run_sweep(ExperimentConfig(jobs=400, queue=queue, out=str(out / f"philly-{i}")), windows, [1.0, 2.0], seeds,
                       on_setting=say, write=False, repeats=repeats) for i, (windows, seeds) in enumerate(philly)]
    if openb_seeds:
        parts.append(run_sweep(ExperimentConfig(trace="openb", mix="gavel", jobs=400, queue=queue, out=str(out / "openb")),
                               [0], [1.0], list(openb_seeds), on_setting=say, label="openb-", write=False,
                               repeats=repeats))
    for vc in ("cluster03", "cluster05") if itp_seeds else ():
        parts.append(run_sweep(ExperimentConfig(trace="ms-itp", virtual_cluster=vc, jobs=400, queue=queue,
                                                out=str(out / vc)), [0], [1.0], list(itp_seeds), on_setting=say,
                               label=f"itp-{vc}-", write=False, repeats=repeats))
    return pd.concat(parts, ignore_index=True)


RESULT_FILES = ("README.md", "docs/results.md")  # the files whose ``results:`` blocks are generated


def replace_block(text: str, name: str, body: str) -> str:
    """Replace the block ``name`` (``<!-- results:name -->`` ... ``<!-- /results:name -->``) of ``text``.

    Raises:
        KeyError: the text has no such block.
    """
    pattern = re.compile(rf"(<!-- results:{name} -->\n)(.*?)(\n<!-- /results:{name} -->)", re.S)
    if not pattern.search(text):
        raise KeyError(f"no <!-- results:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text)


def rewrite_blocks(blocks: dict[str, str], check: bool, source: Path) -> int:
    """Rewrite every block of ``blocks`` (name -> body) wherever it is in :data:`RESULT_FILES`.

    Args:
        blocks: the generated bodies by block name.
        check: only report whether a file would change; write nothing.
        source: the runs' folder (named in the message).

    Returns:
        0 when written, or with ``check`` when every file is up to date; 1 with ``check`` otherwise.

    Raises:
        KeyError: a block that is in none of the files (its name).
    """
    stale, found = [], set()
    for rel in RESULT_FILES:
        path = REPO / rel
        text = path.read_text()
        new = text
        for name, body in blocks.items():
            if f"<!-- results:{name} -->" in new:
                new = replace_block(new, name, body)
                found.add(name)
        if new != text:
            stale.append(rel)
            if not check:
                path.write_text(new)
    missing = sorted(set(blocks) - found)
    if missing:
        raise KeyError(f"no <!-- results:{missing[0]} --> block in {', '.join(RESULT_FILES)}")
    if check:
        print("results are up to date" if not stale else f"results differ from a fresh run in {', '.join(stale)}")
        return 1 if stale else 0
    print(f"results rewritten from {source}: {', '.join(stale) or 'nothing changed'}")
    return 0


DRAW_SIZE = 64
"""Settings of ``make results``' draw (``iadeep experiment sweep --draw``)."""


DRAW_REPEATS = 3
"""Runs of every policy per drawn setting and per setting beyond the sweep (:data:`HOLDOUT`), each
with its own measurement noise (``--repeats``): one run of an overloaded setting moves by up to
half its avg JCT with the noise alone
(docs/design/2026-12-05-runs-with-their-own-noise.md)."""


def run_fresh_draw(out: Path, n: int, seed: int, workers: int, say=None, repeats: int = DRAW_REPEATS) -> dict:
    """The guard over ``n`` settings drawn from ``seed`` under kube-scheduler's queue (with perfect
    prediction and the zero-interference ceiling beside) and under FIFO, every policy run
    ``repeats`` times a setting with its own measurement noise; returns the printed ``lines`` and
    the results page's ``text``."""
    import dataclasses
    import json as _json

    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment import draw_inputs, guard_figures, guard_lines, plot_sweep, run_draw
    from iadeep.interference import without_interference

    base = ExperimentConfig(jobs=400, out=str(out))
    settings, inputs = draw_inputs(base, n, seed)
    out.mkdir(parents=True, exist_ok=True)
    zero = out / "zero-interference.json"
    zero.write_text(_json.dumps(without_interference(_json.loads(Path(inputs("philly")["throughputs"]).read_text()))[0]))
    kube = run_draw({"kube": dataclasses.replace(base, queue="kube")}, settings, inputs, oracle=True, ceiling=str(zero),
                    workers=workers, on_done=say, repeats=repeats)
    fifo = run_draw({"fifo": dataclasses.replace(base, queue="fifo", out=str(out / "fifo"))}, settings, inputs,
                    workers=workers, on_done=say, repeats=repeats)
    kube.to_csv(out / "sweep-kube.csv", index=False)
    fifo.to_csv(out / "sweep-fifo.csv", index=False)
    plot_sweep(kube, out / "sweep-kube.png")
    g, f = guard_figures(kube), guard_figures(fifo)
    lines = [f"draw seed {seed}, {n} settings"] + guard_lines(g, "kube", base.policies) + guard_lines(f, "fifo", base.policies)
    from iadeep.experiment import by_chance

    text = (f"**A fresh draw** (draw seed {seed}, {n} settings, {_runs_clause(repeats)} avg JCT: "
            f"`iadeep experiment sweep --draw {n} --draw-seed {seed} "
            f"--queue kube --oracle --ceiling --repeats {repeats}`). kube-scheduler's queue: iadeep's avg JCT / the better of antman and gandiva "
            f"**{g['worst_vs_packing']:.2f} at worst** ({g['worst_setting']}) and **{g['median_vs_packing']:.2f} at the "
            f"median**; iadeep / exclusive at most **{g['worst_vs_exclusive']:.2f}**; median headroom to the "
            f"zero-interference ceiling captured **{g['median_headroom_captured']:.2f}** (the ceiling's median "
            f"{g['ceiling_median_vs_packing']:.2f} of packing); with perfect prediction worst "
            f"{g['oracle_worst_vs_packing']:.2f}, median {g['oracle_median_vs_packing']:.2f}"
            + (f", slower than learned in every run on {_count(g['oracle_worse_every_run'])} settings "
               f"({n * by_chance(repeats):.1f} expected by chance alone) and faster in every run on "
               f"{g['oracle_better_every_run']}; one run of iadeep spans x{g['noise_band_median']:.2f} of its avg JCT at "
               f"the median setting, up to x{g['noise_band_max']:.2f}" if repeats > 1 else "")
            + ". Goals: "
            f"{GUARD_GOALS_TEXT} (met: {_met(g)}). FIFO beside it: worst {f['worst_vs_packing']:.2f}, median "
            f"{f['median_vs_packing']:.2f}, iadeep / exclusive at most {f['worst_vs_exclusive']:.2f}. Produced by `make results`.")
    return {"lines": lines, "text": text}


def _count(names: str | None) -> int:
    """How many settings a guard's comma-separated list (``"<setting> <ratio>, ..."``) names."""
    return len([x for x in (names or "").split(",") if x.strip()])


GUARD_GOALS_TEXT = "worst <= 1.02, median <= 0.85, never above exclusive, median headroom captured >= 0.7"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "results"))
    parser.add_argument("--check", action="store_true", help="exit 1 when the README's tables differ; write nothing")
    parser.add_argument("--draw", type=int, default=DRAW_SIZE, help=f"settings drawn at random (default {DRAW_SIZE})")
    parser.add_argument("--draw-seed", type=int, default=None,
                        help="seed of the draw (default: today's date as YYYYMMDD, a fresh draw; with --check: the "
                             "seed the results page names)")
    parser.add_argument("--workers", type=int, default=2, help="processes for the draw's settings")
    parser.add_argument("--repeats", type=int, default=DRAW_REPEATS,
                        help=f"runs of every policy per drawn setting and per setting beyond the sweep, each with its own "
                             f"measurement noise (default {DRAW_REPEATS})")
    args = parser.parse_args(argv)
    if args.draw_seed is None:
        import datetime

        named = re.search(r"draw seed (\d+)", (REPO / "docs" / "results.md").read_text()) if args.check else None
        args.draw_seed = int(named.group(1)) if named else int(datetime.date.today().strftime("%Y%m%d"))

    from iadeep.experiment import ExperimentConfig, run_experiment
    from iadeep.experiment import guard_figures

    out = Path(args.out)
    summary = run_experiment(ExperimentConfig(out=str(out / "main")), progress=True)
    if not args.check:  # the README's plot of the main job, from the same run as its table
        import shutil

        shutil.copyfile(out / "main" / "normalised.png", REPO / "docs" / "img" / "normalised.png")
    say = lambda s: print(f"sweep: {s}", file=sys.stderr, flush=True)  # noqa: E731
    frames, guards, held_guards = {}, {}, {}
    # The simulator's strict FIFO, then kube-scheduler's queue. The kube model retries every waiting
    # pod on every cluster event, so a weeks-long queue (Philly's first window) costs many minutes
    # per setting: under it the Philly windows from 20k on, openb (its shares fragmented the cluster
    # only where pods pass a waiting one, README "openb's shares fragmented the cluster") and the
    # two ITP clusters (under 20 s a setting)
    # run here.
    for queue, windows, itp, openb in (("fifo", [0, 20_000, 40_000, 60_000], [0, 1], [0, 1]),
                                       ("kube", [20_000, 40_000, 60_000], [0, 1], [0, 1])):
        # beyond Philly: the Alibaba openb pods (Gavel mix) and two Microsoft ITP clusters
        frames[queue] = run_set(out / queue, queue, [(windows, [0, 1])], itp, openb, say)
        frames[queue].to_csv(out / f"sweep-{queue}.csv", index=False)
        guards[queue] = guard_figures(frames[queue])
        held = run_set(out / "holdout" / queue, queue, HOLDOUT["philly"], HOLDOUT["itp_seeds"], say=say,
                       repeats=args.repeats)
        held.to_csv(out / f"holdout-{queue}.csv", index=False)
        held_guards[queue] = guard_figures(held)
    df = frames["fifo"]
    draw = run_fresh_draw(out / "draw", args.draw, args.draw_seed, args.workers, say, args.repeats)
    for line in draw["lines"]:
        print(line)
    return rewrite_blocks({"main": main_table(summary), "sweep": sweep_table(df), "draw": draw["text"],
                           "guard": "\n\n".join(guard_text(g, q) for q, g in guards.items()),
                           "holdout": holdout_text(held_guards)}, check=args.check, source=out)


if __name__ == "__main__":
    sys.exit(main())
