"""Experiment summary: ``summary.json`` (schema below), per-job CSVs, a markdown report.

``summary.json``::

    {"trace": {"name", "sha256", "jobs", "dropped": {REASON: n}, "flagged": {REASON: n},
               "zero_duration": "kept" | "dropped", ...},
     "cluster": {"nodes", "gpus_per_node", "gpu_mem_gib", ...},
     "seed", "git_commit",
     "policies": {NAME: {"avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s",
                         "makespan_s", "gpu_utilisation", "mean_slowdown",
                         "jct_jobs", "censored_jobs", "unschedulable_jobs"}},
     "null_reasons": {"policies.NAME.avg_jct_s": "why it is null", ...}}   # only when some are

The reasons in ``dropped`` / ``flagged`` are those of :data:`iadeep.traces.REASONS`;
``zero_duration`` says what was done with the trace's jobs of 0 s (kept: they complete at once and
count in the JCT statistics; dropped: ``drop_zero_duration``). The file is
strict JSON (:mod:`iadeep.report._json`): an undefined value is ``null`` with its reason.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iadeep.report._json import write_json

__all__ = ["git_commit", "write_summary_json", "markdown_table", "markdown_report", "write_markdown", "COUNT_KEYS"]

SUMMARY_KEYS = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s", "makespan_s", "gpu_utilisation", "mean_slowdown")
#: Job counts per policy in ``summary.json`` (integers).
COUNT_KEYS = ("jct_jobs", "censored_jobs", "unschedulable_jobs")


def git_commit(repo: Path | None = None) -> str | None:
    """The current commit of the source checkout, or ``None`` outside a git work tree."""
    repo = repo or Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def write_summary_json(path: Path, trace: Mapping[str, Any], cluster: Mapping[str, Any], seed: int,
                       policies: Mapping[str, Mapping[str, float]], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``summary.json`` atomically (strict JSON) and return its content as written.

    A policy's JCT metrics are ``null`` when no job counts towards them (every job censored or
    unschedulable); ``null_reasons`` says so.
    """
    reasons: dict[str, str] = {}
    pol: dict[str, dict[str, Any]] = {}
    for name, v in policies.items():
        pol[name] = {k: float(v[k]) for k in SUMMARY_KEYS}
        pol[name].update({k: int(v[k]) for k in COUNT_KEYS if k in v})
        if not v.get("jct_jobs", 1):
            for k in SUMMARY_KEYS:
                if k not in ("makespan_s", "gpu_utilisation"):
                    reasons[f"policies.{name}.{k}"] = "no job counts towards JCT (all censored or unschedulable)"
    doc: dict[str, Any] = {
        "trace": dict(trace),
        "cluster": dict(cluster),
        "seed": seed,
        "git_commit": git_commit(),
        "policies": pol,
    }
    if extra:
        doc.update(extra)
    return write_json(path, doc, reasons)


def _fmt_h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def markdown_table(policies: Mapping[str, Mapping[str, float]], reference: str = "iadeep") -> str:
    """Markdown table of the summary metrics (hours), with avg JCT relative to ``reference``."""
    ref = policies.get(reference)
    rows = ["| policy | avg JCT (h) | vs iadeep | p50 JCT (h) | p95 JCT (h) | p99 JCT (h) | avg queueing (h) | makespan (h) | GPU util | mean slowdown |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in policies.items():
        rel = f"{s['avg_jct_s'] / ref['avg_jct_s']:.2f}x" if ref and ref["avg_jct_s"] and s["avg_jct_s"] is not None else "-"
        rows.append(f"| {name} | {_fmt_h(s['avg_jct_s'])} | {rel} | {_fmt_h(s['p50_jct_s'])} | {_fmt_h(s['p95_jct_s'])} | "
                    f"{_fmt_h(s['p99_jct_s'])} | {_fmt_h(s['avg_queueing_s'])} | {_fmt_h(s['makespan_s'])} | "
                    f"{_fmt(s['gpu_utilisation'])} | {_fmt(s['mean_slowdown'])} |")
    return "\n".join(rows)


_ZERO_DURATION = {"kept": "kept (they complete at once; counted in the completed jobs and the JCT statistics)",
                  "dropped": "dropped before the run (`drop_zero_duration`)"}


def write_markdown(path: Path, summary: Mapping[str, Any], plots: Mapping[str, str]) -> Path:
    """Write ``report.md`` (:func:`markdown_report`) to ``path``; returns ``path``."""
    Path(path).write_text(markdown_report(summary, plots))
    return Path(path)


def markdown_report(summary: Mapping[str, Any], plots: Mapping[str, str]) -> str:
    """The text of ``report.md``: set-up, the metrics table, and links to the plots.

    Args:
        summary: the ``summary.json`` content (:func:`write_summary_json`).
        plots: title -> file name of each plot, beside the report.
    """
    t, c = summary["trace"], summary["cluster"]
    nulls = summary.get("null_reasons") or {}

    def counts(d: Mapping[str, int] | None) -> str:
        return ", ".join(f"`{k}` {v}" for k, v in (d or {}).items()) or "none"

    why = (t.get("null_reasons") or {}).get("offered_load_mean") or nulls.get("trace.offered_load_mean")
    load_note = f" ({why})" if t.get("offered_load_mean") is None and why else ""
    cluster_line = c.get("description") or f"{c.get('nodes')} nodes x {c.get('gpus_per_node')} GPUs x {c.get('gpu_mem_gib')} GiB"
    censored = summary.get("config", {}).get("include_censored", False)
    lines = [
        f"# iadeep experiment: {t.get('name')}",
        "",
        f"- trace: `{t.get('name')}` ({t.get('jobs')} jobs, sha256 `{str(t.get('sha256'))[:16]}...`)",
        f"- jobs left out: {counts(t.get('dropped'))}; malformed rows skipped: {t.get('skipped_rows', 0)}",
        f"- jobs kept but flagged: {counts(t.get('flagged'))}"
        + (f" (censored jobs are {'included in' if censored else 'excluded from'} the JCT statistics)"
           if (t.get("flagged") or {}).get("censored") else ""),
        *([f"- jobs that can never run on the cluster, kept: {counts(t['infeasible_kept'])} (every policy reports them "
             "unschedulable; they are not in the JCT statistics)"] if t.get("infeasible_kept") else []),
        *([f"- jobs of 0 s: {_ZERO_DURATION.get(t['zero_duration'], t['zero_duration'])}"] if "zero_duration" in t else []),
        f"- offered load: mean {_fmt(t.get('offered_load_mean'))}, peak {_fmt(t.get('offered_load_peak'))}{load_note}",
        f"- cluster: {cluster_line}",
        f"- seed: {summary.get('seed')}, commit: `{summary.get('git_commit')}`",
        "",
        markdown_table(summary["policies"]),
        "",
    ]
    lines += [f"![{name}]({file})" for name, file in plots.items()]
    return "\n".join(lines) + "\n"
