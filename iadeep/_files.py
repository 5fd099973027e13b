"""Reading a user's input file so that every failure names the file (no traceback, no bare errno)."""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path, what: str, error: type[Exception] = ValueError) -> str:
    """The text of ``path``, a ``what`` (e.g. ``"JSON job log"``), for the error messages.

    Raises:
        FileNotFoundError: no such file (as :meth:`pathlib.Path.read_text`: callers report it their way).
        error: (``ValueError`` unless given; its message starts with the path) not UTF-8 text (with
            the byte offset), a folder, or unreadable (permissions, I/O error).
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as e:
        raise error(f"{path}: not a {what}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None


def read_json(path: Path, what: str, error: type[Exception] = ValueError) -> object:
    """The JSON document in ``path``, a ``what`` (e.g. ``"JSON job log"``): :func:`read_text`, then
    parsed.

    Raises:
        FileNotFoundError: no such file.
        error: as :func:`read_text`, or not JSON (``<path>: not JSON: <reason>: line L column C``).
    """
    import json

    try:
        return json.loads(read_text(path, what, error))
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON: {e.msg}: line {e.lineno} column {e.colno}") from None
