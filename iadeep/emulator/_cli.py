"""``iadeep emulator``: emulated GPUs for kwok nodes (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_EMULATOR_*`` environment (see :class:`EmulatorSettings`).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The GPU emulator (a command group even with one command)."""


def run(overrides: dict[str, Any], stop: threading.Event | None = None) -> None:
    """Build the settings (environment, then ``overrides``) and emulate until SIGTERM/SIGINT or ``stop``."""
    import logging

    from iadeep._serving import configure_logging
    from iadeep.emulator import KubeCallError, build_emulator
    from iadeep.emulator._settings import EmulatorSettings
    from iadeep.state import StoreUnavailable

    settings = EmulatorSettings(**{k: v for k, v in overrides.items() if v is not None})
    configure_logging(settings.log_level)
    try:
        svc = build_emulator(settings)
    except (KubeCallError, StoreUnavailable, OSError, ValueError) as exc:
        typer.echo(f"iadeep emulator: {exc}", err=True)
        raise typer.Exit(2) from None
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    try:
        http = _serve_http(svc.app(), settings.host, settings.port)
    except OSError as exc:
        typer.echo(f"iadeep emulator: {exc}", err=True)
        raise typer.Exit(2) from None
    svc.start()
    logging.getLogger("iadeep.emulator").info("emulating GPUs of nodes matching %r at %gx (HTTP on %s:%d)",
                                              settings.node_selector, settings.speedup, settings.host, settings.port)
    try:
        while not stop.wait(30):
            logging.getLogger("iadeep.emulator").info("%s", svc.status())
    finally:
        http.should_exit = True
        svc.stop()


def _serve_http(app: Any, host: str, port: int, timeout_s: float = 30.0) -> Any:
    """Serve ``app`` (health and metrics) with uvicorn on a daemon thread; returns the server
    once it listens (``should_exit = True`` stops it). uvicorn installs no signal handlers off the
    main thread: SIGTERM stays :func:`run`'s.

    Raises:
        OSError: it could not listen on ``host:port`` (e.g. the port is taken; uvicorn logged why).
    """
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="iadeep-emulator-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise OSError(f"cannot serve HTTP on {host}:{port} (--host/--port, IADEEP_EMULATOR_HOST/_PORT)")
        time.sleep(0.05)
    return server


@app.command()
def serve(
    speedup: Annotated[float | None, typer.Option(help="Emulated seconds per wall second (default 1).")] = None,
    node_selector: Annotated[str | None, typer.Option(help="Label selector of emulated nodes (default iadeep.io/gpu-node=true).")] = None,
    throughputs_file: Annotated[Path | None, typer.Option(help="Gavel simulation_throughputs.json.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default $KUBECONFIG / ~/.kube/config).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the measurement noise (default 0).")] = None,
    host: Annotated[str | None, typer.Option(help="Health/metrics listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Health/metrics port (default 8893).")] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (default info).")] = None,
) -> None:
    """Publish emulated GPU inventories, run bound pods at the interference model's rates, complete them."""
    kube = {"kubeconfig": kubeconfig} if kubeconfig else None
    run({"speedup": speedup, "node_selector": node_selector, "throughputs_file": throughputs_file, "seed": seed,
         "host": host, "port": port, "log_level": log_level, "kube": kube})
