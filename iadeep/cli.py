"""The ``iadeep`` command: one entry point, thin sub-commands that parse flags and call a ``run()``.

Configuration errors (a bad option, a bad ``IADEEP_*`` setting, a bad experiment parameter) end
the command with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import typer
import typer.core
import typer.main

from iadeep._climain import run_cli

__all__ = ["SUBCOMMANDS", "app", "main"]

#: The sub-commands, in the order ``iadeep --help`` lists them: name -> (module, attribute, help).
#: Each lives beside the code it drives and is imported only when that command runs (or its own
#: ``--help`` is shown), so that ``iadeep --help`` loads typer and nothing of the stack below
#: (pandas, matplotlib, kubernetes, grpc, fastapi, optuna, torch). An attribute that is a typer
#: app becomes a command group; a function becomes one command.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "datasets": ("iadeep.datasets._cli", "app", "List, fetch and verify the registered datasets."),
    "experiment": ("iadeep.experiment._cli", "app", "Trace-driven experiments: replay a trace against policies."),
    "interference": ("iadeep.report._interference_cli", "app", "Quality of the interference model and its learner."),
    "etcd": ("iadeep.state._cli", "app", "A local etcd for the live services (data under the user's state dir)."),
    "extender": ("iadeep.extender._cli", "app", "The kube-scheduler extender service."),
    "tuner": ("iadeep.tuner._cli", "app", "The batch-size tuner service (optuna studies over HTTP)."),
    "coordinator": ("iadeep.coordinator._cli", "app", "The per-node coordinator (tuning sessions)."),
    "deviceplugin": ("iadeep.deviceplugin._cli", "app", "The kubelet device plugin (GPU memory and GPUs)."),
    "emulator": ("iadeep.emulator._cli", "app", "Emulated GPUs for kwok nodes, driven by the interference model."),
    "dev": ("iadeep.dev._cli", "app", "Local development cluster (etcd, kube-apiserver, kube-scheduler, kwok)."),
    "bench-job": ("iadeep.training._cli", "bench_job_cmd",
                  "Train one workload (vgg16, resnet50, squeezenet, lstm, neumf); needs the workloads extra."),
    "profile": ("iadeep.training._cli", "profile_cmd",
                "Measure co-location throughputs of the workloads; needs the workloads extra."),
}


#: Top-level modules of the optional dependency groups (pyproject.toml), by the group that installs them.
EXTRA_OF_MODULE = {
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "prometheus_client", "kubernetes",
                     "etcd3gw", "requests", "msgspec", "grpc", "grpc_tools", "google", "pynvml", "psutil"), "services"),
    **dict.fromkeys(("torch", "torchvision"), "workloads"),
    "airflow": "airflow",
}


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
        extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        raise typer.TyperException(f"`iadeep {name}` needs the {extra!r} extra, which is not installed (no module "
                                   f"{exc.name!r}): pip install 'iadeep[{extra}]' (in a checkout: make venv)") from None
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
    """The root group: sub-commands load on use (:class:`_LazyCommands`); the command list of
    ``iadeep --help`` comes from :data:`SUBCOMMANDS` without importing any of them."""

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

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, help_text) for name, (_, _, help_text) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _version() -> str:
    """The installed distribution's version (``[project].version`` of pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iadeep")
    except PackageNotFoundError:
        return "unknown (the iadeep package is not installed: no package metadata)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"iadeep {_version()}")
        raise typer.Exit()


_HELP = """Interference-aware sharing of GPUs by deep-learning training jobs: the trace-driven simulator
and its experiments, and the live services for Kubernetes (extender, device plugin, coordinator,
tuner, GPU emulator).

Every configuration error (a bad option, a bad IADEEP_* setting, a bad experiment parameter) is
one line on stderr with exit code 2."""

# Plain (click) help for the root: typer's rich help formatter alone imports about 60 ms of
# modules (rich.markdown, markdown_it, pygments), several times a bare interpreter's start.
app = typer.Typer(cls=_LazyGroup, no_args_is_help=True, add_completion=False, help=_HELP, rich_markup_mode=None)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print the installed version and exit."),
) -> None:
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``iadeep`` command (the console script); return its exit code.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success; 2 for a configuration error (one line on stderr, see
        :func:`iadeep._climain.run_cli`); the command's own code otherwise.
    """
    return run_cli(app, argv, prog_name="iadeep")


if __name__ == "__main__":
    sys.exit(main())
