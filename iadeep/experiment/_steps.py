"""The experiment's steps as plain functions over files in the output folder.

The CLI runs them in sequence (:func:`run_experiment`); the Airflow DAG runs each as a task (one
mapped task per policy) and passes only the output folder between them. Files written:

- ``workload.csv`` / ``workload.json``: the job table and its metadata (trace name, sha256,
  jobs, offered load mean and peak, dropped rows);
- ``jobs-<policy>.csv``, ``timeline-<policy>.csv``, ``metrics-<policy>.json`` per policy;
- ``summary.json``, ``report.md``, ``jct_cdf.png``, ``normalised.png``, ``queue_length.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import queue as queue_mod
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iadeep.experiment._cluster_cli import REGISTRY_CLUSTERS, registry_cluster
from iadeep.experiment._config import TRACE_DATASETS, ExperimentConfig
from iadeep.interference import InterferenceModel
from iadeep.policy import make_policy
from iadeep.report import plot_jct_cdf, plot_normalised_bars, plot_queue_length, plot_service_series, write_json, write_markdown, write_summary_json
from iadeep.sim import ClusterSpec, KubeQueueSettings, SimResult, SimSettings, feasibility, load_cluster, simulate, type_speeds
from iadeep.traces import TRACE_FORMATS

__all__ = ["run_live", "sim_settings", "fetch_inputs", "build_workload", "check_measured", "run_policy", "run_policies",
           "start_workers", "write_report", "run_experiment", "cluster_of", "load_workload"]

THROUGHPUTS = ("gavel-throughputs", "simulation_throughputs.json")


def cluster_of(cfg: ExperimentConfig) -> ClusterSpec:
    """The :class:`ClusterSpec` an experiment simulates: ``cluster_file`` if set, else nodes x GPUs.

    ``cluster_file`` is a YAML file (:func:`iadeep.sim.load_cluster`) or ``"openb"`` (the registry's
    openb node list, :func:`iadeep.sim.cluster_from_openb`).

    Raises:
        FileNotFoundError, iadeep.sim.ClusterFileError: an unusable cluster file.
    """
    if cfg.cluster_file in REGISTRY_CLUSTERS:
        return registry_cluster(cfg.cluster_file)
    if cfg.cluster_file:
        return load_cluster(cfg.cluster_file)
    return ClusterSpec(cfg.nodes, cfg.gpus_per_node, cfg.gpu_mem_gib)


def _cluster_doc(cfg: ExperimentConfig, cluster: ClusterSpec) -> dict[str, Any]:
    return {"nodes": cluster.nodes, "gpus_per_node": cluster.gpus_per_node, "gpu_mem_gib": cluster.gpu_mem_gib,
            "gpu_type": cfg.gpu_type, "total_gpus": cluster.total_gpus, "description": cluster.describe(),
            "cluster_file": cfg.cluster_file}


def _load_reasons(n_jobs: int) -> dict[str, str]:
    why = "no job left" if n_jobs == 0 else "every job is submitted at the same instant (span 0 s): load per second is unbounded"
    return {"offered_load_mean": why, "offered_load_peak": why}


def sim_settings(cfg: ExperimentConfig) -> SimSettings:
    """The simulator settings of an experiment (queue, backoff from the scheduler configuration).

    Raises:
        ValueError: the scheduler configuration cannot be read.
    """
    kube = KubeQueueSettings.from_scheduler_config(cfg.scheduler_config)
    if cfg.kube_time_scale != 1.0:  # kube-scheduler backs off in wall seconds: emulated ones are x speedup
        k = cfg.kube_time_scale
        kube = dataclasses.replace(kube, initial_backoff_s=kube.initial_backoff_s * k, max_backoff_s=kube.max_backoff_s * k,
                                   max_unschedulable_s=kube.max_unschedulable_s * k)
    seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed
    return SimSettings(seed=seed, trial_s=cfg.trial_s, measurement_noise=cfg.measurement_noise, backfill=cfg.backfill,
                       queue=cfg.queue, kube=kube, tuning=cfg.tuning, gang_placement=cfg.gang_placement)


def fetch_inputs(cfg: ExperimentConfig, progress: bool = True, cache_dir: str | Path | None = None) -> dict[str, str]:
    """Fetch (or locate) the trace and the throughput measurements; check that a cluster file exists.

    Args:
        cache_dir: the dataset cache; default ``$IADEEP_CACHE_DIR``, else the registry's user cache
            folder (:meth:`iadeep.datasets.Settings.resolve`). The Airflow DAGs pass the Variable
            ``iadeep_dataset_dir``'s folder.

    Returns:
        ``{"trace": path, "throughputs": path}``.

    Raises:
        iadeep.datasets.DatasetError: a download or checksum failed.
        iadeep._params.ConfigError: ``trace_file``, ``throughputs_file`` or ``cluster_file`` names
            no file, or a folder where the trace format reads one file (the message names the
            parameter and the path).
    """
    from iadeep._params import ConfigError
    from iadeep.datasets import fetch

    # the user's own files first: a wrong path fails before any download
    if cfg.cluster_file and cfg.cluster_file not in REGISTRY_CLUSTERS:
        if Path(cfg.cluster_file).is_dir():
            raise ConfigError("cluster_file", f"{cfg.cluster_file}: is a folder, not a cluster file")
        if not Path(cfg.cluster_file).is_file():
            raise ConfigError("cluster_file", f"{cfg.cluster_file}: no such file")
    if cfg.trace_file and not Path(cfg.trace_file).exists():
        raise ConfigError("trace_file", f"{cfg.trace_file}: no such file or folder")
    fmt = TRACE_FORMATS.get(cfg.trace)
    if cfg.trace_file and Path(cfg.trace_file).is_dir() and fmt is not None and not fmt.reads_folder:
        raise ConfigError("trace_file", f"{cfg.trace_file}: is a folder; trace {cfg.trace!r} reads one file ({fmt.path})")
    if cfg.throughputs_file:
        thr = Path(cfg.throughputs_file)
        if not thr.is_file():
            raise ConfigError("throughputs_file", f"{thr}: {'is a folder' if thr.is_dir() else 'no such file'}")
        try:  # readable for the GPU type, before a later step blames another option
            InterferenceModel.from_file(thr, cfg.gpu_type)
        except ValueError as exc:
            raise ConfigError("throughputs_file", str(exc)) from None  # names the file and what is wrong
    else:
        thr = fetch(THROUGHPUTS[0], progress=progress, cache_dir=cache_dir) / THROUGHPUTS[1]
    if cfg.trace_file:
        trace = Path(cfg.trace_file)
    else:
        dataset, inner = TRACE_DATASETS[cfg.trace]  # type: ignore[misc]
        trace = fetch(dataset, progress=progress, cache_dir=cache_dir) / inner
    return {"trace": str(trace), "throughputs": str(thr)}


def build_workload(cfg: ExperimentConfig, trace_path: str | Path,
                   throughputs: str | Path | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Load the trace with the experiment's options, drop jobs that can never run, write ``workload.csv``/``.json``.

    Jobs the cluster can never run (:func:`iadeep.sim.feasibility`: ``wider_than_cluster``,
    ``exceeds_gpu_memory``) are dropped and counted (``infeasible="drop"``) or kept (``"keep"``:
    the simulator reports them as unschedulable). They are dropped before the window is cut
    (:attr:`iadeep.traces.TraceOptions.exclude`), so that the workload has ``jobs`` jobs the cluster
    can run and ``target_load`` is the load of those (a 12-GiB cluster got 179 of 200 jobs at load
    0.95 when they were dropped after the cut).

    Args:
        throughputs: Gavel's measurements (for job memory); default: fetched through the registry.

    Returns:
        ``(job_table, metadata)``; metadata has name, sha256, jobs, offered_load_mean/peak (``None``
        when undefined, with ``null_reasons``), dropped, flagged, skipped_rows, infeasible_kept.

    Raises:
        ValueError: no job left after the filters and drops (the message gives the counts).
    """
    df, meta = _load_window(cfg, trace_path, throughputs)
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    clear_results(out)  # a new run: no file of an earlier one stays beside it
    df.to_csv(out / "workload.csv", index=False)
    meta = write_json(out / "workload.json", meta, _load_reasons(len(df)))
    return df, meta


def _load_window(cfg: ExperimentConfig, trace_path: str | Path,
                 throughputs: str | Path | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """:func:`build_workload`'s table and metadata, without writing them."""
    from iadeep.traces import load_trace, offered_load

    cluster = cluster_of(cfg)
    if throughputs is None:
        throughputs = fetch_inputs(cfg, progress=False)["throughputs"]
    model = InterferenceModel.from_file(throughputs, cfg.gpu_type)
    known = model.types

    def cannot_run(jobs: pd.DataFrame) -> np.ndarray:
        # types without measurements are left to check_measured, which names them
        types = pd.MultiIndex.from_arrays([jobs["model"].astype(str), jobs["batch_size"].astype(np.int64)])
        measured = types.isin([(t.model, t.batch_size) for t in known])
        why = np.full(len(jobs), "", dtype=object)
        if measured.any():
            why[measured] = feasibility(jobs.loc[measured], model, cluster)
        return why

    opts = _trace_options(cfg, cluster, cannot_run)
    df = load_trace(cfg.trace, trace_path, opts)
    dropped = {k: int(v) for k, v in dict(df.attrs.get("dropped", {})).items()}
    check_measured(cfg, df, throughputs, model)  # every job type measured, before anything prices one
    why = feasibility(df, model, cluster)
    kept_infeasible = {}
    for reason in sorted(set(why.tolist()) - {""}):
        n = int((why == reason).sum())
        if cfg.infeasible == "drop":
            dropped[reason] = dropped.get(reason, 0) + n
        else:
            kept_infeasible[reason] = n
    if cfg.infeasible == "drop" and (why != "").any():
        attrs = df.attrs
        df = df.loc[why == ""].reset_index(drop=True)
        df.attrs = attrs
        if len(df) == 0:
            raise ValueError(f"{cfg.trace}: no job of {trace_path} can run on the cluster ({cluster.describe()}); "
                             f"dropped {dropped}")
    load = offered_load(df, cluster.total_gpus)
    flagged = {"censored": int(df["censored"].sum())} if df["censored"].any() else {}
    zero = int(((df["duration"] == 0) & ~df["censored"]).sum())  # the jobs of the final table
    flagged.update({k: int(v) for k, v in dict(df.attrs.get("flagged", {})).items() if k not in ("censored", "zero_duration")})
    if zero:
        flagged["zero_duration"] = zero
    meta = {
        "name": cfg.trace,
        "source": str(trace_path),
        "sha256": df.attrs.get("sha256"),
        "jobs": int(len(df)),
        "multi_gpu_jobs": int((df["num_gpus"] > 1).sum()),
        "offered_load_mean": float(load.mean_load),
        "offered_load_peak": float(load.peak_load),
        "span_s": float(load.span_s),
        "dropped": dropped,
        "flagged": flagged,
        # jobs of 0 s (not censored): "kept" (they complete at once, in the JCT statistics) or "dropped"
        "zero_duration": "dropped" if cfg.drop_zero_duration else "kept",
        "infeasible_kept": kept_infeasible,
        "skipped_rows": int(df.attrs.get("skipped_rows", 0)),
    }
    return df, meta


def _trace_options(cfg: ExperimentConfig, cluster, cannot_run) -> Any:
    """The :class:`iadeep.traces.TraceOptions` of ``cfg`` on ``cluster`` (``cannot_run``: the
    exclusion rule of :func:`build_workload`)."""
    from iadeep.traces import TraceOptions

    return TraceOptions(
        window_start_s=cfg.window_start_s or 0.0,
        window_end_s=cfg.window_end_s if cfg.window_end_s is not None else math.inf, virtual_cluster=cfg.virtual_cluster,
        n_jobs=cfg.jobs, start_job=cfg.start_job, max_gpus=cfg.max_gpus, arrival_scale=cfg.arrival_scale,
        iadeep_arrival_rule=cfg.iadeep_arrival_rule, target_load=cfg.target_load, cluster_gpus=cluster.total_gpus,
        mix=cfg.mix, seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows, strict=cfg.strict,
        keep_wider=cfg.infeasible == "keep", exclude=cannot_run if cfg.infeasible == "drop" else None,
        drop_zero_duration=cfg.drop_zero_duration,
    )


def count_jobs(cfg: ExperimentConfig, trace_path: str | Path, throughputs: str | Path) -> int:
    """How many jobs the trace holds for ``cfg`` after its filters and the drop of jobs the
    cluster can never run, from its first job on (``start_job``, ``jobs`` and the window ignored):
    the jobs a window of ``cfg`` can start at."""
    full = dataclasses.replace(cfg, start_job=0, jobs=0, window_start_s=None, window_end_s=None)
    return len(_load_window(full, trace_path, throughputs)[0])


#: The files a run writes in its output folder (``build_workload``, ``run_policy``, ``write_report``).
RESULT_FILES = ("workload.csv", "workload.json", "jobs-*.csv", "timeline-*.csv", "metrics-*.json", "summary.json",
                "report.md", "jct_cdf.png", "normalised.png", "queue_length.png")


def clear_results(out: Path) -> int:
    """Remove an earlier run's result files (:data:`RESULT_FILES`) from ``out``; returns how many.

    A new run starts from ``build_workload``: without this, a reused folder kept the per-policy
    files of policies the new run does not have, and an interrupted run left the old
    ``summary.json`` and plots beside the new workload, a folder that looked complete but mixed
    two runs. Other files (and folders) are left alone.
    """
    n = 0
    for pattern in RESULT_FILES:
        for f in out.glob(pattern):
            if f.is_file() or f.is_symlink():
                f.unlink()
                n += 1
    return n


def load_workload(out: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read what :func:`build_workload` wrote."""
    df = pd.read_csv(out / "workload.csv", dtype={"job_id": str, "gpu_spec": str}, keep_default_na=False,
                     na_values={"gpu_milli": [""]})
    return df, json.loads((out / "workload.json").read_text())


def check_measured(cfg: ExperimentConfig, workload: pd.DataFrame, throughputs: str | Path,
                   model: InterferenceModel | None = None) -> None:
    """Every job type of ``workload`` has measurements in ``throughputs`` for ``cfg.gpu_type``.

    Args:
        model: that file's model when the caller has read it already (else it is read here).

    Raises:
        ValueError: the file cannot be read for that GPU type, or job types are missing (named,
            e.g. a profile made for fewer batch sizes than the mix draws).
    """
    from iadeep.jobtypes import JobType

    model = model or InterferenceModel.from_file(throughputs, cfg.gpu_type)
    known = set(model.types)
    wanted = {JobType(str(m), int(b)) for m, b in workload[["model", "batch_size"]].drop_duplicates().itertuples(index=False)}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"{throughputs} has no {cfg.gpu_type} measurements of {len(missing)} job type(s) the workload "
                         f"needs: {', '.join(t.name for t in missing)} (profile them, or choose another mix)")


def policy_flags(cfg: ExperimentConfig) -> dict[str, Any]:
    """iadeep's constructor options that follow the experiment's queue: head-of-line preemption
    with no job blocked behind (``preempt_unblocked``) under the ``kube`` queue with
    ``kube_preemption``, as the kubernetes backend gives its extender; the arrival price
    (``price_arrivals``) under the queues that let a later job start first (``kube``, as the
    extender has it, and ``backfill``): under strict FIFO the jobs arriving wait behind a job held
    for them as they would beside it; a slowed gang's pricing (``slowdown_ends``) under the
    ``kube`` queue, as the extender has it (measured better there, neutral under FIFO); a gang's
    partner priced once (``partner_once``) under strict FIFO, where it was measured better on
    three draws (docs/design/2026-12-05-runs-with-their-own-noise.md; mixed under ``kube``)."""
    flags: dict[str, Any] = {}
    if cfg.queue == "kube" and cfg.kube_preemption:
        flags["preempt_unblocked"] = True
    if cfg.queue == "kube":
        flags["slowdown_ends"] = True
    if cfg.queue != "fifo":
        flags["price_arrivals"] = True
    else:
        flags["partner_once"] = True
    return flags


def run_policy(cfg: ExperimentConfig, name: str, workload: pd.DataFrame, throughputs: str | Path,
               progress: Callable[[int], None] | None = None, options: dict[str, Any] | None = None) -> SimResult:
    """Simulate one policy and write its per-job CSV, timeline and metrics.

    Args:
        options: keyword arguments of the policy's constructor on top of the config's (e.g.
            ``{"colocation_limit": 1}``; the regression DAG uses it to try a changed parameter).
    """
    model = InterferenceModel.from_file(throughputs, cfg.gpu_type)
    if cfg.whole_gib:  # as the live backend requests and reserves it
        model = model.whole_gib()
    kwargs: dict[str, Any] = {"predictor": cfg.predictor, **policy_flags(cfg)} if name == "iadeep" else {}
    policy = make_policy(name, model, **{**kwargs, **(options or {})})
    settings = sim_settings(cfg)
    cluster = cluster_of(cfg)
    models = set(cluster.gpu_arrays()[3].tolist()) - {""}
    speeds = type_speeds(throughputs, model) if models else None
    t0 = time.perf_counter()
    result = simulate(workload, policy, model, cluster, settings, progress,
                      infeasible="skip" if cfg.infeasible == "keep" else "raise", speeds=speeds)
    wall = time.perf_counter() - t0
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    result.jobs.to_csv(out / f"jobs-{name}.csv", index=False)
    result.timeline.to_csv(out / f"timeline-{name}.csv", index=False)
    metrics = {**result.summary(cfg.include_censored), "busy_gpu_seconds": result.busy_gpu_seconds,
               "total_gpus": result.total_gpus, "wall_s": wall}
    write_json(out / f"metrics-{name}.json", metrics)
    return result


def run_policies(cfg: ExperimentConfig, workload: pd.DataFrame, throughputs: str | Path,
                 on_policy: Callable[[str, int], Callable[[int], None]] | None = None,
                 workers: int | None = None) -> None:
    """Simulate every policy of ``cfg`` (:func:`run_policy` each), one process per policy.

    Each policy's simulation depends only on ``cfg``, the workload and the measurements (its
    random streams are seeded from ``cfg.seed``), so the files written are the same, byte for byte,
    whatever the number of processes; only ``wall_s`` in ``metrics-<policy>.json`` differs.

    Args:
        on_policy: called as ``on_policy(name, n_jobs)`` for every policy before any starts; returns
            that policy's progress callback ``progress(done_jobs)``. With several processes the
            workers report at most every 1 % of the jobs, and once at their end.
        workers: processes at most (default ``os.cpu_count()``; never more than the policies);
            1 runs the policies one after the other in this process. The workers are forked from a
            ``forkserver`` process that has imported this module once (``spawn`` where there is no
            forkserver), so no worker inherits this process's threads.

    Raises:
        ValueError: ``workers`` is below 1.
        OSError: a result file cannot be written (from the worker that failed; the others finish).
    """
    names = list(cfg.policies)
    n = len(workload)
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    workers = min(workers or os.cpu_count() or 1, len(names))
    callbacks = {name: on_policy(name, n) for name in names} if on_policy else {}
    if workers <= 1:
        for name in names:
            run_policy(cfg, name, workload, throughputs, callbacks.get(name))
        return
    ctx = _worker_context()
    reports = ctx.Queue() if callbacks else None
    shown = dict.fromkeys(names, 0)

    def show(name: str, done: int) -> None:  # messages may arrive after the worker's result: never go back
        if done > shown[name]:
            shown[name] = done
            callbacks[name](done)

    def drain() -> None:
        while reports is not None:
            try:
                show(*reports.get_nowait())
            except queue_mod.Empty:
                return

    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(reports,)) as pool:
        pending = {pool.submit(_policy_worker, cfg, name, workload, throughputs) for name in names}
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                drain()
                for future in finished:
                    name, done = future.result()
                    if callbacks:
                        show(name, done)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    drain()


def _worker_context() -> Any:
    """The multiprocessing context of :func:`run_policies`' workers: ``forkserver`` with this
    module preloaded in the server (each worker then starts without importing pandas, numpy and
    the simulator again), else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def start_workers(cfg: ExperimentConfig, workers: int | None = None) -> None:
    """Start the process the workers of :func:`run_policies` fork from, when it will have any, so
    that its imports overlap with reading the trace; no effect otherwise (one policy, ``workers`` 1,
    the kubernetes backend, or no forkserver on this platform)."""
    if cfg.backend != "simulator" or len(cfg.policies) < 2 or (workers or os.cpu_count() or 1) < 2:
        return
    if _worker_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


_reports: Any = None  # a worker's progress queue (:func:`run_policies`)


def _init_worker(reports: Any) -> None:
    global _reports
    _reports = reports


def _policy_worker(cfg: ExperimentConfig, name: str, workload: pd.DataFrame, throughputs: str | Path) -> tuple[str, int]:
    """One policy of :func:`run_policies` in a worker; returns ``(name, jobs done at the end)``."""
    step = max(1, len(workload) // 100)
    last = [0, 0]  # done last reported, done last seen

    def report(done: int) -> None:
        last[1] = done
        if _reports is not None and (done - last[0] >= step or done == len(workload)):
            last[0] = done
            _reports.put((name, done))

    run_policy(cfg, name, workload, throughputs, report)
    return name, last[1]


def run_live(cfg: ExperimentConfig, workload: pd.DataFrame, throughputs: str | Path,
             on_policy: Callable[[str, int], Callable[[int], None]] | None = None) -> dict[str, dict[str, Any]]:
    """The kubernetes backend: every policy on the local control plane (kwok GPU nodes, the real
    kube-scheduler, our extender, the GPU emulator, and with ``cfg.tuning`` the coordinator and
    the tuner for the policies in :data:`~iadeep.experiment._live.TUNED_POLICIES`;
    :mod:`iadeep.experiment._live`); writes the
    same per-policy files as :func:`run_policy`, with the live metrics. Returns them by policy.

    Raises:
        TimeoutError: a policy's Jobs did not all finish within ``cfg.timeout_s``.
        iadeep.dev.ControlPlaneError: the control plane is not built (``make controlplane``) or did not start.
    """
    from iadeep.experiment._live import TUNED_POLICIES, LiveSettings, iter_runs, run_live_policy
    from iadeep.experiment._livecluster import LocalCluster
    from iadeep.state import EtcdStateStore, StateSettings

    model = InterferenceModel.from_file(throughputs, cfg.gpu_type)
    cluster = cluster_of(cfg)
    live = LiveSettings(speedup=cfg.speedup, timeout_s=cfg.timeout_s)
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    all_metrics = {}
    if cfg.kubeconfig:
        return {cfg.policies[0]: _run_user_cluster(cfg, workload, model, cluster, live, on_policy)}
    with LocalCluster(cluster, Path(throughputs), workdir=out / "live") as lc:
        for name, run in iter_runs(list(cfg.policies)):
            prefix = lc.prepare(run, name, seed=cfg.seed, speedup=cfg.speedup, held_clock=cfg.held_clock,
                                tuning=cfg.tuning and name in TUNED_POLICIES, trial_s=cfg.trial_s,
                                preemption=name == "iadeep" and policy_flags(cfg).get("preempt_unblocked", False))
            store = EtcdStateStore(StateSettings(endpoints=[lc.etcd.endpoint], prefix=prefix))
            try:
                cb = on_policy(name, len(workload)) if on_policy else None
                result, live_metrics = run_live_policy(lc.api, workload, model, cluster, policy=name, run=run,
                                                       settings=dataclasses.replace(live, clock_file=lc.clock_file), store=store,
                                                       progress=cb)
            finally:
                store.close()
            all_metrics[name] = _write_live(out, name, result, live_metrics, cluster_timings_s=dict(lc.timings),
                                            tuning_rounds=lc.tuning_rounds())
            series = lc.service_series()
            if series is not None:  # the services' series Prometheus recorded (the report plots them)
                write_json(out / f"prometheus-{name}.json", series)
    return all_metrics


def _write_live(out: Path, name: str, result: SimResult, live_metrics: dict[str, Any], **extra: Any) -> dict[str, Any]:
    result.jobs.to_csv(out / f"jobs-{name}.csv", index=False)
    result.timeline.to_csv(out / f"timeline-{name}.csv", index=False)
    metrics = {**result.summary(), "busy_gpu_seconds": result.busy_gpu_seconds, "total_gpus": result.total_gpus,
               **live_metrics, **extra}
    (out / f"metrics-{name}.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def _run_user_cluster(cfg: ExperimentConfig, workload: pd.DataFrame, model: InterferenceModel, cluster: Any,
                      live: Any, on_policy: Callable[[str, int], Callable[[int], None]] | None) -> dict[str, Any]:
    """One policy's replay on the cluster of ``cfg.kubeconfig`` (:class:`~iadeep.experiment._livecluster.UserCluster`).

    Raises:
        FileNotFoundError: the kubeconfig does not exist.
        RuntimeError: the cluster cannot be reached, or has no node the extender can use.
    """
    import os

    from iadeep.experiment._live import iter_runs, run_live_policy
    from iadeep.experiment._livecluster import UserCluster
    from iadeep.state import EtcdStateStore, StateSettings

    name, run = next(iter_runs(list(cfg.policies)))
    store = EtcdStateStore(StateSettings()) if os.environ.get("IADEEP_ETCD_ENDPOINTS") else None
    try:
        with UserCluster(Path(cfg.kubeconfig)) as uc:  # type: ignore[arg-type]
            cb = on_policy(name, len(workload)) if on_policy else None
            result, live_metrics = run_live_policy(uc.api, workload, model, cluster, policy=name, run=run,
                                                   settings=live, store=store, progress=cb, pin_nodes=False)
    finally:
        if store is not None:
            store.close()
    return _write_live(cfg.out_dir, name, result, live_metrics, kubeconfig=str(cfg.kubeconfig))


def _load_result(out: Path, name: str) -> SimResult:
    metrics = json.loads((out / f"metrics-{name}.json").read_text())
    return SimResult(name, pd.read_csv(out / f"jobs-{name}.csv", dtype={"job_id": str}), pd.read_csv(out / f"timeline-{name}.csv"),
                     int(metrics["total_gpus"]), float(metrics["busy_gpu_seconds"]))


def write_report(cfg: ExperimentConfig, names: list[str] | None = None) -> dict[str, Any]:
    """Write ``summary.json``, ``report.md`` and the plots from the per-policy files.

    Raises:
        FileNotFoundError: a policy's results are missing from the output folder.
    """
    out = cfg.out_dir
    names = list(names or cfg.policies)
    results = {n: _load_result(out, n) for n in names}
    _, meta = load_workload(out)
    summaries = {n: r.summary(cfg.include_censored) for n, r in results.items()}
    cluster = _cluster_doc(cfg, cluster_of(cfg))
    summary = write_summary_json(out / "summary.json", meta, cluster, cfg.seed, summaries, extra={"config": cfg.to_dict()})
    plots = {
        "JCT CDF": plot_jct_cdf(results, out / "jct_cdf.png").name,
        # the plot's reference: iadeep, or the first policy of a run without it
        f"normalised to {'iadeep' if 'iadeep' in summaries else names[0]}": plot_normalised_bars(summaries, out / "normalised.png").name,
        "queue length": plot_queue_length(results, out / "queue_length.png").name,
    }
    series = {n: json.loads((out / f"prometheus-{n}.json").read_text()) for n in names if (out / f"prometheus-{n}.json").is_file()}
    if series:  # a live run with Prometheus (iadeep.experiment._prometheus)
        plots["services' metrics"] = plot_service_series(series, out / "services.png").name
    write_markdown(out / "report.md", summary, plots)
    return summary


def run_experiment(cfg: ExperimentConfig, on_policy: Callable[[str, int], Callable[[int], None]] | None = None,
                   progress: bool = True, workers: int = 1) -> dict[str, Any]:
    """All steps in sequence; returns the ``summary.json`` content.

    Args:
        on_policy: called as ``on_policy(name, n_jobs)`` before each simulation; returns the
            per-job progress callback (the CLI uses it for a progress bar).
        progress: show download progress bars.
        workers: processes for the simulator's policies (:func:`run_policies`); 1: in this process.
    """
    paths = fetch_inputs(cfg, progress=progress)
    workload, _ = build_workload(cfg, paths["trace"], paths["throughputs"])
    if cfg.backend == "kubernetes":
        run_live(cfg, workload, paths["throughputs"], on_policy)
        return write_report(cfg)
    run_policies(cfg, workload, paths["throughputs"], on_policy, workers)
    return write_report(cfg)
