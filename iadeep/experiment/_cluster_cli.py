"""``iadeep experiment cluster``: write a cluster file from a trace's own node list."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console

__all__ = ["cluster_cmd", "registry_cluster"]

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
    job_log: Annotated[Optional[str], typer.Option(help="Philly's cluster_job_log: check the machine list against it.")] = None,
) -> None:
    """Derive a cluster file from a trace's node list (openb) or machine list (Philly, with a consistency report).
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
            spec = cluster_from_philly(str(from_philly))
            comment = f"from Philly machine list {from_philly}"
            if job_log:
                r = philly_consistency(str(from_philly), job_log)
                fewer = ", ".join(f"{m} ({a} listed, {b} used)" for m, (a, b) in list(r.fewer_gpus_than_used.items())[:20])
                lines = [f"machines listed {r.machines_listed}, used by jobs {r.machines_used}",
                         f"listed with fewer GPUs than a job used: {len(r.fewer_gpus_than_used)}" + (f": {fewer}" if fewer else ""),
                         f"used but not listed: {len(r.used_not_listed)}"
                         + (f": {', '.join(r.used_not_listed[:20])}" if r.used_not_listed else "")]
                for line in lines:
                    console.print(line)
                comment += "\nconsistency with " + job_log + ":\n" + "\n".join(lines)
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


def _fail(message: str) -> NoReturn:
    """End the command: ``iadeep experiment cluster: error: <message>`` (one line) on stderr, exit code 2."""
    from iadeep._climain import one_line

    typer.echo(f"iadeep experiment cluster: error: {one_line(ValueError(message))}", err=True)
    raise typer.Exit(2)
