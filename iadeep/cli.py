"""The ``iadeep`` command: one entry point, thin sub-commands that parse flags and call a ``run()``.

Configuration errors (a bad option, a bad ``IADEEP_*`` setting, a bad experiment parameter) end
the command with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["SUBCOMMANDS", "app", "main", "root_help", "version"]

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


_HELP = """Interference-aware sharing of GPUs by deep-learning training jobs: the trace-driven simulator
and its experiments, and the live services for Kubernetes (extender, device plugin, coordinator,
tuner, GPU emulator).

Every configuration error (a bad option, a bad IADEEP_* setting, a bad experiment parameter) is
one line on stderr with exit code 2."""

ROOT_OPTIONS = (("--version", "Print the installed version and exit."), ("--help", "Show this message and exit."))


def version() -> str:
    """The installed distribution's version (``[project].version`` of pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("iadeep")
    except PackageNotFoundError:
        return "unknown (the iadeep package is not installed: no package metadata)"


def root_help(width: int | None = None) -> str:
    """The text of ``iadeep --help``, laid out as click lays out a group's help.

    Args:
        width: text width in columns (default: click's, the terminal's width up to 80, less 2,
            at least 50).

    Returns:
        The usage line, :data:`_HELP`, the options and :data:`SUBCOMMANDS` with their help, each
        section separated by an empty line, ending with a newline.
    """
    import shutil
    import textwrap

    if width is None:
        width = max(min(shutil.get_terminal_size().columns, 80) - 2, 50)
    lines = ["Usage: iadeep [OPTIONS] COMMAND [ARGS]...", ""]
    for paragraph in _HELP.split("\n\n"):
        lines += textwrap.wrap(" ".join(paragraph.split()), width, initial_indent="  ", subsequent_indent="  ")
        lines.append("")

    def definitions(title: str, rows: Sequence[tuple[str, str]]) -> None:
        first = min(max(len(term) for term, _ in rows), 30) + 2  # click's write_dl: col_max 30, col_spacing 2
        lines.append(f"{title}:")
        for term, text in rows:
            wrapped = textwrap.wrap(text, max(width - first - 2, 10)) or [""]
            if len(term) <= first - 2:
                lines.append(f"  {term}".ljust(first + 2) + wrapped[0])
            else:
                lines.extend([f"  {term}", " " * (first + 2) + wrapped[0]])
            lines.extend(" " * (first + 2) + w for w in wrapped[1:])

    definitions("Options", ROOT_OPTIONS)
    lines.append("")
    definitions("Commands", [(name, text) for name, (_, _, text) in SUBCOMMANDS.items()])
    return "\n".join(lines) + "\n"


def __getattr__(name: str) -> Any:
    """``iadeep.cli.app``: the typer app, built on first use (:mod:`iadeep._cliapp`)."""
    if name == "app":
        from iadeep._cliapp import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``iadeep`` command (the console script); return its exit code.

    ``iadeep``, ``iadeep --help`` and ``iadeep --version`` are answered here without importing
    typer (its import alone takes about five times a bare interpreter's start); every other
    command line goes to the typer app.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success; 2 for a configuration error (one line on stderr, see
        :func:`iadeep._climain.run_cli`) and for no arguments (the help is shown); the command's
        own code otherwise.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["--help"]):
        sys.stdout.write(root_help())
        return 0 if args else 2
    if args == ["--version"]:
        sys.stdout.write(f"iadeep {version()}\n")
        return 0
    from iadeep._cliapp import app
    from iadeep._climain import run_cli

    return run_cli(app, args, prog_name="iadeep")


if __name__ == "__main__":
    sys.exit(main())
