"""``iadeep experiment cluster``: write a cluster file from a trace's own node list."""

from __future__ import annotations

import sys
from pathlib import Path
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console

__all__ = ["cluster_cmd", "philly_report", "registry_cluster"]

#: ``--cluster`` keywords: a cluster from a registry dataset's node list.
REGISTRY_CLUSTERS = {"openb": ("openb", "openb_node_list_gpu_node.csv")}


def registry_cluster(name: str):
    """The cluster of a registry dataset's node list (``"openb"``: its 1,213 GPU nodes).

    Raises:
        iadeep.datasets.DatasetError: the download failed.
    """
    from iadeep.datasets import fetch
    from iadeep.sim import cluster_from_openb

    dataset, inner = REGISTRY_CLUSTERS[name]
    return cluster_from_openb(fetch(dataset, progress=False) / inner)


def cluster_cmd(
    out: Annotated[str, typer.Option(help="Cluster file (YAML) to write.")],
    from_openb: Annotated[Optional[str], typer.Option(help="openb's openb_node_list_gpu_node.csv ('registry': the registry's).")] = None,
    from_philly: Annotated[Optional[str], typer.Option(help="Philly's cluster_machine_list.")] = None,
    job_log: Annotated[Optional[str], typer.Option(help="Philly's cluster_job_log: give each machine at least the GPUs its jobs used, add the machines used but not listed, and report them.")] = None,
) -> None:
    """Derive a cluster file from a trace's node list (openb) or machine list (Philly; with --job-log,
    corrected to cover what the jobs used, and the corrected machines reported).
    \f
    Bad input (no source or both, a missing, empty or malformed file, a folder where a file is
    expected, an ``--out`` that cannot be written) ends with one line on stderr
    (``iadeep experiment cluster: error: ...``, naming the file) and exit code 2.
    """
    from iadeep.datasets import DatasetError
    from iadeep.sim import ClusterFileError, cluster_from_openb, cluster_from_philly, dump_cluster, philly_consistency

    console = Console(width=None if sys.stdout.isatty() else 130)
    if (from_openb is None) == (from_philly is None):
        _fail("give exactly one of --from-openb and --from-philly")
    path = Path(out)
    if path.is_dir():
        _fail(f"--out {out}: is a folder; give the cluster file's path (e.g. {path / 'cluster.yaml'})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        _fail(f"--out {out}: {path.parent} is a file, not a folder")
    except OSError as exc:
        _fail(f"--out {out}: cannot create the folder {path.parent}: {exc.strerror or exc}")
    try:
        comment = ""
        if from_openb is not None:
            spec = registry_cluster("openb") if from_openb == "registry" else cluster_from_openb(from_openb)
            comment = f"from openb node list {from_openb}"
        else:
            spec = cluster_from_philly(str(from_philly), job_log)
            comment = f"from Philly machine list {from_philly}"
            if job_log:
                report = philly_report(philly_consistency(str(from_philly), job_log))
                for line in report(20):
                    console.print(line)
                comment += "\ncorrected by the job log " + job_log + ":\n" + "\n".join(report(None))
    except (ClusterFileError, ValueError, DatasetError) as exc:
        _fail(str(exc))
    except OSError as exc:  # FileNotFoundError and the like: the OS message names the file
        _fail(f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc))
    try:
        path = dump_cluster(spec, path, comment)
    except OSError as exc:
        _fail(f"--out {out}: cannot write: {exc.strerror or exc}")
    console.print(f"{spec.nodes} nodes, {spec.total_gpus} GPUs: {spec.describe()}")
    console.print(f"cluster file [bold]{path}[/bold]")


def philly_report(r: Any) -> Callable[[int | None], list[str]]:
    """The lines that say how the job log corrected the machine list.

    Args:
        r: a :class:`iadeep.sim.PhillyConsistency`.

    Returns:
        ``lines(limit)``: the report, naming at most ``limit`` machines per line (``None``: all).
    """
    def names(items: list[str], limit: int | None) -> str:
        if not items:
            return ""
        shown = items if limit is None else items[:limit]
        more = len(items) - len(shown)
        return ": " + ", ".join(shown) + (f" and {more} more (all in the cluster file's comment)" if more else "")

    raised = [f"{m} ({a} listed -> {b})" for m, (a, b) in r.fewer_gpus_than_used.items()]
    added = [f"{m} ({r.used_gpus[m]} GPU{'s' if r.used_gpus[m] != 1 else ''})" for m in r.used_not_listed]
    mem = f", {r.unlisted_gpu_mem_gib:g} GiB per GPU (the list's most common)" if added and r.unlisted_gpu_mem_gib else ""

    def lines(limit: int | None) -> list[str]:
        return [f"machines listed {r.machines_listed}, used by jobs {r.machines_used}",
                f"GPUs raised to what the jobs used: {len(raised)}{names(raised, limit)}",
                f"added, used but not listed: {len(added)}{mem}{names(added, limit)}"]

    return lines


def _fail(message: str) -> NoReturn:
    """End the command: ``iadeep experiment cluster: error: <message>`` (one line) on stderr, exit code 2."""
    from iadeep._climain import one_line

    typer.echo(f"iadeep experiment cluster: error: {one_line(ValueError(message))}", err=True)
    raise typer.Exit(2)
