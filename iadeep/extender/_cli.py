"""``iadeep extender``: run the scheduler extender (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_EXTENDER_*`` environment (see :class:`ExtenderSettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The kube-scheduler extender (a command group even with one command)."""


def run(overrides: dict[str, Any]) -> None:
    """Build the settings (environment, then ``overrides``) and serve until interrupted."""
    import logging

    import uvicorn

    from iadeep.extender._app import create_app
    from iadeep.extender._settings import ExtenderSettings

    settings = ExtenderSettings(**{k: v for k, v in overrides.items() if v is not None})
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                access_log=False, timeout_graceful_shutdown=5)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8888).")] = None,
    url_prefix: Annotated[str | None, typer.Option(help="Path prefix of filter/prioritize/bind (default /iadeep).")] = None,
    policy: Annotated[str | None, typer.Option(help="Placement policy (default iadeep).")] = None,
    colocation_limit: Annotated[int | None, typer.Option(help="Jobs per GPU (default: the policy's).")] = None,
    throughputs_file: Annotated[Path | None, typer.Option(help="Gavel simulation_throughputs.json (default: dataset registry).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default $KUBECONFIG / ~/.kube/config).")] = None,
    in_cluster: Annotated[bool | None, typer.Option("--in-cluster/--no-in-cluster", help="Use the pod's service account.")] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (default info).")] = None,
) -> None:
    """Serve filter, prioritize and bind for kube-scheduler (plus /healthz, /readyz, /metrics, /inspect)."""
    kube = {k: v for k, v in {"kubeconfig": kubeconfig, "in_cluster": in_cluster}.items() if v is not None}
    run({"host": host, "port": port, "url_prefix": url_prefix, "policy": policy, "colocation_limit": colocation_limit,
         "throughputs_file": throughputs_file, "log_level": log_level, "kube": kube or None})
