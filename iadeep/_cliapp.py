"""The ``iadeep`` typer app (:data:`iadeep.cli.SUBCOMMANDS` mounted lazily); built on the first
command that is not the root's ``--help`` or ``--version`` (:func:`iadeep.cli.main`)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
import typer.core
import typer.main

from iadeep._climain import missing_extra
from iadeep.cli import _HELP, SUBCOMMANDS, root_help, version

__all__ = ["app"]


def _load(name: str) -> Any:
    """The click command of sub-command ``name`` (:data:`SUBCOMMANDS`), its module imported now.

    Raises:
        typer.TyperException: the module needs a package of an optional group that is not
            installed (the message names the group and the pip command).
    """
    module, attr, help_text = SUBCOMMANDS[name]
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        message = missing_extra(f"iadeep {name}", exc)
        if message is None:
            raise
        raise typer.TyperException(message) from None
    if isinstance(obj, typer.Typer):
        sub = typer.Typer(add_completion=False)
        sub.add_typer(obj, name=name, help=help_text)
        command = typer.main.get_group(sub).commands[name]
    else:  # a command function
        sub = typer.Typer(add_completion=False)
        sub.command(name, help=help_text)(obj)
        command = typer.main.get_command(sub)
    command.name = name
    return command


class _LazyCommands(MutableMapping):
    """The root group's ``commands``: every name of :data:`SUBCOMMANDS` is listed; a command's
    module is imported the first time the command itself is asked for."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}
        self._extra: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name in self._extra:
            return self._extra[name]
        if name not in SUBCOMMANDS:
            raise KeyError(name)
        if name not in self._loaded:
            self._loaded[name] = _load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._extra[name] = command

    def __delitem__(self, name: str) -> None:
        del self._extra[name]

    def __iter__(self) -> Iterator[str]:
        yield from SUBCOMMANDS
        yield from (n for n in self._extra if n not in SUBCOMMANDS)

    def __len__(self) -> int:
        return len(SUBCOMMANDS) + sum(1 for n in self._extra if n not in SUBCOMMANDS)


class _LazyGroup(typer.core.TyperGroup):
    """The root group: sub-commands load on use (:class:`_LazyCommands`); its help is
    :func:`iadeep.cli.root_help`, which imports none of them."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        lazy = _LazyCommands()
        for name, command in self.commands.items():
            lazy[name] = command
        self.commands = lazy

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:  # ``iadeep`` alone: the help on stdout, exit code 2
            typer.echo(ctx.get_help())
            ctx.exit(2)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:  # the same text as the fast path's
        formatter.write(root_help(formatter.width))


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"iadeep {version()}")
        raise typer.Exit()


app = typer.Typer(cls=_LazyGroup, no_args_is_help=True, add_completion=False, help=_HELP, rich_markup_mode=None)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print the installed version and exit."),
) -> None:
    pass
