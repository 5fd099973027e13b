"""``iadeep tuner``: run the tuner service (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_TUNER_*`` environment (see :class:`TunerSettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The batch-size tuner (a command group even with one command)."""


def run(settings: object) -> None:
    """Serve until interrupted.

    Raises:
        typer.Exit: (code 2) no usable throughputs file or storage, with a one-line message.
    """
    from iadeep._climain import one_line
    from iadeep._serving import configure_logging, serve_http
    from iadeep.interference import InterferenceModel
    from iadeep.tuner._app import create_app
    from iadeep.tuner._service import TunerService
    from iadeep.tuner._settings import TunerSettings, default_storage_url
    from iadeep.tuning import StopRule

    assert isinstance(settings, TunerSettings)
    configure_logging(settings.log_level)
    if settings.throughputs_file is None or not settings.throughputs_file.is_file():
        what = "no throughputs file given" if settings.throughputs_file is None else \
            f"throughputs file {settings.throughputs_file} does not exist"
        typer.echo(f"iadeep tuner: {what} (--throughputs-file or IADEEP_TUNER_THROUGHPUTS_FILE)", err=True)
        raise typer.Exit(2)
    try:
        model = InterferenceModel.from_file(settings.throughputs_file, settings.gpu_type).whole_gib()  # live reservations: whole GiB
        service = TunerService(model, settings.storage_url or default_storage_url(),
                               stop=StopRule(**settings.stop.model_dump()), seed=settings.seed)
    except Exception as exc:  # noqa: BLE001 - one line, no traceback, for any unusable configuration
        typer.echo(f"iadeep tuner: cannot start: {type(exc).__name__}: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    serve_http(create_app(service), host=settings.host, port=settings.port, log_level=settings.log_level)


@app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8890).")] = None,
    storage_url: Annotated[str | None, typer.Option(help="optuna RDB storage URL (default: SQLite in the user state dir).")] = None,
    throughputs_file: Annotated[Path | None, typer.Option(help="Gavel simulation_throughputs.json.")] = None,
    log_level: Annotated[str | None, typer.Option(help="Logging level.")] = None,
) -> None:
    """Serve the tuner's HTTP API (one optuna study per tuning session)."""
    from iadeep._serving import settings_from
    from iadeep.tuner._settings import TunerSettings

    flags = {"host": host, "port": port, "storage_url": storage_url, "throughputs_file": throughputs_file,
             "log_level": log_level}
    run(settings_from(TunerSettings, flags, "iadeep tuner"))
