"""``iadeep bench-job`` (train one workload) and ``iadeep profile`` (co-location throughputs).

Thin: parse flags, build settings, call :func:`~iadeep.training.run` /
:func:`~iadeep.training.profile`. torch is imported only when a command runs, so ``iadeep``
itself works without the ``workloads`` extra.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

__all__ = ["bench_job_cmd", "profile_cmd"]


class ReportTo(str, Enum):
    auto = "auto"
    etcd = "etcd"
    log = "log"


def _need_torch(console: Console) -> None:
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as exc:
        console.print(f"[red]error:[/red] the training workloads need torch and torchvision ({exc}); "
                      "install the extra: pip install 'iadeep[workloads]'")
        raise typer.Exit(2) from None


def _reporter(report: ReportTo, interval_s: float, console: Console):  # noqa: ANN202
    from iadeep.state import EtcdStateStore, StateSettings, local_endpoint
    from iadeep.training._report import LogReporter, StateReporter

    settings = StateSettings()
    if report is ReportTo.log or (report is ReportTo.auto and not settings.endpoints and not local_endpoint(settings)):
        return LogReporter(), None
    store = EtcdStateStore(settings)
    if not store.healthy():
        console.print(f"[red]error:[/red] etcd at {', '.join(store.settings.endpoints)} does not answer")
        raise typer.Exit(2)
    return StateReporter(store, interval_s=interval_s), store


def bench_job_cmd(
    model: Annotated[str, typer.Argument(help="Workload: vgg16, resnet50, squeezenet, lstm, neumf.")],
    batch_size: Annotated[Optional[int], typer.Option(help="Starting batch size (default: the workload's).")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Learning rate at the starting batch size (default: the workload's, scaled).")] = None,
    max_epochs: Annotated[Optional[int], typer.Option(help="Stop after this many epochs (default: the workload's).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Stop after this many steps in all (smoke runs).")] = None,
    target: Annotated[Optional[float], typer.Option(help="Target metric (default: the workload's).")] = None,
    patience: Annotated[Optional[int], typer.Option(help="Evaluations at the target before stopping.")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="Dataset folder (local or NFS) (default: fetched through the registry).")] = None,
    synthetic: Annotated[bool, typer.Option(help="Generated inputs of the real shapes (no dataset).")] = False,
    tiny: Annotated[bool, typer.Option(help="Tiny-input mode: a few hundred samples.")] = False,
    checkpoint_dir: Annotated[Optional[Path], typer.Option(help="Checkpoint here and resume from here.")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Also checkpoint every this many steps (0: epoch ends only).")] = 500,
    device: Annotated[str, typer.Option(help="auto (CUDA when present), cpu, cuda, cuda:N.")] = "auto",
    threads: Annotated[Optional[int], typer.Option(help="torch CPU threads.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of initialisation and sample order.")] = 0,
    report: Annotated[ReportTo, typer.Option(help="etcd (IADEEP_ETCD_* or the local etcd), log, or auto.")] = ReportTo.auto,
    report_interval_s: Annotated[float, typer.Option(help="At most one throughput report per this many seconds.")] = 1.0,
    mem_gib: Annotated[Optional[float], typer.Option(help="GPU memory this job was given (GiB), for its job record (default: the estimate).")] = None,
    pod_name: Annotated[str, typer.Option(envvar="IADEEP_POD_NAME", help="Pod name (downward API).")] = "local",
    pod_namespace: Annotated[str, typer.Option(envvar="IADEEP_POD_NAMESPACE", help="Pod namespace.")] = "default",
    pod_uid: Annotated[Optional[str], typer.Option(envvar="IADEEP_POD_UID", help="Pod UID (default: local-<model>).")] = None,
) -> None:
    """Train one workload: report throughput, follow the assigned batch size, checkpoint, resume."""
    console = Console(stderr=True)
    _need_torch(console)
    from iadeep.datasets import DatasetError
    from iadeep.training._data import WorkloadDataError
    from iadeep.training._runner import RunSettings, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        settings = RunSettings(
            model=model, batch_size=batch_size, lr=lr, max_epochs=max_epochs, max_steps=max_steps, target=target,
            patience=patience, data_dir=data_dir, synthetic=synthetic, tiny=tiny, checkpoint_dir=checkpoint_dir,
            checkpoint_every_steps=checkpoint_every, device=device, threads=threads, seed=seed,
            pod_uid=pod_uid or f"local-{model}", namespace=pod_namespace, name=pod_name, mem_gib=mem_gib)
        reporter, store = _reporter(report, report_interval_s, console)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a pod being deleted: checkpoint and leave
    try:
        result = run(settings, reporter, stop=stop)
    except (ValueError, WorkloadDataError, DatasetError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    finally:
        if store is not None:
            store.close()
    o = result.outcome
    rate = o.step / result.train_s if result.train_s > 0 else 0.0
    console.print(f"{model}: {o.reason} after {o.step} steps ({o.epoch} epochs) on {result.device}, "
                  f"{result.samples} samples, {rate:.2f} steps/s in this process; metric {o.metric}; "
                  f"batch sizes {result.batch_sizes}")


def profile_cmd(
    out: Annotated[Path, typer.Option(help="Output JSON (Gavel's simulation_throughputs.json schema).")] = Path("throughputs.json"),
    models: Annotated[str, typer.Option(help="Comma-separated workloads, one per Gavel family.")] = "resnet50,squeezenet,lstm,neumf",
    batch_sizes: Annotated[Optional[str], typer.Option(help="Batch sizes for every workload, comma-separated (default: Gavel's per family).")] = None,
    window_s: Annotated[float, typer.Option(help="Seconds per measurement window.")] = 10.0,
    warmup_steps: Annotated[int, typer.Option(help="Steps before each window.")] = 5,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N.")] = "auto",
    threads: Annotated[int, typer.Option(help="torch CPU threads per worker.")] = 1,
    tiny: Annotated[bool, typer.Option(help="Tiny-input mode (CPU smoke runs).")] = False,
    data_dir: Annotated[Optional[Path], typer.Option(help="Folder with <dataset>/ subfolders (default: synthetic inputs).")] = None,
    gpu_type: Annotated[Optional[str], typer.Option(help="Table key in the output (default: cpu or the CUDA device name).")] = None,
) -> None:
    """Measure isolated and pairwise co-located throughputs; write them for the simulator and extender."""
    console = Console(stderr=True)
    _need_torch(console)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from iadeep.training._data import WorkloadDataError
    from iadeep.training._profile import ProfileSettings, profile

    try:
        names = tuple(m.strip() for m in models.split(",") if m.strip())
        sizes = tuple(int(b) for b in batch_sizes.split(",")) if batch_sizes else ()
        settings = ProfileSettings(models=names, batch_sizes={m: sizes for m in names} if sizes else {}, window_s=window_s,
                                   warmup_steps=warmup_steps, device=device, threads=threads, synthetic=data_dir is None,
                                   tiny=tiny, data_dir=data_dir, gpu_type=gpu_type)
        n = len(settings.job_types())
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(f"{n} job types, {n * (n + 1) // 2} pairs, about {(n + n * (n + 1) // 2) * window_s / 60:.1f} min of windows")
    with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("starting workers", total=n + n * (n + 1) // 2)
        try:
            result = profile(settings, lambda what, done, total: bar.update(task, completed=done, description=what))
        except (ValueError, WorkloadDataError) as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
    path = result.write(out)
    from iadeep.training._plot import plot_profile

    png = plot_profile(result, path.with_suffix(".png"))
    console.print(f"wrote {path} and {png} (GPU type {result.gpu_type!r}); use it with "
                  f"`iadeep experiment run --throughputs {path} --gpu-type {result.gpu_type}`")
