"""``iadeep coordinator``: run the node coordinator (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_COORDINATOR_*`` environment (see :class:`CoordinatorSettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The per-node coordinator (a command group even with one command)."""


def run(settings: object) -> None:
    """Serve until interrupted: the request follower on a thread, health and metrics over HTTP.

    Raises:
        typer.Exit: (code 2) an unusable configuration, with a one-line message.
    """
    from iadeep._climain import one_line
    from iadeep._serving import configure_logging, serve_http
    from iadeep.coordinator._service import CoordinatorService
    from iadeep.coordinator._settings import CoordinatorSettings
    from iadeep.interference import InterferenceModel
    from iadeep.state import EtcdStateStore
    from iadeep.tuner import TunerClient

    assert isinstance(settings, CoordinatorSettings)
    configure_logging(settings.log_level)
    try:
        if not settings.throughputs_file.is_file():
            raise FileNotFoundError(f"throughputs file {settings.throughputs_file} does not exist")
        model = InterferenceModel.from_file(settings.throughputs_file, settings.gpu_type).whole_gib()  # live reservations: whole GiB
        store = EtcdStateStore(settings.etcd)
    except Exception as exc:  # noqa: BLE001 - one line, no traceback
        typer.echo(f"iadeep coordinator: cannot start: {type(exc).__name__}: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    service = CoordinatorService(settings, store=store, tuner=TunerClient(settings.tuner_url), model=model).start()
    # SIGTERM: sessions finish their current wait, then the process exits 0
    serve_http(service.app(), host=settings.host, port=settings.port, on_stop=lambda: service.stop(timeout_s=5))


@app.command("serve")
def serve(
    node: Annotated[str | None, typer.Option(help="This node's name (IADEEP_COORDINATOR_NODE).")] = None,
    all_nodes: Annotated[bool | None, typer.Option("--all-nodes", help="Follow every node's tuning requests (emulated nodes).")] = None,
    tuner_url: Annotated[str | None, typer.Option(help="The tuner's base URL.")] = None,
    throughputs_file: Annotated[Path | None, typer.Option(help="Gavel simulation_throughputs.json.")] = None,
    host: Annotated[str | None, typer.Option(help="Health/metrics listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Health/metrics port (default 8891).")] = None,
    log_level: Annotated[str | None, typer.Option(help="Logging level.")] = None,
) -> None:
    """Follow this node's tuning requests and run the sessions."""
    from iadeep._serving import settings_from
    from iadeep.coordinator._settings import CoordinatorSettings

    flags = {"node": node, "all_nodes": all_nodes, "tuner_url": tuner_url, "throughputs_file": throughputs_file, "host": host,
             "port": port, "log_level": log_level}
    run(settings_from(CoordinatorSettings, flags, "iadeep coordinator"))
