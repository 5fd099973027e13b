"""Experiment summary: ``summary.json`` (schema below), per-job CSVs, a markdown report.

``summary.json``::

    {"trace": {"name", "sha256", "jobs", ...}, "cluster": {"nodes", "gpus_per_node", "gpu_mem_gib"},
     "seed", "git_commit",
     "policies": {NAME: {"avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s",
                         "makespan_s", "gpu_utilisation", "mean_slowdown"}}}
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "write_summary_json", "markdown_table", "write_markdown"]

SUMMARY_KEYS = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s", "makespan_s", "gpu_utilisation", "mean_slowdown")


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
    """Write ``summary.json`` atomically and return its content."""
    doc: dict[str, Any] = {
        "trace": dict(trace),
        "cluster": dict(cluster),
        "seed": seed,
        "git_commit": git_commit(),
        "policies": {name: {k: float(v[k]) for k in SUMMARY_KEYS} for name, v in policies.items()},
    }
    if extra:
        doc.update(extra)
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return doc


def _fmt_h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def markdown_table(policies: Mapping[str, Mapping[str, float]], reference: str = "iadeep") -> str:
    """Markdown table of the summary metrics (hours), with avg JCT relative to ``reference``."""
    ref = policies.get(reference)
    rows = ["| policy | avg JCT (h) | vs iadeep | p50 JCT (h) | p95 JCT (h) | p99 JCT (h) | avg queueing (h) | makespan (h) | GPU util | mean slowdown |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in policies.items():
        rel = f"{s['avg_jct_s'] / ref['avg_jct_s']:.2f}x" if ref and ref["avg_jct_s"] else "-"
        rows.append(f"| {name} | {_fmt_h(s['avg_jct_s'])} | {rel} | {_fmt_h(s['p50_jct_s'])} | {_fmt_h(s['p95_jct_s'])} | "
                    f"{_fmt_h(s['p99_jct_s'])} | {_fmt_h(s['avg_queueing_s'])} | {_fmt_h(s['makespan_s'])} | "
                    f"{s['gpu_utilisation']:.2f} | {s['mean_slowdown']:.2f} |")
    return "\n".join(rows)


def write_markdown(path: Path, summary: Mapping[str, Any], plots: Mapping[str, str]) -> Path:
    """Write ``report.md``: set-up, the metrics table, and links to the plots."""
    t, c = summary["trace"], summary["cluster"]
    lines = [
        f"# iadeep experiment: {t.get('name')}",
        "",
        f"- trace: `{t.get('name')}` ({t.get('jobs')} jobs, sha256 `{str(t.get('sha256'))[:16]}...`)",
        f"- offered load: mean {t.get('offered_load_mean', float('nan')):.2f}, peak {t.get('offered_load_peak', float('nan')):.2f}",
        f"- cluster: {c.get('nodes')} nodes x {c.get('gpus_per_node')} GPUs x {c.get('gpu_mem_gib')} GiB",
        f"- seed: {summary.get('seed')}, commit: `{summary.get('git_commit')}`",
        "",
        markdown_table(summary["policies"]),
        "",
    ]
    lines += [f"![{name}]({file})" for name, file in plots.items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)
