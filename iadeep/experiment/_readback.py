"""Reading a live run back: from the Jobs and pods of the API to the simulator's result.

:func:`live_result` turns the Jobs and pods of one policy's run (:mod:`iadeep.experiment._live`)
into a :class:`~iadeep.sim.SimResult` with the simulator's columns: submit from the pod's
``iadeep.io/submit-time`` (the gate's removal), start and end from the emulator's
``iadeep.io/emulated-start``/``-end``, each converted to emulated seconds
``submit_0 + (wall - t0) x speedup``; placement and co-location partners from the pods'
``iadeep.io/gpu-index`` and nodes (two jobs are partners when their runs overlap on a GPU); the
queue-length and utilisation timeline rebuilt from those times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from iadeep.experiment._replay import SUBMIT_ANNOTATION, SUBMIT_WALL_ANNOTATION
from iadeep.interference import InterferenceModel
from iadeep.sim import ClusterSpec, SimResult

__all__ = ["JOB_ID_ANNOTATION", "live_result"]

JOB_ID_ANNOTATION = "iadeep.io/job-id"


def live_result(jobs: pd.DataFrame, jobs_doc: list[dict[str, Any]], pods: list[dict[str, Any]],
                done_at: dict[str, tuple[str, float]], *, cluster: ClusterSpec, policy: str, run: str, t0: float,
                submit0: float, speedup: float, model: InterferenceModel,
                on_wall: bool = True) -> tuple[SimResult, dict[str, float]]:
    """The simulator-shaped result of a live run from the Jobs and pods read back (module docstring).

    Args:
        t0: the first arrival's time, on the run's clock (Unix s).
        on_wall: the run's clock is the wall. Without it (a held clock: the pods' times are on it,
            :class:`iadeep.emulator.HeldClock`), bind latency is taken from the arrival's wall time
            (``iadeep.io/submit-wall``) and start and completion lags, which mix the extender's
            and the Job controller's wall times with the clock's, are not reported (NaN).

    Returns:
        ``(result, breakdown)``: breakdown holds medians and p90s (wall s) of bind latency (bind -
        submit), start lag (emulated start - bind) and completion lag (Job condition - emulated
        end), as ``<name>_s_median`` / ``<name>_s_p90``.

    Raises:
        RuntimeError: a finished Job has no pod with the emulator's times (the message names it).
    """
    def emu(t: float) -> float:
        return submit0 + (t - t0) * speedup

    by_id = {str(j): i for i, j in enumerate(jobs["job_id"].astype(str))}
    submit_wall = {}  # the arrival: on the pod (gate removed), else on the Job (created at its arrival)
    for d in [*jobs_doc, *pods]:
        ann = (d.get("metadata") or {}).get("annotations") or {}
        if SUBMIT_ANNOTATION in ann:
            submit_wall[ann.get(JOB_ID_ANNOTATION)] = float(ann[SUBMIT_ANNOTATION])
    n = len(jobs)
    start, end, submit = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    placement = [""] * n
    final_batch = jobs["batch_size"].to_numpy(dtype=np.int64).copy()
    trials = np.zeros(n, dtype=np.int64)
    evictions = np.zeros(n, dtype=np.int64)
    runs: list[tuple[int, str, float, float]] = []  # (job, "node/gpu", start, end)
    bind_lat, start_lag, done_lag = [], [], []

    def where(p: dict[str, Any], ann: dict[str, str]) -> tuple[str, list[str]]:
        node = (p.get("spec") or {}).get("nodeName") or ""
        return node[len(run) + 1:] if node.startswith(f"{run}-") else node, [g for g in ann.get("iadeep.io/gpu-index", "").split(",") if g]

    first_wall: dict[str, float] = {}  # a job's first start: its first pod's, when a pod of it was evicted
    for p in pods:  # pods evicted for a preemption (the emulator wrote their start and eviction times)
        ann = (p.get("metadata") or {}).get("annotations") or {}
        jid = ann.get(JOB_ID_ANNOTATION)
        if jid in by_id and "iadeep.io/emulated-evicted" in ann and "iadeep.io/emulated-start" in ann:
            s_wall, e_wall = float(ann["iadeep.io/emulated-start"]), float(ann["iadeep.io/emulated-evicted"])
            first_wall[jid] = min(first_wall.get(jid, math.inf), s_wall)
            node, gpus = where(p, ann)
            runs += [(by_id[jid], f"{node}/{g}", emu(s_wall), emu(e_wall)) for g in gpus]
    for p in pods:
        meta = p.get("metadata") or {}
        ann = meta.get("annotations") or {}
        jid = ann.get(JOB_ID_ANNOTATION)
        if jid not in by_id or "iadeep.io/emulated-end" not in ann:
            continue
        i = by_id[jid]
        s_wall, e_wall = float(ann["iadeep.io/emulated-start"]), float(ann["iadeep.io/emulated-end"])
        first = min(s_wall, first_wall.get(jid, math.inf), float(ann.get("iadeep.io/emulated-first-start") or math.inf))
        # a gang's members (pods of one Job): the job starts with its first member and ends with its last
        s_emu, e_emu = emu(first), emu(e_wall)
        start[i] = s_emu if np.isnan(start[i]) else min(start[i], s_emu)
        end[i] = e_emu if np.isnan(end[i]) else max(end[i], e_emu)
        submit[i] = emu(submit_wall.get(jid, math.nan))
        final_batch[i] = int(ann.get("iadeep.io/emulated-batch-size") or final_batch[i])
        trials[i] += int(ann.get("iadeep.io/emulated-trials") or 0)
        evictions[i] += int(ann.get("iadeep.io/emulated-evictions") or 0)
        node, gpus = where(p, ann)
        placement[i] = ";".join(x for x in (placement[i], *(f"{node}/{g}" for g in gpus)) if x)
        runs += [(i, f"{node}/{g}", emu(s_wall), e_emu) for g in gpus]
        if "iadeep.io/assume-time" in ann:
            bound = int(ann["iadeep.io/assume-time"]) / 1e9
            arrived = float(ann[SUBMIT_WALL_ANNOTATION]) if SUBMIT_WALL_ANNOTATION in ann else submit_wall.get(jid, math.nan)
            bind_lat.append(bound - arrived if on_wall or SUBMIT_WALL_ANNOTATION in ann else math.nan)
            start_lag.append(s_wall - bound if on_wall else math.nan)
        owner = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
        if owner and owner[0] in done_at and on_wall:
            done_lag.append(done_at[owner[0]][1] - e_wall)
    missing = [str(jobs["job_id"].iloc[i]) for i in range(n) if np.isnan(end[i])]
    if missing:
        raise RuntimeError(f"{len(missing)} job(s) have no completed pod with emulator times, e.g. {missing[:3]}")
    coloc = np.zeros(n, dtype=np.int64)
    partners: list[set[int]] = [set() for _ in range(n)]
    by_gpu: dict[str, list[tuple[int, float, float]]] = {}
    for i, g, s, e in runs:
        by_gpu.setdefault(g, []).append((i, s, e))
    for rows in by_gpu.values():
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                (i, s1, e1), (j, s2, e2) = rows[a], rows[b]
                if i != j and s1 < e2 and s2 < e1:
                    coloc[i] += 1
                    coloc[j] += 1
                    partners[i].add(j)
                    partners[j].add(i)
    ids = jobs["job_id"].astype(str).to_numpy()
    jct = end - submit
    duration = jobs["duration"].to_numpy(dtype=float)
    table = pd.DataFrame({
        "job_id": ids, "submit_s": submit, "start_s": start, "end_s": end, "jct_s": jct, "queueing_s": start - submit,
        "duration_s": duration, "slowdown": jct / duration, "num_gpus": jobs["num_gpus"].to_numpy(),
        "model": jobs["model"].to_numpy(), "batch_size": jobs["batch_size"].to_numpy(),
        "final_batch_size": final_batch, "colocations": coloc,
        "tuning_trials": trials, "evictions": evictions,
        "placement": placement, "partners": [";".join(sorted(ids[o] for o in ps)) for ps in partners],
    })
    timeline, busy = _timeline(table, runs)
    breakdown = {}
    for key, values in (("bind_latency", bind_lat), ("start_lag", start_lag), ("completion_lag", done_lag)):
        known = [v for v in values if not math.isnan(v)]
        breakdown[f"{key}_s_median"] = float(np.median(known)) if known else math.nan
        breakdown[f"{key}_s_p90"] = float(np.percentile(known, 90)) if known else math.nan
    return SimResult(policy, table, timeline, cluster.total_gpus, busy), breakdown


def _timeline(table: pd.DataFrame, runs: list[tuple[int, str, float, float]]) -> tuple[pd.DataFrame, float]:
    """``t_s, queue_len, busy_gpus, running_jobs`` at every submit/start/end, and busy GPU-seconds."""
    events: list[tuple[float, int, int, int]] = []  # (t, d_queue, d_running, 0)
    for s, st, e in zip(table["submit_s"], table["start_s"], table["end_s"]):
        events += [(s, 1, 0, 0), (st, -1, 1, 0), (e, 0, -1, 0)]
    gpu_events: list[tuple[float, str, int]] = []
    for _, g, s, e in runs:
        gpu_events += [(s, g, 1), (e, g, -1)]
    gpu_events.sort()
    times = sorted({t for t, *_ in events})
    events.sort()
    rows, q, r, k, gi = [], 0, 0, 0, 0
    occupied: dict[str, int] = {}
    busy_s, last_t = 0.0, times[0] if times else 0.0
    for t in times:
        busy_s += sum(1 for v in occupied.values() if v > 0) * (t - last_t)
        last_t = t
        while k < len(events) and events[k][0] <= t:
            q += events[k][1]
            r += events[k][2]
            k += 1
        while gi < len(gpu_events) and gpu_events[gi][0] <= t:
            _, g, d = gpu_events[gi]
            occupied[g] = occupied.get(g, 0) + d
            gi += 1
        rows.append((t, q, sum(1 for v in occupied.values() if v > 0), r))
    return pd.DataFrame(rows, columns=["t_s", "queue_len", "busy_gpus", "running_jobs"]), busy_s
