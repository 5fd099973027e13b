"""``iadeep extender``: run the scheduler extender (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_EXTENDER_*`` environment (see :class:`ExtenderSettings`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from iadeep._host import pid_alive

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The kube-scheduler extender (a command group even with one command)."""


def _environment(overrides: dict[str, Any], prefix: str = "IADEEP_EXTENDER_") -> dict[str, str]:
    """``overrides`` as the environment variables :class:`ExtenderSettings` reads (nested with ``__``)."""
    out: dict[str, str] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict):
            out.update(_environment(value, f"{prefix}{key.upper()}__"))
        else:
            out[f"{prefix}{key.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


METRICS_DIR_PREFIX = "iadeep-extender-metrics-"


def _clean_stale_metrics_dirs(parent: Path) -> None:
    """Remove metrics folders left by servers that are gone (a SIGKILLed parent cannot clean up);
    each folder is named after the pid of the server that made it."""
    for d in parent.glob(f"{METRICS_DIR_PREFIX}*"):
        pid = d.name[len(METRICS_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def _check_startup(settings: Any) -> None:
    """Fail now, in one line, when the workers could not start: no measurements file, no etcd
    endpoint, no Kubernetes configuration."""
    from iadeep.extender._bind import KubeError, KubernetesPodApi
    from iadeep.state import EtcdStateStore, StoreUnavailable

    if settings.throughputs_file is None:
        _fail(FileNotFoundError("no throughputs file: set --throughputs-file or IADEEP_EXTENDER_THROUGHPUTS_FILE to Gavel's "
                                "simulation_throughputs.json (`iadeep datasets fetch gavel-throughputs` downloads it)"))
    if not settings.throughputs_file.is_file():
        _fail(FileNotFoundError(f"throughputs file {settings.throughputs_file} does not exist"))
    try:
        EtcdStateStore(settings.etcd).close()
        KubernetesPodApi(settings.kube).close()
    except (KubeError, StoreUnavailable) as exc:
        _fail(exc)


def _fail(exc: Exception) -> NoReturn:
    typer.echo(f"iadeep extender: {exc}", err=True)
    raise typer.Exit(2) from None


def run(overrides: dict[str, Any]) -> None:
    """Build the settings (environment, then ``overrides``) and serve until interrupted.

    Raises:
        typer.Exit: (code 2) an unusable configuration: a bad setting (an unknown policy names the
            registered ones), no measurements file, no etcd endpoint or no loadable Kubernetes
            configuration, with a one-line message on stderr.

    With ``workers > 1`` uvicorn starts that many processes; they read their settings from the
    environment (the overrides are exported to it first), share their Prometheus counters
    through a ``PROMETHEUS_MULTIPROC_DIR`` of this server's own (prometheus_client's
    multiprocess mode; removed at exit, or at the next start if this process was killed) and get
    SIGTERM when this process dies.
    """
    import uvicorn

    from iadeep._serving import configure_logging, settings_from
    from iadeep.extender._settings import ExtenderSettings
    from iadeep.state import StoreUnavailable

    # a bad setting (an unknown policy, a port out of range) is one line naming the flag and the
    # variable, exit code 2, once: before any worker starts
    settings = settings_from(ExtenderSettings, overrides, "iadeep extender")
    configure_logging(settings.log_level)
    common = {"host": settings.host, "port": settings.port, "log_level": settings.log_level.lower(),
              "access_log": False, "timeout_graceful_shutdown": 5}
    if settings.workers == 1:
        from iadeep.extender._app import create_app
        from iadeep.extender._bind import KubeError

        try:
            app_ = create_app(settings)
        except (KubeError, StoreUnavailable, OSError, ValueError) as exc:  # the message names what and where
            _fail(exc)
        uvicorn.run(app_, **common)
        return
    _check_startup(settings)  # each worker would fail on its own, inside uvicorn
    os.environ.update(_environment(overrides))
    tmp = Path(tempfile.gettempdir())
    _clean_stale_metrics_dirs(tmp)
    metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-", dir=tmp)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    os.environ["IADEEP_EXTENDER_PARENT_PID"] = str(os.getpid())
    try:
        uvicorn.run("iadeep.extender._app:app_from_environment", factory=True, workers=settings.workers, **common)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8888).")] = None,
    url_prefix: Annotated[str | None, typer.Option(help="Path prefix of filter/prioritize/bind (default /iadeep).")] = None,
    policy: Annotated[str | None, typer.Option(help="Placement policy (default iadeep).")] = None,
    colocation_limit: Annotated[int | None, typer.Option(help="Jobs per GPU (default: the policy's).")] = None,
    undo_below: Annotated[float | None, typer.Option(
        help="Undo a co-location whose tuning session's best measured summed progress is below this (default 1.0: "
             "taking turns; 0: never): the coordinators record it, the extender bans the pair and evicts the newest pod.",
        min=0.0)] = None,
    throughputs_file: Annotated[Path | None, typer.Option("--throughputs-file", "--throughputs", help="Measurements in Gavel's simulation_throughputs.json schema (required; `iadeep datasets fetch gavel-throughputs` downloads the published ones, `iadeep profile` measures your own).")] = None,
    gpu_type: Annotated[str | None, typer.Option(help="GPU type (table key) of the measurements (default v100).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default $KUBECONFIG / ~/.kube/config).")] = None,
    in_cluster: Annotated[bool | None, typer.Option("--in-cluster/--no-in-cluster", help="Use the pod's service account.")] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (default info).")] = None,
    workers: Annotated[int | None, typer.Option(help="Server processes sharing the port (default 1).", min=1)] = None,
    max_txn_ops: Annotated[int | None, typer.Option(
        help="etcd's --max-txn-ops (operations per transaction; default 128, IADEEP_ETCD_MAX_TXN_OPS): bounds the GPUs "
             "one pod may reserve (41 at 128); larger pods fail filter as unresolvable.", min=8)] = None,
) -> None:
    """Serve filter, prioritize and bind for kube-scheduler (plus /healthz, /readyz, /metrics, /inspect)."""
    kube = {k: v for k, v in {"kubeconfig": kubeconfig, "in_cluster": in_cluster}.items() if v is not None}
    etcd = {"max_txn_ops": max_txn_ops} if max_txn_ops is not None else None
    run({"host": host, "port": port, "url_prefix": url_prefix, "policy": policy, "colocation_limit": colocation_limit,
         "undo_below": undo_below,
         "throughputs_file": throughputs_file, "gpu_type": gpu_type, "log_level": log_level, "workers": workers,
         "kube": kube or None, "etcd": etcd})
