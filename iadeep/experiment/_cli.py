"""``iadeep experiment run``: replay a trace against policies and print the summary table."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from iadeep._climain import missing_extra, one_line, usage_error
from iadeep._params import ConfigError
from iadeep.experiment._config import DEFAULT_POLICIES, TRACE_DATASETS, ExperimentConfig

app = typer.Typer(no_args_is_help=True, add_completion=False)
_D = ExperimentConfig()
#: Parameters whose option is spelled otherwise (for the one-line errors of :func:`iadeep._climain.usage_error`).
_OPTIONS = {"cluster_file": "--cluster", "throughputs_file": "--throughputs"}
SWEEP_WINDOWS = {"philly": "0,20000,40000,60000"}
"""The sweep's default windows (start jobs) per trace: Philly's 82k jobs hold four 400-job windows
20,000 jobs apart; openb (about 6k GPU pods) and an ITP cluster (about 3k jobs) start at 0."""


@app.command("run")
def run_cmd(
    trace: Annotated[str, typer.Option(help="Trace format: philly, ms-itp, openb, philly-json.")] = _D.trace,
    trace_file: Annotated[Optional[str], typer.Option(help="Use this trace file/folder instead of the registry's.")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="Number of jobs (after filters); 0 = all.")] = _D.jobs,
    start_job: Annotated[Optional[int], typer.Option(help="Skip this many jobs first (default: 40000 for the registry's Philly trace without --window-start-s/--window-end-s, else 0).")] = None,
    window_start_s: Annotated[Optional[float], typer.Option(help="Keep jobs submitted at or after this (s from trace start).")] = None,
    window_end_s: Annotated[Optional[float], typer.Option(help="Keep jobs submitted before this (s from trace start).")] = None,
    virtual_cluster: Annotated[Optional[str], typer.Option(help="Philly virtual cluster / ITP cluster to keep.")] = None,
    max_gpus: Annotated[Optional[int], typer.Option(help="Drop jobs needing more GPUs (default: the cluster's size; wider jobs are counted as wider_than_cluster).")] = _D.max_gpus,
    arrival_scale: Annotated[float, typer.Option(help="Multiply inter-arrival gaps.")] = _D.arrival_scale,
    iadeep_arrival_rule: Annotated[bool, typer.Option(help="IADeep's rule: gap / 1000 x arrival-scale.")] = False,
    target_load: Annotated[Optional[float], typer.Option(help="Rescale arrivals to this mean offered load; 0 = keep trace timing.")] = _D.target_load,
    mix: Annotated[str, typer.Option(help="Workload mix: iadeep or gavel.")] = _D.mix,
    skip_bad_rows: Annotated[bool, typer.Option(help="Skip and count malformed trace rows instead of stopping.")] = False,
    strict: Annotated[bool, typer.Option(help="Stop at the first known quirk of the trace too (censored job, attempt ending before it starts, ...).")] = False,
    include_censored: Annotated[bool, typer.Option(help="Count censored jobs (still running when the trace was taken) in the JCT statistics.")] = False,
    drop_zero_duration: Annotated[bool, typer.Option(help="Drop the trace's jobs of 0 s (default: kept; they complete at once and count in the JCT statistics).")] = False,
    infeasible: Annotated[str, typer.Option(help="Jobs that can never run on the cluster: drop (before the run, counted) or keep (reported unschedulable).")] = _D.infeasible,
    cluster_file: Annotated[Optional[str], typer.Option("--cluster", help="YAML cluster file (node groups: count, gpus_per_node, gpu_mem_gib, gpu_model; `iadeep experiment cluster` writes one from a trace's node list), or 'openb' (the registry's openb node list); replaces --nodes/--gpus-per-node/--gpu-mem-gib.")] = None,
    policies: Annotated[str, typer.Option(help="Comma-separated policy names.")] = ",".join(DEFAULT_POLICIES),
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster.")] = _D.nodes,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = _D.gpus_per_node,
    gpu_mem_gib: Annotated[float, typer.Option(help="Memory per GPU (GiB).")] = _D.gpu_mem_gib,
    gpu_type: Annotated[str, typer.Option(help="Throughput measurements of this GPU type: v100, p100, k80 (or a key of --throughputs).")] = _D.gpu_type,
    throughputs_file: Annotated[Optional[str], typer.Option("--throughputs", "--throughputs-file", help="Measurements in Gavel's schema (e.g. from `iadeep profile`) instead of the published ones.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the workload mix and measurement noise.")] = _D.seed,
    backfill: Annotated[bool, typer.Option(help="Let jobs behind a waiting queue head start.")] = False,
    queue: Annotated[str, typer.Option(help="Simulator queue: fifo, backfill or kube (kube-scheduler's queue with backoff).")] = _D.queue,
    scheduler_config: Annotated[Optional[str], typer.Option(help="KubeSchedulerConfiguration for the kube queue's backoff.")] = None,
    kube_preemption: Annotated[bool, typer.Option(help="kube queue: head-of-line preemption for the pod nothing pending is ahead of (live: the extender evicts the victim and its Job replaces it).")] = _D.kube_preemption,
    predictor: Annotated[str, typer.Option(help="iadeep's interference predictor: learned or oracle.")] = _D.predictor,
    gang_placement: Annotated[str, typer.Option(help="Simulator: a multi-GPU job as pods of equal size, each on one node (pods; as the kubernetes backend runs it), or on any GPUs of the cluster (any-gpus).")] = _D.gang_placement,
    backend: Annotated[str, typer.Option(help="simulator, or kubernetes (Jobs on the local control plane with kwok GPU nodes, the extender and the GPU emulator).")] = _D.backend,
    speedup: Annotated[float, typer.Option(help="kubernetes backend: emulated seconds per wall second.")] = _D.speedup,
    timeout_s: Annotated[Optional[float], typer.Option(help="kubernetes backend: wall-clock bound per policy (s) (default: from the trace).")] = None,
    held_clock: Annotated[bool, typer.Option(help="kubernetes backend, local cluster: time stands still while kube-scheduler decides an arrived pod and while the emulator completes one.")] = _D.held_clock,
    kubeconfig: Annotated[Optional[str], typer.Option(help="kubernetes backend on your cluster (extender deployed with the one --policies policy; GPU emulator for nodes without GPUs) instead of the local control plane; etcd from IADEEP_ETCD_* for the reservation count.")] = None,
    out: Annotated[str, typer.Option(help="Output folder.")] = _D.out,
    workers: Annotated[Optional[int], typer.Option(min=1, help="simulator backend: processes for the policies (default: one per CPU core, at most one per policy); 1 = one after the other in this process. The results are the same for any number.")] = None,
) -> None:
    """Replay a trace against the policies; write summary.json, per-job CSVs, plots and report.md."""
    from iadeep.datasets import DatasetError
    from iadeep.experiment._steps import build_workload, cluster_of, fetch_inputs, run_live, run_policies, start_workers, write_report
    from iadeep.traces import TraceFormatError, UnknownVirtualClusterError

    console = Console(width=None if sys.stdout.isatty() else 130)
    try:
        cfg = ExperimentConfig(
            trace=trace, trace_file=trace_file, jobs=jobs, start_job=start_job, window_start_s=window_start_s,
            window_end_s=window_end_s, virtual_cluster=virtual_cluster, max_gpus=max_gpus, arrival_scale=arrival_scale,
            iadeep_arrival_rule=iadeep_arrival_rule, target_load=target_load, mix=mix, skip_bad_rows=skip_bad_rows,
            strict=strict, include_censored=include_censored, drop_zero_duration=drop_zero_duration, infeasible=infeasible,
            cluster_file=cluster_file,
            policies=tuple(p.strip() for p in policies.split(",") if p.strip()), nodes=nodes, gpus_per_node=gpus_per_node,
            gpu_mem_gib=gpu_mem_gib, gpu_type=gpu_type, throughputs_file=throughputs_file, seed=seed, backfill=backfill,
            queue=queue, kube_preemption=kube_preemption, scheduler_config=scheduler_config, predictor=predictor, backend=backend, speedup=speedup,
            timeout_s=timeout_s, held_clock=held_clock, kubeconfig=kubeconfig, gang_placement=gang_placement, out=out)
        _check_out(cfg.out_dir)
        start_workers(cfg, workers)
        paths = fetch_inputs(cfg)
        workload, meta = build_workload(cfg, paths["trace"], paths["throughputs"])  # checks the job types are measured
        cluster = cluster_of(cfg)
    except ConfigError as exc:
        raise usage_error(exc, _OPTIONS) from None
    except UnknownVirtualClusterError as exc:
        raise usage_error(ConfigError("virtual_cluster", one_line(exc)), _OPTIONS) from None
    except (ValueError, DatasetError, TraceFormatError, OSError) as exc:
        raise _input_error("run", exc) from None
    never = sum((meta.get("infeasible_kept") or {}).values())
    if meta["jobs"] and never >= meta["jobs"]:
        reasons = ", ".join(f"{k} {v}" for k, v in meta["infeasible_kept"].items())
        raise _input_error("run", ValueError(f"none of the {meta['jobs']} jobs can run on {cluster.describe()} ({reasons}): "
                                             "every policy would report them unschedulable and no statistic would be "
                                             "defined; give a larger cluster (--gpu-mem-gib, --gpus-per-node, "
                                             "--cluster-file) or --infeasible drop"))
    if meta["skipped_rows"]:
        console.print(f"[yellow]skipped {meta['skipped_rows']} malformed row(s) of {meta['source']}[/yellow]")
    if meta["dropped"]:
        console.print("left out: " + ", ".join(f"{k} {v}" for k, v in meta["dropped"].items()))
    if cfg.jobs and meta["jobs"] < cfg.jobs:  # the window ran past the trace's end (or its filters)
        console.print(f"[yellow]only {meta['jobs']} of the {cfg.jobs} jobs asked for: the trace has no more after "
                      f"job {cfg.start_job} (with the filters above)[/yellow]")
    if meta["flagged"] or meta["infeasible_kept"]:
        console.print("kept but flagged: " + ", ".join(f"{k} {v}" for k, v in {**meta["flagged"], **meta["infeasible_kept"]}.items())
                      + ("" if cfg.include_censored or not meta["flagged"].get("censored") else " (censored jobs: not in JCT statistics)"))

    def fmt(x: float | None) -> str:
        return "undefined" if x is None else f"{x:.2f}"

    console.print(f"[bold]{meta['jobs']}[/bold] jobs from {cfg.trace} ({meta['multi_gpu_jobs']} multi-GPU) on "
                  f"{cluster.describe()}; offered load mean [bold]{fmt(meta['offered_load_mean'])}[/bold], "
                  f"peak (10% window) [bold]{fmt(meta['offered_load_peak'])}[/bold]")
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        if cfg.backend == "kubernetes":
            from iadeep.dev import ControlPlaneError

            def on_policy(name: str, n: int):
                task = bar.add_task(name, total=n)
                return lambda done, t=task: bar.update(t, completed=done)

            try:
                live = run_live(cfg, workload, paths["throughputs"], on_policy)
            except ModuleNotFoundError as exc:
                _exit_on_missing_extra("run", "iadeep experiment run --backend kubernetes", exc, bar)
            except (ControlPlaneError, TimeoutError, RuntimeError, OSError) as exc:
                console.print(f"[red]error:[/red] {exc}")
                raise typer.Exit(1) from None
            median_work = float(workload["duration"].median())
            for name, m in live.items():
                b = m["breakdown_s"]
                if m.get("held_clock"):  # the latency took no emulated time
                    console.print(f"{name}: {m['jobs_per_wall_s']:.1f} jobs per wall-second, reservations left at the end: "
                                  f"{m['reservations_left']}, failed Jobs: {m['failed_jobs']}; clock held "
                                  f"{m['clock_held_s']:.0f} s of {m['wall_s']:.0f} s wall")
                    continue
                overhead = (b["bind_latency_s_median"] + b["start_lag_s_median"]) * cfg.speedup
                console.print(f"{name}: {m['jobs_per_wall_s']:.1f} jobs per wall-second, reservations left at the end: "
                              f"{m['reservations_left']}, failed Jobs: {m['failed_jobs']}; median Job-to-work delay "
                              f"{overhead:.0f} emulated s (median job {median_work:.0f} s)")
                if overhead > 0.05 * median_work:
                    console.print(f"[yellow]{name}: the control loop's latency is {overhead / median_work:.0%} of a median "
                                  "job at this speedup; lower --speedup for results closer to the trace[/yellow]")
        else:
            def on_sim_policy(name: str, n: int):
                task = bar.add_task(name, total=n)
                return lambda done, t=task: bar.update(t, completed=done)

            try:
                run_policies(cfg, workload, paths["throughputs"], on_sim_policy, workers)
            except OSError as exc:  # a full disk, a folder where a result file belongs
                bar.stop()
                raise _input_error("run", OSError(f"cannot write the results in {cfg.out_dir}: {exc}")) from None
            except RuntimeError as exc:  # a policy left jobs unfinished (the engine names it and the count)
                bar.stop()
                typer.echo(f"iadeep experiment run: error: {one_line(exc)}", err=True)
                raise typer.Exit(1) from None
    try:
        summary = write_report(cfg)
    except OSError as exc:
        raise _input_error("run", OSError(f"cannot write the results in {cfg.out_dir}: {exc}")) from None
    console.print(summary_table(summary))
    if never:
        console.print(f"[yellow]{never} of the {meta['jobs']} jobs can never run on this cluster (kept with --infeasible "
                      "keep): every policy reports them unschedulable, and the statistics above leave them out[/yellow]")
    console.print(f"results in [bold]{cfg.out_dir}[/bold]: summary.json, report.md, jct_cdf.png, normalised.png, queue_length.png")


@app.command("sweep")
def sweep_cmd(
    start_jobs: Annotated[Optional[str], typer.Option(help="Comma-separated start jobs (trace windows) (default: 0,20000,40000,60000 for philly, 0 for the smaller traces).")] = None,
    loads: Annotated[Optional[str], typer.Option(help="Comma-separated target mean offered loads (default 1,2).")] = None,
    seeds: Annotated[Optional[str], typer.Option(help="Comma-separated seeds (default 0,1).")] = None,
    draw: Annotated[Optional[int], typer.Option(help="Instead of a grid: this many settings drawn at random (trace among philly, the five ms-itp clusters and openb; window start; load in [0.5, 3]; mix seed; a cluster of 3-8 nodes of 4 or 8 GPUs), recorded in sweep.csv and guard.json.")] = None,
    draw_seed: Annotated[int, typer.Option(help="Seed of --draw (the same N and seed draw the same settings).")] = 0,
    from_draw: Annotated[Optional[str], typer.Option(help="Rerun the draw recorded in this guard.json exactly.")] = None,
    oracle: Annotated[bool, typer.Option(help="Also run iadeep with perfect prediction (policy row iadeep@oracle) and report its guard.")] = False,
    ceiling: Annotated[bool, typer.Option(help="Also run iadeep (oracle), antman and gandiva without interference (tools/zero_interference.py's table): the ceiling and the share of headroom iadeep captures.")] = False,
    repeats: Annotated[Optional[int], typer.Option(help="Runs of every policy per setting, each with its own measurement noise (the same jobs): the table and the guard take their mean avg JCT, and the guard says how far one run spreads (default 1; with --from-draw, the draw's).")] = None,
    workers: Annotated[int, typer.Option(help="Settings run in this many processes at once (results identical to 1).")] = 1,
    jobs: Annotated[Optional[int], typer.Option(help=f"Jobs per setting (default {_D.jobs or 400}; with --from-draw, the draw's).")] = None,
    trace: Annotated[str, typer.Option(help="Trace format.")] = _D.trace,
    virtual_cluster: Annotated[Optional[str], typer.Option(help="Philly virtual cluster / ITP cluster to keep.")] = None,
    mix: Annotated[str, typer.Option(help="Workload mix: iadeep or gavel.")] = _D.mix,
    queue: Annotated[Optional[str], typer.Option(help=f"Comma-separated queue models (fifo, backfill, kube): side by side (default {_D.queue}; with --from-draw, the draw's).")] = None,
    kube_preemption: Annotated[bool, typer.Option(help="kube queue: head-of-line preemption for the pod nothing pending is ahead of (live: the extender evicts the victim and its Job replaces it).")] = _D.kube_preemption,
    policies: Annotated[str, typer.Option(help="Comma-separated policy names.")] = ",".join(DEFAULT_POLICIES),
    predictor: Annotated[str, typer.Option(help="iadeep's interference predictor: learned or oracle (the measured table: what perfect prediction would give).")] = _D.predictor,
    throughputs_file: Annotated[Optional[str], typer.Option("--throughputs", "--throughputs-file", help="Measurements in Gavel's schema instead of the published ones (e.g. `tools/zero_interference.py`'s table: what no interference would give).")] = None,
    gpu_type: Annotated[str, typer.Option(help="Throughput measurements of this GPU type: v100, p100, k80 (or a key of --throughputs).")] = _D.gpu_type,
    out: Annotated[str, typer.Option(help="Output folder.")] = "runs/sweep",
) -> None:
    """Compare the policies over several windows x loads x seeds, or over settings drawn at random
    (--draw), x queue models; write sweep.csv, sweep.png and guard.json (the guard figures per queue model)."""
    import pandas as pd

    from iadeep.datasets import DatasetError
    from iadeep.experiment._steps import fetch_inputs
    from iadeep.experiment._sweep import check_grid, guard_lines, plot_sweep, run_draw, run_sweep
    from iadeep.report import write_json
    from iadeep.traces import TraceFormatError

    console = Console(width=None if sys.stdout.isatty() else 130)
    drawn = draw is not None or from_draw is not None
    try:
        if drawn:
            given = [f"--{n.replace('_', '-')}" for n, v in (("start_jobs", start_jobs), ("loads", loads), ("seeds", seeds),
                                                            ("virtual_cluster", virtual_cluster)) if v is not None]
            given += ["--trace"] * (trace != _D.trace) + ["--mix"] * (mix != _D.mix)
            if given:
                raise ConfigError("draw", f"a draw picks the trace, window, load, seed and cluster itself; "
                                          f"{', '.join(given)} cannot be given with it")
            if draw is not None and from_draw is not None:
                raise ConfigError("draw", "give --draw N or --from-draw FILE, not both")
            if draw is not None and draw < 1:
                raise ConfigError("draw", f"a draw needs at least one setting, got {draw}")
            if draw_seed < 0:
                raise ConfigError("draw_seed", f"must be >= 0, got {draw_seed}")
        # a rerun of a recorded draw runs it as it ran, unless an option says otherwise
        ran = _draw_run(from_draw) if from_draw is not None else {}
        jobs = jobs if jobs is not None else ran.get("jobs", _D.jobs or 400)
        queue = queue if queue is not None else ",".join(ran.get("queues", [_D.queue]))
        repeats = repeats if repeats is not None else ran.get("repeats", 1)
        if workers < 1:
            raise ConfigError("workers", f"must be >= 1, got {workers}")
        if repeats < 1:
            raise ConfigError("repeats", f"must be >= 1, got {repeats}")
        base = _registry_config(trace, dict(trace=trace, jobs=jobs, virtual_cluster=virtual_cluster, mix=mix,
                                            policies=tuple(p.strip() for p in policies.split(",") if p.strip()),
                                            kube_preemption=kube_preemption, predictor=predictor,
                                            throughputs_file=throughputs_file, gpu_type=gpu_type, out=out))
        _check_out(base.out_dir)
        queues = _name_list("queue", queue)
        bases = {q: dataclasses.replace(base, queue=q) for q in queues}  # validates each queue name
        paths = fetch_inputs(base, progress=sys.stderr.isatty())  # the first fetch of a sweep: a bar where someone watches
        if drawn:
            settings, inputs = _draw_of(base, draw, draw_seed, from_draw)
            label = lambda q: ""  # noqa: E731 (run_draw names the settings)
        else:
            # an option given empty is refused (by _number_list), not read as the default
            starts = _number_list("start_jobs", SWEEP_WINDOWS.get(trace, "0") if start_jobs is None else start_jobs, int)
            load_list = _number_list("loads", "1,2" if loads is None else loads, float)
            seed_list = _number_list("seeds", "0,1" if seeds is None else seeds, int)
            # every setting checked, the last window built, before the first setting runs
            check_grid(base, paths, starts, load_list, seed_list)
            label = (lambda q: f"{q}:") if len(queues) > 1 else (lambda q: "")
    except ConfigError as exc:
        raise usage_error(exc, _OPTIONS) from None
    except (DatasetError, OSError) as exc:
        raise _input_error("sweep", exc) from None
    if from_draw is not None:
        console.print(f"the draw of {from_draw}: {len(settings)} settings, {base.jobs} jobs a setting, queue "
                      f"{', '.join(queues)}, {repeats} run(s) a setting")
    # the table and the guard read each policy against iadeep; a sweep without it, against its first policy
    reference = "iadeep" if "iadeep" in base.policies else base.policies[0]
    zero = None
    if ceiling:
        from iadeep.interference import without_interference

        try:
            base.out_dir.mkdir(parents=True, exist_ok=True)
            zero = str(base.out_dir / "zero-interference.json")
            Path(zero).write_text(json.dumps(without_interference(json.loads(Path(paths["throughputs"]).read_text()))[0]))
        except (OSError, ValueError) as exc:
            raise _input_error("sweep", OSError(f"cannot write the zero-interference table in {base.out_dir}: {exc}")) from None
    n = (len(settings) if drawn else len(starts) * len(load_list) * len(seed_list)) * len(queues)
    with Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("settings", total=n)

        def step(setting: str) -> None:
            bar.update(task, description=setting, advance=1)

        try:
            if drawn:
                df = run_draw(bases, settings, inputs, oracle=oracle, ceiling=zero, workers=workers, on_done=step,
                              reference=reference, repeats=repeats)
            else:
                df = pd.concat([run_sweep(b, starts, load_list, seed_list, reference=reference, on_setting=step,
                                          label=label(q), write=False, oracle=oracle, ceiling=zero,
                                          repeats=repeats).assign(queue=q)
                                for q, b in bases.items()], ignore_index=True)
        except (ValueError, DatasetError, TraceFormatError, OSError) as exc:  # e.g. a window past the trace's end
            bar.stop()
            raise _input_error("sweep", exc) from None
        try:
            base.out_dir.mkdir(parents=True, exist_ok=True)
            df.to_csv(base.out_dir / "sweep.csv", index=False)
            plot_sweep(df, base.out_dir / "sweep.png", reference=reference)
        except OSError as exc:
            bar.stop()
            raise _input_error("sweep", OSError(f"cannot write the results in {base.out_dir}: {exc}")) from None
        bar.update(task, completed=n)
    table = Table(title=f"avg JCT / {reference}'s (above 1: {reference} is faster)")
    pivot = df.pivot(index="setting", columns="policy", values=f"avg_jct_vs_{reference}").reindex(df["setting"].unique())
    pivot = pivot.drop(columns=[reference], errors="ignore")  # the reference against itself: 1.00 everywhere
    table.add_column("setting")
    for name in pivot.columns:
        table.add_column(name, justify="right")
    for setting, row in pivot.iterrows():
        table.add_row(str(setting), *(f"{v:.2f}" for v in row))
    console.print(table)
    from iadeep.experiment._sweep import guard_figures

    guards = {q: guard_figures(df[df["queue"] == q]) for q in queues}
    if drawn:
        record = {"seed": None if from_draw else draw_seed, "n": len(settings), "from": from_draw,
                  "jobs": base.jobs, "queues": list(queues), "repeats": repeats,
                  "settings": [{"setting": s.name, **s.fields()} for s in settings]}
        guards = {q: {**g, "draw": record} for q, g in guards.items()}
    for q, guard in guards.items():
        for line in guard_lines(guard, q, base.policies):
            console.print(line)
    # strict JSON: an undefined ratio is null with its reason; one queue model: its figures, several: by model
    try:
        write_json(base.out_dir / "guard.json", guards[queues[0]] if len(queues) == 1 else guards)
    except OSError as exc:
        raise _input_error("sweep", OSError(f"cannot write the results in {base.out_dir}: {exc}")) from None
    console.print(f"results in [bold]{base.out_dir}[/bold]: sweep.csv, sweep.png, guard.json")


def _draw_run(from_draw: str) -> dict:
    """How the draw recorded in ``from_draw`` ran (:func:`iadeep.experiment._draw.read_draw_run`).

    Raises:
        ConfigError: the file is unreadable, records no draw or a malformed run (names ``--from-draw``).
    """
    from iadeep.experiment._draw import read_draw_run

    try:
        return read_draw_run(from_draw)
    except (OSError, ValueError) as exc:
        raise ConfigError("from_draw", one_line(exc)) from None


def _draw_of(base: ExperimentConfig, n: int | None, seed: int, from_draw: str | None):
    """The drawn settings and a function giving each setting's inputs (:func:`draw_inputs`), or
    the draw recorded in ``from_draw``.

    Raises:
        ConfigError: ``from_draw`` unreadable or recording no draw (names ``--from-draw``).
    """
    from iadeep.experiment._draw import read_draw
    from iadeep.experiment._sweep import draw_inputs

    settings, inputs = draw_inputs(base, n or 0, seed)
    if from_draw is not None:
        try:
            settings = read_draw(from_draw)
        except (OSError, ValueError) as exc:
            raise ConfigError("from_draw", one_line(exc)) from None
    return settings, inputs


from iadeep.experiment._cluster_cli import cluster_cmd  # noqa: E402

app.command("cluster")(cluster_cmd)


@app.command("compare")
def compare_cmd(
    jobs: Annotated[int, typer.Option(help="Number of jobs of the slice.")] = 30,
    start_job: Annotated[Optional[int], typer.Option(help="Skip this many jobs first (default: 40000 for Philly).")] = None,
    trace: Annotated[str, typer.Option(help="Trace format.")] = _D.trace,
    target_load: Annotated[Optional[float], typer.Option(help="Rescale arrivals to this mean offered load.")] = 2.0,
    policies: Annotated[str, typer.Option(help="Comma-separated policy names.")] = ",".join(DEFAULT_POLICIES),
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster (2 x 4 GPUs: a 30-job slice contends for them).")] = 2,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = _D.gpus_per_node,
    gpu_mem_gib: Annotated[float, typer.Option(help="Memory per GPU (GiB).")] = _D.gpu_mem_gib,
    seed: Annotated[int, typer.Option(help="Seed of the workload mix and measurement noise.")] = _D.seed,
    queue: Annotated[str, typer.Option(help="Simulator queue (kube: as kube-scheduler queues).")] = "kube",
    kube_preemption: Annotated[bool, typer.Option(help="kube queue: head-of-line preemption for the pod nothing pending is ahead of (live: the extender evicts the victim and its Job replaces it).")] = _D.kube_preemption,
    tuning: Annotated[bool, typer.Option(help="Tuning sessions in both backends (live: the node coordinator, for iadeep's tuning with the tuner and gandiva's profile and undo).")] = True,
    speedup: Annotated[float, typer.Option(help="Live time compression (emulated seconds per wall second; with --held-clock, control-plane latency takes no emulated time and 500x kept avg JCT within 3 % on a busy 100-job slice, docs: live experiments).")] = 50.0,
    timeout_s: Annotated[Optional[float], typer.Option(help="Live wall-clock bound per policy (s).")] = None,
    held_clock: Annotated[bool, typer.Option(help="Live: time stands still while kube-scheduler decides an arrived pod and while the emulator completes one (control-plane latency takes no emulated time).")] = _D.held_clock,
    out: Annotated[str, typer.Option(help="Output folder.")] = "runs/parity",
) -> None:
    """The same slice through the simulator and the live system; per-job table and parity figures."""
    from iadeep.datasets import DatasetError
    from iadeep.dev import ControlPlaneError
    from iadeep.experiment._compare import run_compare
    from iadeep.traces import TraceFormatError

    console = Console(width=None if sys.stdout.isatty() else 130)
    try:
        cfg = _registry_config(trace, dict(trace=trace, jobs=jobs, start_job=start_job, target_load=target_load,
                                           policies=tuple(p.strip() for p in policies.split(",") if p.strip()), nodes=nodes,
                                           gpus_per_node=gpus_per_node, gpu_mem_gib=gpu_mem_gib, seed=seed, queue=queue,
                                           tuning=tuning, kube_preemption=kube_preemption, speedup=speedup,
                                           timeout_s=timeout_s, held_clock=held_clock, out=out))
        _check_out(cfg.out_dir)
    except ConfigError as exc:
        raise usage_error(exc, _OPTIONS) from None
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        def on_policy(name: str, n: int):
            task = bar.add_task(f"live {name}", total=n)
            return lambda done, t=task: bar.update(t, completed=done)

        try:
            figures = run_compare(cfg, on_policy)
        except ModuleNotFoundError as exc:
            _exit_on_missing_extra("compare", "iadeep experiment compare", exc, bar)
        except (ValueError, DatasetError, TraceFormatError, FileNotFoundError, IsADirectoryError) as exc:
            bar.stop()
            raise _input_error("compare", exc) from None
        except (ControlPlaneError, TimeoutError, RuntimeError, OSError) as exc:
            bar.stop()
            typer.echo(f"iadeep experiment compare: error: {one_line(exc)}", err=True)
            raise typer.Exit(1) from None
    table = Table(title="Simulator-live parity (live relative to the simulator)")
    for col in ("policy", "avg JCT sim (h)", "avg JCT live (h)", "avg JCT", "p99", "makespan", "same partners",
                "identical pairs", "reservations left"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, f in figures.items():
        for label, g in ((name, f), (f"{name}, sim on live arrivals", f.get("on_live_arrivals"))):
            if g:
                table.add_row(label, f"{g['avg_jct_sim_s'] / 3600:.2f}", f"{g['avg_jct_live_s'] / 3600:.2f}",
                              f"{g['avg_jct_diff_rel']:+.1%}", f"{g['p99_jct_diff_rel']:+.1%}",
                              f"{g['makespan_diff_rel']:+.1%}", f"{g['partners_match']:.0%}", f"{g['pairs_identical']:.0%}",
                              str(f["reservations_left"]))
    console.print(table)
    for name, f in figures.items():
        h = f.get("harness") or {}
        parts = [f"{k.replace('_', ' ')} {d['wall_s_median']:.2f} s ({d['emulated_s_median']:.0f} emulated)"
                 for k, d in h.items() if "wall_s_median" in d]
        if parts:
            console.print(f"{name} live overheads (medians): " + ", ".join(parts))
    console.print(f"results in [bold]{cfg.out_dir}[/bold]: parity.md, parity.json, parity-<policy>.csv, sim/, live/")


def _exit_on_missing_extra(command: str, what: str, exc: ModuleNotFoundError, bar: Progress) -> NoReturn:
    """End ``iadeep experiment <command>`` with one line on stderr when ``what`` (the command line
    that needs it) needs an optional group that is not installed (:func:`iadeep._climain.missing_extra`;
    exit code 1, as for ``iadeep extender``); re-raise ``exc`` when it is about another module."""
    message = missing_extra(what, exc)
    if message is None:
        raise exc
    bar.stop()
    typer.echo(f"iadeep experiment {command}: error: {message}", err=True)
    raise typer.Exit(1) from None


def _input_error(command: str, exc: BaseException) -> typer.Exit:
    """Print an input error (a trace, a file, a window the trace does not have) as one line on
    stderr, ``iadeep experiment <command>: error: <message>``, and return the exit (code 2) to raise."""
    typer.echo(f"iadeep experiment {command}: error: {one_line(exc)}", err=True)
    return typer.Exit(2)


def _check_out(out: Path) -> None:
    """Check that the output folder ``out`` exists or can be made, leaving nothing behind.

    The folders it would create are made and removed again, so a bad ``--out`` is refused ahead of
    any fetch, and a command refused later leaves no empty folder.

    Raises:
        ConfigError: ``out``, or a folder above it, is a file; or ``out`` cannot be made (the
            message names ``--out``, the path and the reason).
    """
    made = [p for p in (out, *out.parents) if not p.exists() and not p.is_symlink()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), out)
        raise ConfigError("out", f"{out} is a file, not a folder" if above == out
                          else f"{out}: {above} is a file, not a folder") from None
    except OSError as exc:
        raise ConfigError("out", f"{out}: cannot make the folder: {exc.strerror or exc}") from None
    for p in made:  # deepest first
        try:
            p.rmdir()
        except OSError:
            break


def _registry_config(trace: str, fields: dict) -> ExperimentConfig:
    """The configuration of a command that reads its trace from the dataset registry (``sweep``,
    ``compare``: they have no ``--trace-file``).

    Raises:
        ConfigError: as :class:`ExperimentConfig`; a trace the registry does not hold names ``--trace``.
    """
    try:
        return ExperimentConfig(**fields)
    except ConfigError as exc:
        if exc.parameter == "trace_file":
            known = ", ".join(t for t, d in TRACE_DATASETS.items() if d is not None)
            raise ConfigError("trace", f"trace {trace!r} has no dataset in the registry; this command runs the "
                              f"registry's traces ({known}); `iadeep experiment run --trace-file` reads a file") from None
        raise


def _name_list(name: str, text: str) -> list[str]:
    """A comma-separated option as names, each once.

    Raises:
        ConfigError: no name, or a name given twice (the message names the option).
    """
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise ConfigError(name, f"expected comma-separated names, got {text!r}")
    twice = sorted({x for x in names if names.count(x) > 1})
    if twice:
        raise ConfigError(name, f"{', '.join(twice)} given more than once")
    return names


def _number_list(name: str, text: str, kind: type[int] | type[float]) -> list:
    """A comma-separated option as numbers (each once: :func:`iadeep.experiment._sweep.check_grid`).

    Raises:
        ConfigError: an item is not a number of that kind (the message names the option).
    """
    try:
        return [kind(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(name, f"expected comma-separated {kind.__name__}s, got {text!r}") from None


def summary_table(summary: dict) -> Table:
    """A rich table of the per-policy metrics (hours)."""
    table = Table(title="Per-policy summary (times in hours)")
    for col in ("policy", "avg JCT", "vs iadeep", "p50 JCT", "p99 JCT", "avg queueing", "makespan", "GPU util", "mean slowdown"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    pol = summary["policies"]
    ref = pol.get("iadeep")
    for name, s in pol.items():
        def h(x: float | None) -> str:
            return "-" if x is None else f"{x / 3600:.2f}"

        rel = f"{s['avg_jct_s'] / ref['avg_jct_s']:.2f}x" if ref and ref["avg_jct_s"] and s["avg_jct_s"] is not None else "-"
        table.add_row(name, h(s["avg_jct_s"]), rel, h(s["p50_jct_s"]), h(s["p99_jct_s"]), h(s["avg_queueing_s"]),
                      h(s["makespan_s"]), f"{s['gpu_utilisation']:.2f}",
                      "-" if s["mean_slowdown"] is None else f"{s['mean_slowdown']:.2f}")
    return table
