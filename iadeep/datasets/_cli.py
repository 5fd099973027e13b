"""``iadeep datasets``: list, fetch and verify the registered datasets."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from iadeep.datasets._api import cache_state, fetch, list_datasets, verify
from iadeep.datasets._errors import DatasetError, DatasetSettingsError
from iadeep.datasets._settings import Settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _report(exc: DatasetError) -> None:
    """Print a DatasetError as one red line on stderr (no traceback)."""
    Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)


def _fail(exc: DatasetError) -> typer.Exit:
    """Report ``exc``; the exit to raise: code 2 for a bad setting (a configuration error, as every
    ``iadeep`` command), 1 for a dataset that could not be listed, fetched or verified."""
    _report(exc)
    return typer.Exit(code=2 if isinstance(exc, DatasetSettingsError) else 1)


def _human(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@app.command("list")
def list_command() -> None:
    """Show the registered datasets and whether they are in the cache."""
    try:
        settings = Settings.resolve()
        datasets = list_datasets(manifest=settings.manifest_path)
    except DatasetError as exc:
        raise _fail(exc) from None
    table = Table(title=escape(f"datasets (cache: {settings.datasets_root})"))
    for column in ("name", "files", "size", "licence", "cached?"):
        table.add_column(column, justify="right" if column in ("files", "size") else "left")
    for info in datasets:
        cached = cache_state(info, settings)
        table.add_row(info.name, str(len(info.files)), _human(info.size_bytes), escape(info.licence), cached)
    Console().print(table)


@app.command("fetch")
def fetch_command(
    names: Annotated[list[str] | None, typer.Argument(help="Dataset names.", show_default=False)] = None,
    all_: Annotated[bool, typer.Option("--all", help="Fetch every registered dataset.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Draw progress bars.")] = True,
) -> None:
    """Download (or copy from the mirror), verify and unpack datasets; print their folders. Exit code 2
    for an unknown name (nothing fetched), 1 when a fetch fails (the others are still fetched)."""
    try:
        known = [d.name for d in list_datasets()]
    except DatasetError as exc:
        raise _fail(exc) from None
    selected = known if all_ else list(names or [])
    if not selected:
        raise typer.BadParameter("give dataset names or --all")
    unknown = [n for n in selected if n not in known]
    if unknown:  # a usage error (exit code 2), found before anything is fetched
        raise typer.BadParameter(f"unknown dataset {', '.join(map(repr, unknown))}; known datasets: {', '.join(known)}",
                                 param_hint="'NAMES...'")
    failed = False
    for name in selected:
        try:
            typer.echo(fetch(name, progress=progress))
        except DatasetSettingsError as exc:
            raise _fail(exc) from None
        except DatasetError as exc:
            _report(exc)
            failed = True
    if failed:
        raise typer.Exit(code=1)


@app.command("verify")
def verify_command(
    name: Annotated[str | None, typer.Argument(help="Dataset name; default every cached dataset.")] = None,
) -> None:
    """Re-check the SHA-256 of cached files (no download); exit code 1 on any failure."""
    try:
        results = verify(name)
    except DatasetError as exc:
        raise _fail(exc) from None
    if not results:
        typer.echo("no dataset in the cache")
        return
    table = Table()
    for column in ("dataset", "file", "status", "detail"):
        table.add_column(column)
    for r in results:
        style = "green" if r.ok else "red"
        table.add_row(r.dataset, r.file, f"[{style}]{r.status}[/]", "" if r.ok else escape(r.detail))
    Console().print(table)
    if not all(r.ok for r in results):
        raise typer.Exit(code=1)


__all__ = ["app"]
