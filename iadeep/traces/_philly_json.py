"""The original Philly job log (``cluster_job_log``, msr-fiddle/philly-traces).

Source: ``msr-fiddle/philly-traces`` ``trace-data.tar.gz`` (Jeon et al., USENIX ATC'19,
CC-BY-4.0), 117,325 jobs submitted 2017-08-07 .. 2017-12-22. The file is one JSON list of jobs::

    {"status": "Pass" | "Killed" | "Failed", "vc": "<hash>", "jobid": "application_...",
     "user": "<hash>", "submitted_time": "YYYY-mm-dd HH:MM:SS",
     "attempts": [{"start_time": str | null, "end_time": str | null,
                   "detail": [{"ip": "m47", "gpus": ["gpu0", ...]}, ...]}, ...]}

Per the trace README, a job may have no attempts, and an attempt may lack ``start_time`` and/or
``end_time`` (a logging gap, or a job still running at the snapshot). We treat JSON ``null``,
``"None"`` and ``""`` alike as missing.
"""

from __future__ import annotations

import json
import re
from os import PathLike

import numpy as np
import pandas as pd

from ._errors import TraceFormatError
from ._options import TraceOptions
from ._philly import PHILLY_TIME_FORMAT
from ._rows import EPOCH, RowChecker
from ._source import RawTrace, read_file, select_virtual_clusters, zero_duration_rule

__all__ = ["read_philly_json"]

_WS = re.compile(r"\s*")
_MISSING_TEXT = frozenset({"", "None"})


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def split_json_list(text: str, display: str) -> tuple[list[object], np.ndarray]:
    """Decode a top-level JSON list element by element.

    Returns:
        ``(elements, lines)``: the decoded elements and the 1-based line where each starts.

    Raises:
        TraceFormatError: for invalid JSON or a top level that is not a list (never skippable).
    """
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    if text[i : i + 1] != "[":
        raise TraceFormatError(display, _line_of(text, i), None, "expected a JSON list of jobs ('[')")
    items: list[object] = []
    offsets: list[int] = []
    i = _WS.match(text, i + 1).end()
    if text[i : i + 1] == "]":
        i += 1
    else:
        while True:
            try:
                obj, end = dec.raw_decode(text, i)
            except json.JSONDecodeError as e:
                raise TraceFormatError(
                    display, e.lineno, None, f"invalid JSON: {e.msg} (character {e.colno} of the line)"
                ) from None
            items.append(obj)
            offsets.append(i)
            i = _WS.match(text, end).end()
            c = text[i : i + 1]
            if c == ",":
                i = _WS.match(text, i + 1).end()
            elif c == "]":
                i += 1
                break
            else:
                raise TraceFormatError(
                    display, _line_of(text, i), None, "invalid JSON: expected ',' or ']' after a job"
                )
    i = _WS.match(text, i).end()
    if i < len(text):
        raise TraceFormatError(display, _line_of(text, i), None, "invalid JSON: text after the list")
    lines = np.empty(len(offsets), dtype=np.int64)
    cur, prev = 1, 0
    for k, off in enumerate(offsets):
        cur += text.count("\n", prev, off)
        prev = off
        lines[k] = cur
    return items, lines


def _text_or_none(v: object) -> str | None:
    """A JSON scalar as text; ``null``, ``""`` and ``"None"`` become ``None``."""
    if v is None or (isinstance(v, str) and v.strip() in _MISSING_TEXT):
        return None
    return v if isinstance(v, str) else json.dumps(v)


def read_philly_json(path: str | PathLike[str], options: TraceOptions) -> RawTrace:
    """Read ``cluster_job_log``.

    ``job_id`` = ``jobid``; duration = sum over attempts of ``end_time - start_time`` for the
    attempts that have both; num_gpus = max over attempts of the GPUs listed across the
    attempt's ``detail`` entries (machines). Every status (Pass, Killed, Failed) is kept: all
    used their GPUs. Rules of :mod:`iadeep.traces._taxonomy`, in this order: ``no_attempts``,
    ``never_scheduled`` (no attempt has a ``start_time``), ``invalid_attempt_times`` (an attempt
    ends before it starts: the whole job is dropped), ``censored`` (still running at the
    snapshot, taken as the latest timestamp anywhere in the file: the *last* attempt has a
    ``start_time`` and no ``end_time``, or its ``end_time`` is the snapshot; kept, duration =
    completed attempts + snapshot - the running attempt's start, 0 s for an attempt started at
    the snapshot), ``missing_attempt_times`` (attempts started, none complete, not censored),
    ``zero_gpu``, ``zero_duration`` (0 s and not censored: kept and flagged, dropped with
    ``options.drop_zero_duration``). An earlier attempt missing one of its times is a logging gap
    and is ignored. Time origin: the earliest ``submitted_time`` among the file's good jobs.
    Line numbers in errors are those where the job's ``{`` is; the column is the key path
    (e.g. ``attempts[1].end_time``).

    Raises:
        TraceFormatError: invalid JSON (always), a bad job (unless ``skip_bad_rows``): not an
            object, missing/duplicate ``jobid``, missing ``vc``, bad ``submitted_time``,
            ``attempts`` / ``detail`` / ``gpus`` not lists, an unparseable attempt time; with
            ``strict``, the first quirk (see above).
        ValueError: if ``options.virtual_cluster`` names a ``vc`` not in the file.
    """
    src = read_file(path)
    try:
        text = src.data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceFormatError(src.display, None, None, f"not UTF-8 text ({e.reason})") from None
    jobs_raw, lines = split_json_list(text, src.display)
    n = len(jobs_raw)
    chk = RowChecker(src.display, lines, options.skip_bad_rows, options.strict)
    jobid: list[object] = [None] * n
    vc: list[object] = [None] * n
    submitted: list[object] = [None] * n
    n_att = np.zeros(n, dtype=np.int64)
    a_job: list[int] = []
    a_k: list[int] = []
    a_start: list[object] = []
    a_end: list[object] = []
    a_gpus: list[int] = []
    for i, job in enumerate(jobs_raw):
        if not isinstance(job, dict):
            chk.flag_row(i, None, f"a job must be a JSON object, got {type(job).__name__}")
            continue
        jobid[i] = _text_or_none(job.get("jobid"))
        vc[i] = _text_or_none(job.get("vc"))
        submitted[i] = _text_or_none(job.get("submitted_time"))
        attempts = job.get("attempts")
        if attempts is None:
            continue
        if not isinstance(attempts, list):
            chk.flag_row(i, "attempts", "must be a list", json.dumps(attempts))
            continue
        n_att[i] = len(attempts)
        for k, att in enumerate(attempts):
            if not isinstance(att, dict):
                chk.flag_row(i, f"attempts[{k}]", "must be an object", json.dumps(att))
                continue
            detail = att.get("detail") or []
            if not isinstance(detail, list):
                chk.flag_row(i, f"attempts[{k}].detail", "must be a list", json.dumps(detail))
                continue
            g = 0
            for d, machine in enumerate(detail):
                gl = machine.get("gpus") if isinstance(machine, dict) else None
                if gl is None:
                    gl = []
                if not isinstance(gl, list):
                    chk.flag_row(i, f"attempts[{k}].detail[{d}].gpus", "must be a list", json.dumps(gl))
                    gl = []
                g += len(gl)
            a_job.append(i)
            a_k.append(k)
            a_start.append(_text_or_none(att.get("start_time")))
            a_end.append(_text_or_none(att.get("end_time")))
            a_gpus.append(g)

    ids = chk.text(pd.Series(jobid, dtype=object), "jobid", unique=True)
    vcs = chk.text(pd.Series(vc, dtype=object), "vc")
    submit = chk.timestamp(pd.Series(submitted, dtype=object), "submitted_time", PHILLY_TIME_FORMAT)

    # Attempts, vectorised: times, completion, per-job sums and maxima.
    aj = np.asarray(a_job, dtype=np.int64)
    ak = np.asarray(a_k, dtype=np.int64)
    times = {}
    for key, vals in (("start_time", a_start), ("end_time", a_end)):
        s = pd.Series(vals, dtype=object)
        present = s.notna().to_numpy()
        t = pd.to_datetime(s, format=PHILLY_TIME_FORMAT, errors="coerce")
        secs = (t - EPOCH).dt.total_seconds().to_numpy(dtype=np.float64) if len(s) else np.empty(0)
        for j in np.flatnonzero(present & np.isnan(secs)):
            chk.flag_row(
                int(aj[j]), f"attempts[{a_k[j]}].{key}",
                f"{vals[j]!r} is not a timestamp like 'YYYY-mm-dd HH:MM:SS'", str(vals[j]),
            )
        times[key] = secs
    start, end = times["start_time"], times["end_time"]
    run = end - start
    complete = np.isfinite(run) & (run >= 0)
    started = np.isfinite(start)
    is_last = ak == n_att[aj] - 1 if len(aj) else np.zeros(0, dtype=bool)
    running = is_last & started & ~np.isfinite(end)
    stamps = np.concatenate([submit, start, end])
    snapshot = float(np.nanmax(stamps)) if np.isfinite(stamps).any() else 0.0
    # the log's last timestamp as an end: the snapshot was written while the attempt ran
    at_snapshot = is_last & complete & (end == snapshot)

    # Per job (n): which rule applies, and where (column) for strict mode's message.
    def per_job(att_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mask = np.zeros(n, dtype=bool)
        col = np.full(n, None, dtype=object)
        for j in np.flatnonzero(att_mask)[::-1]:  # the first such attempt names the column
            mask[aj[j]] = True
            col[aj[j]] = j
        return mask, col

    inv_mask, inv_at = per_job(np.isfinite(run) & (run < 0))
    cen_mask, cen_at = per_job(running | at_snapshot)
    n_started = np.bincount(aj[started], minlength=n)
    n_complete = np.bincount(aj[complete], minlength=n)
    no_att = n_att == 0
    never = (n_att > 0) & (n_started == 0)
    cen_mask &= ~inv_mask
    missing = (n_started > 0) & (n_complete == 0) & ~inv_mask & ~cen_mask

    duration = np.zeros(n)
    np.add.at(duration, aj[complete], run[complete])
    np.add.at(duration, aj[running], snapshot - start[running])
    gpus = np.zeros(n, dtype=np.int64)
    np.maximum.at(gpus, aj, np.asarray(a_gpus, dtype=np.int64))

    def at(idx: np.ndarray, key: str) -> np.ndarray:
        return np.array([None if j is None else f"attempts[{a_k[j]}].{key}" for j in idx], dtype=object)

    def att_text(idx: np.ndarray, vals: list[object]) -> np.ndarray:
        return np.array([None if j is None else str(vals[j]) for j in idx], dtype=object)

    chk.quirk(no_att, "no_attempts", "attempts", "the job has no attempt")
    chk.quirk(never, "never_scheduled", "attempts", "no attempt has a start_time")
    chk.quirk(inv_mask, "invalid_attempt_times", at(inv_at, "end_time"),
              lambda v: f"{v!r} is before the attempt's start_time", att_text(inv_at, a_end))
    chk.quirk(cen_mask, "censored", at(cen_at, "end_time"),
              "missing or the log's last timestamp: the last attempt was still running when the trace "
              "was taken (censored)")
    chk.quirk(missing, "missing_attempt_times", "attempts",
              "no attempt has both a start_time and an end_time")
    ok = chk.finish()
    origin = float(submit[ok].min()) if ok.any() else 0.0
    jobs = pd.DataFrame(
        {
            "job_id": ids[ok],
            "submit_s": submit[ok] - origin,
            "duration": duration[ok],
            "num_gpus": gpus[ok],
            "gpu_milli": np.full(int(ok.sum()), np.nan),
            "cluster": vcs[ok],
            "censored": cen_mask[ok],
        }
    )
    raw = RawTrace(
        jobs,
        rows_read=n,
        skipped_rows=chk.skipped,
        files={src.name: src.sha256},
        origin=(
            f"the earliest submitted_time in the file ({pd.Timestamp(origin, unit='s')})"
            if ok.any() else "none (no jobs)"
        ),
    )
    raw.flag(cen_mask[ok], "censored")
    raw.drop_each({
        "no_attempts": chk.quirk_mask("no_attempts")[ok],
        "never_scheduled": chk.quirk_mask("never_scheduled")[ok],
        "invalid_attempt_times": chk.quirk_mask("invalid_attempt_times")[ok],
        "missing_attempt_times": chk.quirk_mask("missing_attempt_times")[ok],
    })
    raw.drop(raw.jobs["num_gpus"].to_numpy() == 0, "zero_gpu")
    zero_duration_rule(raw, options.drop_zero_duration)
    select_virtual_clusters(raw, options.virtual_cluster, "philly-json")
    return raw
