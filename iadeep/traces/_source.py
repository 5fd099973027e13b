"""Reading trace files: bytes, checksums and CSV text with line numbers."""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from ._errors import TraceFormatError, UnknownVirtualClusterError
from ._rows import RowChecker

__all__ = ["SourceFile", "read_file", "files_digest", "read_csv_text", "RawTrace", "select_virtual_clusters",
           "zero_duration_rule"]


@dataclass(frozen=True)
class SourceFile:
    """One file's bytes.

    Attributes:
        name: short name (file name, or tarball member name).
        display: how error messages name it (the path, or ``"<tarball>[<member>]"``).
        data: the file's content.
        sha256: hex SHA-256 of ``data``.
    """

    name: str
    display: str
    data: bytes
    sha256: str


def read_file(path: str | PathLike[str]) -> SourceFile:
    """Read a whole file and hash it.

    Raises:
        FileNotFoundError: if ``path`` does not exist; IsADirectoryError for a folder.
    """
    p = Path(path)
    data = p.read_bytes()
    return SourceFile(p.name, str(path), data, hashlib.sha256(data).hexdigest())


def files_digest(files: dict[str, str]) -> str:
    """One SHA-256 for several files: of their ``sha256sum`` manifest, lines sorted by name.

    A single file's digest is its own SHA-256.
    """
    if len(files) == 1:
        return next(iter(files.values()))
    manifest = "".join(f"{h}  {n}\n" for n, h in sorted(files.items()))
    return hashlib.sha256(manifest.encode()).hexdigest()


_SKIP_RE = re.compile(r"Skipping line (\d+): (.*)")


def read_csv_text(
    src: SourceFile, required: Sequence[str], skip_bad_rows: bool, strict: bool = False
) -> tuple[pd.DataFrame, RowChecker]:
    """Parse a CSV file into a DataFrame of text, with each row's line number known.

    Every field is read as text (nothing is converted yet); empty lines (and lines of empty
    fields, e.g. ``,,,``) are ignored; lines with too many fields become bad rows (recorded in
    the returned checker).
    Line numbers assume one line per record (no quoted line breaks), header on line 1.

    Returns:
        ``(frame, checker)``: the text fields (column names stripped) with a RangeIndex, and a
        :class:`RowChecker` whose ``lines`` are the rows' 1-based line numbers.

    Raises:
        TraceFormatError: if the file is empty, not UTF-8, or lacks a ``required`` column (line 1).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = pd.read_csv(
                io.BytesIO(src.data),
                dtype=str,
                na_filter=False,
                skip_blank_lines=False,
                on_bad_lines="warn",
                encoding="utf-8",
            )
        except pd.errors.EmptyDataError:
            raise TraceFormatError(src.display, None, None, "empty file (no header line)") from None
        except UnicodeDecodeError as e:
            raise TraceFormatError(src.display, None, None, f"not UTF-8 text ({e.reason})") from None
        except pd.errors.ParserError as e:
            raise TraceFormatError(src.display, None, None, f"not a CSV file: {e}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceFormatError(
            src.display, 1, missing[0], f"missing from the header (header: {list(df.columns)})"
        )
    skipped: list[tuple[int, str]] = []
    for w in caught:
        for m in _SKIP_RE.finditer(str(w.message)):
            skipped.append((int(m.group(1)), m.group(2).strip()))
    skipped_lines = np.array(sorted(n for n, _ in skipped), dtype=np.int64)
    all_lines = np.arange(2, 2 + len(df) + len(skipped_lines), dtype=np.int64)
    lines = np.setdiff1d(all_lines, skipped_lines, assume_unique=True)
    if len(lines) != len(df):  # pragma: no cover - pandas changed its warning text
        lines = np.arange(2, 2 + len(df), dtype=np.int64)
    blank = np.ones(len(df), dtype=bool)
    for c in df.columns:
        blank &= (df[c] == "").to_numpy()
    if blank.any():
        df = df.loc[~blank].reset_index(drop=True)
        lines = lines[~blank]
    checker = RowChecker(src.display, lines, skip_bad_rows, strict)
    for n, why in skipped:
        checker.flag_line(n, None, f"wrong number of fields ({why})")
    return df, checker


@dataclass
class RawTrace:
    """What a format reader hands to the common pipeline.

    Attributes:
        jobs: columns ``job_id`` (str), ``submit_s`` (float64, seconds from the trace origin),
            ``duration`` (float64 s), ``num_gpus`` (int64), ``gpu_milli`` (float64) and, where
            the trace has them, ``cluster`` (str, the virtual cluster), ``censored`` (bool) and
            ``gpu_spec`` (str); in any order.
        rows_read: data rows read (CSV lines or JSON job objects).
        skipped_rows: bad rows skipped.
        dropped: reason -> count of well-formed rows left out so far.
        Jobs kept but marked (e.g. ``censored``) carry a bool column ``flag:<reason>``
        (:meth:`flag`); :func:`~iadeep.traces.load_trace` counts them among the jobs it keeps.
        files: file name -> sha256 hex of every file read.
        origin: what time 0 of ``submit_s`` is (for ``df.attrs``).
    """

    jobs: pd.DataFrame
    rows_read: int
    skipped_rows: int
    files: dict[str, str]
    origin: str
    dropped: dict[str, int] = field(default_factory=dict)

    def drop_each(self, masks: dict[str, np.ndarray]) -> None:
        """Drop by several reasons at once: a job matching several counts under the first.

        Args:
            masks: reason -> bool mask aligned with the current ``jobs``, in priority order.
        """
        taken = np.zeros(len(self.jobs), dtype=bool)
        for reason, mask in masks.items():
            mine = np.asarray(mask, dtype=bool) & ~taken
            if mine.any():
                self.dropped[reason] = self.dropped.get(reason, 0) + int(mine.sum())
                taken |= mine
        if taken.any():
            self.jobs = self.jobs.loc[~taken].reset_index(drop=True)

    def flag(self, mask: np.ndarray, reason: str) -> None:
        """Mark the current jobs where ``mask`` is true with ``reason`` (column ``flag:<reason>``)."""
        mask = np.asarray(mask, dtype=bool)
        col = f"flag:{reason}"
        self.jobs[col] = mask | (self.jobs[col].to_numpy(dtype=bool) if col in self.jobs.columns else False)

    def drop(self, mask: np.ndarray, reason: str) -> None:
        """Remove the jobs where ``mask`` is true and count them under ``reason``."""
        mask = np.asarray(mask, dtype=bool)
        n = int(mask.sum())
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n
            self.jobs = self.jobs.loc[~mask].reset_index(drop=True)


def select_virtual_clusters(raw: RawTrace, wanted: tuple[str, ...] | None, trace: str) -> None:
    """Keep only jobs whose ``cluster`` column is in ``wanted`` (others: ``other_virtual_cluster``).

    Raises:
        UnknownVirtualClusterError: (a ``ValueError``) a wanted cluster has no job in the trace (the
            message lists those it has).
    """
    if wanted is None:
        return
    vc = raw.jobs["cluster"].to_numpy(dtype=object)
    known = sorted(set(vc.tolist()))
    unknown = [v for v in wanted if v not in known]
    if unknown:
        raise UnknownVirtualClusterError(f"{trace}: unknown virtual cluster(s) {unknown}; the trace has {known}")
    raw.drop(~np.isin(vc, list(wanted)), "other_virtual_cluster")


def zero_duration_rule(raw: RawTrace, drop: bool) -> None:
    """Apply the ``zero_duration`` rule to the jobs that ran for 0 s and are not censored.

    Such a job is a real job that completes at once: it is kept and flagged ``zero_duration``,
    or, with ``drop`` (:attr:`~iadeep.traces.TraceOptions.drop_zero_duration`), dropped and
    counted. A censored job of 0 s (started at the snapshot) is neither: it stays, censored.
    """
    dur = raw.jobs["duration"].to_numpy(dtype=np.float64)
    cens = (raw.jobs["censored"].to_numpy(dtype=bool) if "censored" in raw.jobs.columns
            else np.zeros(len(dur), dtype=bool))
    zero = (dur == 0) & ~cens
    if drop:
        raw.drop(zero, "zero_duration")
    else:
        raw.flag(zero, "zero_duration")
