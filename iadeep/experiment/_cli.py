"""``iadeep experiment run``: replay a trace against policies and print the summary table."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from iadeep.experiment._config import DEFAULT_POLICIES, ExperimentConfig

app = typer.Typer(no_args_is_help=True, add_completion=False)
_D = ExperimentConfig()


@app.command("run")
def run_cmd(
    trace: Annotated[str, typer.Option(help="Trace format: philly, ms-itp, openb, philly-json.")] = _D.trace,
    trace_file: Annotated[Optional[str], typer.Option(help="Use this trace file/folder instead of the registry's.")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="Number of jobs (after filters); 0 = all.")] = _D.jobs,
    start_job: Annotated[Optional[int], typer.Option(help="Skip this many jobs first [default: 40000 for the registry's Philly trace, else 0].")] = None,
    window_start_s: Annotated[Optional[float], typer.Option(help="Keep jobs submitted at or after this (s from trace start).")] = None,
    window_end_s: Annotated[Optional[float], typer.Option(help="Keep jobs submitted before this (s from trace start).")] = None,
    virtual_cluster: Annotated[Optional[str], typer.Option(help="Philly virtual cluster / ITP cluster to keep.")] = None,
    max_gpus: Annotated[Optional[int], typer.Option(help="Drop jobs needing more GPUs.")] = _D.max_gpus,
    arrival_scale: Annotated[float, typer.Option(help="Multiply inter-arrival gaps.")] = _D.arrival_scale,
    iadeep_arrival_rule: Annotated[bool, typer.Option(help="IADeep's rule: gap / 1000 x arrival-scale.")] = False,
    target_load: Annotated[Optional[float], typer.Option(help="Rescale arrivals to this mean offered load; 0 = keep trace timing.")] = _D.target_load,
    mix: Annotated[str, typer.Option(help="Workload mix: iadeep or gavel.")] = _D.mix,
    skip_bad_rows: Annotated[bool, typer.Option(help="Skip and count malformed trace rows instead of stopping.")] = False,
    policies: Annotated[str, typer.Option(help="Comma-separated policy names.")] = ",".join(DEFAULT_POLICIES),
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster.")] = _D.nodes,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = _D.gpus_per_node,
    gpu_mem_gib: Annotated[float, typer.Option(help="Memory per GPU (GiB).")] = _D.gpu_mem_gib,
    gpu_type: Annotated[str, typer.Option(help="Throughput measurements of this GPU type: v100, p100, k80.")] = _D.gpu_type,
    seed: Annotated[int, typer.Option(help="Seed of the workload mix and measurement noise.")] = _D.seed,
    backfill: Annotated[bool, typer.Option(help="Let jobs behind a waiting queue head start.")] = False,
    predictor: Annotated[str, typer.Option(help="iadeep's interference predictor: learned or oracle.")] = _D.predictor,
    out: Annotated[str, typer.Option(help="Output folder.")] = _D.out,
) -> None:
    """Replay a trace against the policies; write summary.json, per-job CSVs, plots and report.md."""
    from iadeep.datasets import DatasetError
    from iadeep.experiment._steps import build_workload, fetch_inputs, run_policy, write_report
    from iadeep.traces import TraceFormatError

    console = Console(width=None if sys.stdout.isatty() else 130)
    try:
        cfg = ExperimentConfig(
            trace=trace, trace_file=trace_file, jobs=jobs, start_job=start_job, window_start_s=window_start_s,
            window_end_s=window_end_s, virtual_cluster=virtual_cluster, max_gpus=max_gpus, arrival_scale=arrival_scale,
            iadeep_arrival_rule=iadeep_arrival_rule, target_load=target_load, mix=mix, skip_bad_rows=skip_bad_rows,
            policies=tuple(p.strip() for p in policies.split(",") if p.strip()), nodes=nodes, gpus_per_node=gpus_per_node,
            gpu_mem_gib=gpu_mem_gib, gpu_type=gpu_type, seed=seed, backfill=backfill, predictor=predictor, out=out)
        paths = fetch_inputs(cfg)
        workload, meta = build_workload(cfg, paths["trace"])
    except (ValueError, DatasetError, TraceFormatError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if meta["skipped_rows"]:
        console.print(f"[yellow]skipped {meta['skipped_rows']} malformed row(s) of {meta['source']}[/yellow]")
    console.print(f"[bold]{meta['jobs']}[/bold] jobs from {cfg.trace} ({meta['multi_gpu_jobs']} multi-GPU) on "
                  f"{cfg.nodes}x{cfg.gpus_per_node} GPUs; offered load mean [bold]{meta['offered_load_mean']:.2f}[/bold], "
                  f"peak (10% window) [bold]{meta['offered_load_peak']:.2f}[/bold]")
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        for name in cfg.policies:
            task = bar.add_task(name, total=len(workload))
            run_policy(cfg, name, workload, paths["throughputs"], lambda done, t=task: bar.update(t, completed=done))
    summary = write_report(cfg)
    console.print(summary_table(summary))
    console.print(f"results in [bold]{cfg.out_dir}[/bold]: summary.json, report.md, jct_cdf.png, normalised.png, queue_length.png")


@app.command("sweep")
def sweep_cmd(
    start_jobs: Annotated[str, typer.Option(help="Comma-separated start jobs (trace windows).")] = "0,20000,40000,60000",
    loads: Annotated[str, typer.Option(help="Comma-separated target mean offered loads.")] = "1,2",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0,1",
    jobs: Annotated[int, typer.Option(help="Jobs per setting.")] = _D.jobs or 400,
    trace: Annotated[str, typer.Option(help="Trace format.")] = _D.trace,
    virtual_cluster: Annotated[Optional[str], typer.Option(help="Philly virtual cluster / ITP cluster to keep.")] = None,
    mix: Annotated[str, typer.Option(help="Workload mix: iadeep or gavel.")] = _D.mix,
    policies: Annotated[str, typer.Option(help="Comma-separated policy names.")] = ",".join(DEFAULT_POLICIES),
    out: Annotated[str, typer.Option(help="Output folder.")] = "runs/sweep",
) -> None:
    """Compare the policies over several windows x loads x seeds; write sweep.csv and sweep.png."""
    from iadeep.experiment._sweep import GUARD_GOALS, guard_figures, plot_sweep, run_sweep

    console = Console(width=None if sys.stdout.isatty() else 130)
    try:
        base = ExperimentConfig(trace=trace, jobs=jobs, virtual_cluster=virtual_cluster, mix=mix,
                                policies=tuple(p.strip() for p in policies.split(",") if p.strip()), out=out)
        starts = [int(x) for x in start_jobs.split(",")]
        load_list = [float(x) for x in loads.split(",")]
        seed_list = [int(x) for x in seeds.split(",")]
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    n = len(starts) * len(load_list) * len(seed_list)
    with Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("settings", total=n)

        started = [0]

        def step(setting: str) -> None:
            bar.update(task, description=setting, completed=started[0])
            started[0] += 1

        df = run_sweep(base, starts, load_list, seed_list, on_setting=step)
        bar.update(task, completed=n)
    plot_sweep(df, base.out_dir / "sweep.png")
    table = Table(title="avg JCT / iadeep's (above 1: iadeep is faster)")
    pivot = df.pivot(index="setting", columns="policy", values="avg_jct_vs_iadeep").reindex(df["setting"].unique())
    table.add_column("setting")
    for name in pivot.columns:
        table.add_column(name, justify="right")
    for setting, row in pivot.iterrows():
        table.add_row(str(setting), *(f"{v:.2f}" for v in row))
    console.print(table)
    guard = guard_figures(df)
    if guard["worst_vs_packing"] is not None:
        console.print(f"guard: iadeep / better of antman, gandiva: worst {guard['worst_vs_packing']:.2f} "
                      f"({guard['worst_setting']}), median {guard['median_vs_packing']:.2f}; "
                      f"worst vs exclusive {guard['worst_vs_exclusive'] if guard['worst_vs_exclusive'] is None else round(guard['worst_vs_exclusive'], 2)}"
                      f" (goals {GUARD_GOALS['worst_vs_packing']}, {GUARD_GOALS['median_vs_packing']}, "
                      f"{GUARD_GOALS['worst_vs_exclusive']}: met {guard['met']})")
    (base.out_dir / "guard.json").write_text(json.dumps(guard, indent=2, allow_nan=False) + "\n")
    console.print(f"results in [bold]{base.out_dir}[/bold]: sweep.csv, sweep.png, guard.json")


def summary_table(summary: dict) -> Table:
    """A rich table of the per-policy metrics (hours)."""
    table = Table(title="Per-policy summary (times in hours)")
    for col in ("policy", "avg JCT", "vs iadeep", "p50 JCT", "p99 JCT", "avg queueing", "makespan", "GPU util", "mean slowdown"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    pol = summary["policies"]
    ref = pol.get("iadeep")
    for name, s in pol.items():
        rel = f"{s['avg_jct_s'] / ref['avg_jct_s']:.2f}x" if ref else "-"
        table.add_row(name, f"{s['avg_jct_s'] / 3600:.2f}", rel, f"{s['p50_jct_s'] / 3600:.2f}", f"{s['p99_jct_s'] / 3600:.2f}",
                      f"{s['avg_queueing_s'] / 3600:.2f}", f"{s['makespan_s'] / 3600:.2f}", f"{s['gpu_utilisation']:.2f}",
                      f"{s['mean_slowdown']:.2f}")
    return table
