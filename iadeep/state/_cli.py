"""``iadeep etcd``: a local etcd for development (used when IADEEP_ETCD_ENDPOINTS is unset).

``start`` runs one etcd member on 127.0.0.1 with its data under the user's state directory
(``IADEEP_ETCD_LOCAL__DIR`` overrides it) and returns once it is healthy, leaving it running in
the background; the services find it without configuration. ``stop`` ends it (the data stays
unless ``--purge``); ``status`` says whether it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from iadeep.state._settings import StateSettings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)

DirOpt = Annotated[
    Path | None, typer.Option("--dir", help="Directory of data, log and state file (default: user state dir).")
]


def _settings(directory: Path | None, port: int | None = None, timeout_s: float | None = None) -> StateSettings:
    from iadeep.state._settings import StateSettings

    settings = StateSettings()
    update: dict[str, object] = {}
    if directory is not None:
        update["dir"] = directory
    if port is not None:
        update["client_port"] = port
    if timeout_s is not None:
        update["ready_timeout_s"] = timeout_s
    if update:
        settings = settings.model_copy(update={"local": settings.local.model_copy(update=update)})
    return settings


@app.command("start")
def start_command(
    directory: DirOpt = None,
    port: Annotated[
        int | None, typer.Option("--port", min=0, max=65535, help="Client port (default: the last one, else free).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait until healthy.")] = 20.0,
) -> None:
    """Start the local etcd (a no-op when it already runs); prints its endpoint."""
    from iadeep.state._local import LocalEtcdError, start_local

    settings = _settings(directory, port, timeout)
    if settings.endpoints:
        _err.print(
            f"note: IADEEP_ETCD_ENDPOINTS={','.join(settings.endpoints)} is set; "
            "the services use it, not this local etcd"
        )
    try:
        etcd, state = start_local(settings, detach=True)
    except LocalEtcdError as exc:
        _err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(code=1) from None
    if etcd is None:
        _out.print(f"local etcd already running at {state['endpoint']} (pid {state['pid']})")
    else:
        _out.print(f"local etcd ready in {etcd.timings['ready_s']:.1f}s at {state['endpoint']} (pid {state['pid']})")
    _out.print(f"data: {state['data_dir']}")
    _out.print(f"log:  {state['log']}")
    _out.print(f"export IADEEP_ETCD_ENDPOINTS={state['endpoint']}   # optional: found automatically when unset")


@app.command("stop")
def stop_command(
    directory: DirOpt = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also delete its data.")] = False,
) -> None:
    """Stop the local etcd (keeps its data unless --purge)."""
    from iadeep.state._local import local_dir, stop_local

    settings = _settings(directory)
    stopped = stop_local(settings, purge=purge)
    where = local_dir(settings)
    _out.print(("local etcd stopped" if stopped else "local etcd was not running") + (f"; data deleted ({where / 'data'}; its log kept in {where / 'logs'})" if purge else ""))


@app.command("status")
def status_command(directory: DirOpt = None) -> None:
    """Say whether the local etcd runs and where; exit 1 when it does not."""
    from iadeep.state._local import local_status

    state = local_status(_settings(directory))
    if state is None or not state["running"]:
        _out.print("local etcd is not running" + (f" (data in {state['data_dir']})" if state else ""))
        raise typer.Exit(code=1)
    health = "healthy" if state["healthy"] else "NOT HEALTHY"
    _out.print(f"local etcd running at {state['endpoint']} (pid {state['pid']}, {health})")
    _out.print(f"data: {state['data_dir']}")
    _out.print(f"log:  {state['log']}")
    if not state["healthy"]:
        raise typer.Exit(code=1)
