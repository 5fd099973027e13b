"""Running a command line so that every configuration error is one line on stderr with exit code 2,
and the one line for a command whose optional dependency group is not installed (:func:`missing_extra`).

Used by the ``iadeep`` console script and by ``python -m iadeep.extender``; it imports nothing of
iadeep but the parameter validator, so any service may use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import typer

from iadeep._params import ConfigError

__all__ = ["EXTRA_OF_MODULE", "missing_extra", "one_line", "run_cli", "usage_error"]


#: Top-level modules of the optional dependency groups (pyproject.toml), by the group that installs them.
EXTRA_OF_MODULE = {
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "prometheus_client", "kubernetes",
                     "etcd3gw", "requests", "msgspec", "grpc", "grpc_tools", "google", "pynvml", "psutil"), "services"),
    **dict.fromkeys(("torch", "torchvision"), "workloads"),
    "airflow": "airflow",
}


def missing_extra(command: str, exc: ModuleNotFoundError) -> str | None:
    """The one-line error for ``command`` (e.g. ``"iadeep extender"``) failing to import a package
    of an optional group (:data:`EXTRA_OF_MODULE`) that is not installed, naming the group and
    the pip command; ``None`` when ``exc`` is about another module (a real bug: re-raise it)."""
    extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
    if extra is None:
        return None
    return (f"`{command}` needs the {extra!r} extra, which is not installed (no module {exc.name!r}): "
            f"pip install 'iadeep[{extra}]' (in a checkout: make venv)")


def _is_validation_error(exc: BaseException) -> bool:
    """Whether ``exc`` is pydantic's ``ValidationError``, without importing pydantic (about 30 ms)
    for commands that never use it: an error of that class exists only once pydantic is loaded."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(exc, core.ValidationError)


def one_line(exc: BaseException) -> str:
    """A configuration error as one line: pydantic's per-field errors joined, newlines folded.

    Args:
        exc: A click exception (typer's ``TyperException``), ``pydantic.ValidationError`` or any
            exception.

    Returns:
        The message without newlines (a pydantic error reads ``field.sub: message (got 'x')``).
    """
    if _is_validation_error(exc):
        parts = []
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or exc.title
            parts.append(f"{where}: {err['msg']} (got {err['input']!r})" if "input" in err else f"{where}: {err['msg']}")
        text = f"invalid {exc.title}: " + "; ".join(parts)
    elif isinstance(exc, typer.TyperException) and hasattr(exc, "format_message"):
        text = exc.format_message()
    else:
        text = str(exc)
    return " ".join(text.split())


def usage_error(exc: ConfigError, options: Mapping[str, str] | None = None) -> typer.BadParameter:
    """A :class:`ConfigError` as click's usage error for the option of the same name (exit code 2).

    ``parameter 'nodes'`` becomes ``Invalid value for '--nodes': ...``; ``options`` names the
    options spelled otherwise than their parameter (``{"cluster_file": "--cluster"}``).
    """
    if exc.parameter is None:
        return typer.BadParameter(exc.reason)
    name = exc.parameter.split("[", 1)[0]
    option = (options or {}).get(name) or "--" + name.replace("_", "-")
    return typer.BadParameter(exc.reason, param_hint=f"'{option}'")


def run_cli(command: Callable[..., Any], argv: Sequence[str] | None = None, prog_name: str = "iadeep") -> int:
    """Run a typer app (or click command) so that configuration errors never end in a traceback.

    Args:
        command: The typer app or click command.
        argv: Arguments (default ``sys.argv[1:]``).
        prog_name: The program name shown in messages.

    Returns:
        0 on success; 2 for a configuration error (one line on stderr: ``<command>: error:
        <what, naming the option, setting or parameter>``); the command's own code otherwise.
    """
    try:
        code = command(args=list(sys.argv[1:] if argv is None else argv), prog_name=prog_name, standalone_mode=False)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        return 1
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else prog_name
        if text := one_line(exc):  # empty after a group's help was shown (no command given)
            typer.echo(f"{where}: error: {text}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except Exception as exc:
        if not (isinstance(exc, ConfigError) or _is_validation_error(exc)):
            raise
        typer.echo(f"{prog_name}: error: {one_line(exc)}", err=True)
        return 2
    return code if isinstance(code, int) else 0


