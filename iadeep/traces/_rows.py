"""Vectorised parsing of raw text columns, with bad-row bookkeeping.

A :class:`RowChecker` parses whole columns at once (``pd.to_numeric(errors="coerce")``,
``pd.to_datetime(errors="coerce")``) and records which rows are bad and why. At the end,
:meth:`RowChecker.finish` either raises :class:`TraceFormatError` for the bad value on the
smallest line number (ties: the column checked first), or, with ``skip_bad_rows``, returns the
mask of good rows and counts the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ._errors import TraceFormatError

__all__ = ["RowChecker", "EPOCH"]

EPOCH = pd.Timestamp("1970-01-01")


def _to_text(v: object) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    return v if isinstance(v, str) else str(v)


def _as_str_series(raw: pd.Series | np.ndarray) -> pd.Series:
    """Raw values as a Series of stripped text; ``None`` / NaN become ``""``."""
    s = raw if isinstance(raw, pd.Series) else pd.Series(raw, dtype=object)
    if pd.api.types.is_object_dtype(s.dtype) or not pd.api.types.is_string_dtype(s.dtype):
        s = s.map(_to_text).astype(object)
    else:
        s = s.fillna("")
    return s.str.strip()


class RowChecker:
    """Bad-row bookkeeping for one file.

    Args:
        path: the file name used in error messages.
        lines: 1-based line number in the file of each row, shape ``(n_rows,)``.
        skip_bad_rows: if true, :meth:`finish` drops bad rows instead of raising.
        strict: if true, :meth:`quirk` marks rows bad (an error, like a malformed value) instead of
            recording them under their reason (see :mod:`iadeep.traces._taxonomy`).
    """

    def __init__(self, path: str, lines: np.ndarray, skip_bad_rows: bool, strict: bool = False) -> None:
        self.path = path
        self.lines = np.asarray(lines, dtype=np.int64)
        self.skip_bad_rows = skip_bad_rows
        self.strict = strict
        self.quirks: dict[str, np.ndarray] = {}
        self.bad = np.zeros(len(self.lines), dtype=bool)
        self.extra_skipped = 0
        self._first: tuple[int, int, str | None, str, str | None] | None = None
        self._seq = 0

    # -- recording -------------------------------------------------------------------------
    def _offer(self, line: int, column: str | None, problem: str, value: str | None) -> None:
        cand = (line, self._seq, column, problem, value)
        self._seq += 1
        if self._first is None or cand[:2] < self._first[:2]:
            self._first = cand

    def flag(
        self,
        mask: np.ndarray,
        column: str | np.ndarray | None,
        problem: str | Callable[[str | None], str],
        values: pd.Series | np.ndarray | None = None,
    ) -> None:
        """Mark the rows where ``mask`` is true as bad.

        Args:
            mask: boolean array over rows (or an integer index array).
            column: the column name, or an array of names per row (JSON key paths).
            problem: the problem text, or a function of the raw value returning it.
            values: the raw values (same length as the rows), for the message.
        """
        mask = np.asarray(mask)
        idx = np.flatnonzero(mask) if mask.dtype == bool else mask.astype(np.int64)
        if idx.size == 0:
            return
        self.bad[idx] = True
        i = int(idx[np.argmin(self.lines[idx])])
        value = None
        if values is not None:
            v = values.iloc[i] if isinstance(values, pd.Series) else values[i]
            value = None if v is None else str(v)
        col = column if column is None or isinstance(column, str) else str(column[i])
        text = problem(value) if callable(problem) else problem
        self._offer(int(self.lines[i]), col, text, value)

    def flag_row(self, i: int, column: str | None, problem: str, value: str | None = None) -> None:
        """Mark row ``i`` bad, with its own column name and value."""
        self.bad[i] = True
        self._offer(int(self.lines[i]), column, problem, value)

    def quirk(
        self,
        mask: np.ndarray,
        reason: str,
        column: str | np.ndarray | None,
        problem: str | Callable[[str | None], str],
        values: pd.Series | np.ndarray | None = None,
    ) -> None:
        """Record a known quirk of the trace (see :data:`iadeep.traces._taxonomy.REASONS`).

        Without ``strict``, the rows where ``mask`` is true are remembered under ``reason``
        (:meth:`quirk_mask`; the reader then drops or flags them). With ``strict`` they are bad
        rows, reported as ``"<problem> (quirk '<reason>'; allowed without strict)"``.
        """
        mask = np.asarray(mask, dtype=bool)
        if self.strict:
            if callable(problem):
                fn = problem
                self.flag(mask, column, lambda v: f"{fn(v)} (quirk {reason!r}; allowed without strict)", values)
            else:
                self.flag(mask, column, f"{problem} (quirk {reason!r}; allowed without strict)", values)
            return
        prev = self.quirks.get(reason)
        self.quirks[reason] = mask.copy() if prev is None else (prev | mask)

    def quirk_mask(self, reason: str) -> np.ndarray:
        """Rows recorded under ``reason`` by :meth:`quirk` (all false when none), shape ``(n_rows,)``."""
        m = self.quirks.get(reason)
        return np.zeros(len(self.lines), dtype=bool) if m is None else m

    def flag_line(self, line: int, column: str | None, problem: str, value: str | None = None) -> None:
        """Record a bad line that produced no row (e.g. a wrong number of fields)."""
        self.extra_skipped += 1
        self._offer(line, column, problem, value)

    # -- parsers ---------------------------------------------------------------------------
    def number(
        self,
        raw: pd.Series,
        column: str,
        *,
        integer: bool = False,
        allow_missing: bool = False,
        allow_negative: bool = False,
    ) -> np.ndarray:
        """Parse a column of numbers; bad entries become NaN and mark their row bad.

        Bad: an empty field (unless ``allow_missing``), text that is not a finite number, a
        negative number (unless ``allow_negative``), a fraction or a number above 2**53 where
        ``integer`` is asked.

        Returns:
            float64 array, shape ``(n_rows,)``; NaN where missing or bad.
        """
        s = _as_str_series(raw)
        missing = (s.str.len() == 0).to_numpy()
        num = np.asarray(pd.to_numeric(s.to_numpy(dtype=object), errors="coerce"), dtype=np.float64)
        notnum = ~missing & ~np.isfinite(num)
        if not allow_missing:
            self.flag(missing, column, "missing value")
        self.flag(notnum, column, lambda v: f"{v!r} is not a number", s)
        with np.errstate(invalid="ignore"):
            bad = notnum.copy()
            if not allow_negative:
                neg = num < 0
                self.flag(neg, column, lambda v: f"{v!r} is negative", s)
                bad |= neg
            if integer:
                frac = np.isfinite(num) & (num != np.round(num))
                self.flag(frac, column, lambda v: f"{v!r} is not a whole number", s)
                # above 2**53 a float64 no longer holds every integer, and an int64 cast overflows
                huge = np.isfinite(num) & ~frac & (np.abs(num) > 2**53)
                self.flag(huge, column, lambda v: f"{v!r} is too large", s)
                bad |= frac | huge
        num[bad] = np.nan
        return num

    def timestamp(self, raw: pd.Series, column: str, fmt: str, *, allow_missing: bool = False) -> np.ndarray:
        """Parse timestamps written as ``fmt`` (e.g. ``"%Y-%m-%d %H:%M:%S"``).

        Returns:
            float64 seconds since 1970-01-01 (naive, no time zone), NaN where missing or bad.
        """
        s = _as_str_series(raw)
        missing = (s.str.len() == 0).to_numpy()
        ts = pd.to_datetime(s.where(~missing, None), format=fmt, errors="coerce")
        secs = (ts - EPOCH).dt.total_seconds().to_numpy(dtype=np.float64)
        if not allow_missing:
            self.flag(missing, column, "missing value")
        readable = fmt.replace("%Y", "YYYY").replace("%m", "mm").replace("%d", "dd")
        readable = readable.replace("%H", "HH").replace("%M", "MM").replace("%S", "SS")
        self.flag(
            ~missing & np.isnan(secs), column, lambda v: f"{v!r} is not a timestamp like {readable!r}", s
        )
        return secs

    def text(self, raw: pd.Series, column: str, *, unique: bool = False) -> np.ndarray:
        """A non-empty text column (stripped); with ``unique``, later duplicates are bad.

        Returns:
            object array of ``str``, shape ``(n_rows,)``.
        """
        s = _as_str_series(raw)
        self.flag((s.str.len() == 0).to_numpy(), column, "missing value")
        if unique:
            dup = (s.duplicated() & (s.str.len() > 0)).to_numpy()
            self.flag(dup, column, lambda v: f"duplicate id {v!r}", s)
        return s.to_numpy(dtype=object)

    # -- outcome ---------------------------------------------------------------------------
    @property
    def skipped(self) -> int:
        """Bad rows (and bad row-less lines) found so far."""
        return int(self.bad.sum()) + self.extra_skipped

    def raise_first(self) -> None:
        """Raise :class:`TraceFormatError` for the earliest bad value, if any."""
        if self._first is not None:
            line, _, column, problem, value = self._first
            raise TraceFormatError(self.path, line, column, problem, value)

    def finish(self) -> np.ndarray:
        """Return the mask of good rows, or raise for the first bad one.

        Raises:
            TraceFormatError: if any row is bad and ``skip_bad_rows`` is false.
        """
        if not self.skip_bad_rows:
            self.raise_first()
        return ~self.bad
