"""Errors raised by the trace loaders and the job-table validator."""

from __future__ import annotations

from os import PathLike

__all__ = ["TraceFormatError", "JobTableError", "UnknownVirtualClusterError"]


class TraceFormatError(ValueError):
    """A trace file holds a value (or a structure) the loader cannot use.

    The message names the file, the 1-based line number in that file and the column, e.g.
    ``philly.csv:1234: column 'duration': 'abc' is not a number``.

    Attributes:
        path: the file (for a tarball member: ``"<tarball>[<member>]"``).
        line: 1-based line number in the file (the header is line 1 in CSV files; in JSON, the
            line where the offending job object starts). ``None`` when the problem has no line.
        column: the column (CSV) or key path (JSON, e.g. ``"attempts[1].end_time"``) at fault;
            ``None`` for problems with a whole line (e.g. a wrong number of fields).
        value: the offending raw text, or ``None``.
        problem: the description of the problem without the location prefix.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        line: int | None,
        column: str | None,
        problem: str,
        value: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.value = value
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        what = problem if column is None else f"column {column!r}: {problem}"
        super().__init__(f"{where}: {what}")

    def __reduce__(self):  # keep picklable (multiprocessing workers re-raise it)
        return (type(self), (self.path, self.line, self.column, self.problem, self.value))


class JobTableError(ValueError):
    """A DataFrame does not follow the normalised job-table schema (see :mod:`iadeep.traces._schema`)."""


class UnknownVirtualClusterError(ValueError):
    """A virtual cluster asked for (``TraceOptions.virtual_cluster``) has no job in the trace; the
    message names the trace and lists the clusters it has."""
