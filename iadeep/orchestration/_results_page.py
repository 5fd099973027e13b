"""The results page of one ``iadeep_experiment`` or ``iadeep_sweep`` run, as HTML (the Airflow UI plugin).

:func:`render_results` turns a run's output folder into one self-contained HTML page:

- an experiment (``summary.json``): the set-up and the metrics table of ``report.md`` (the same
  :func:`iadeep.report.markdown_report` text, rendered), then the plots the report names (JCT CDF,
  normalised metrics, queue length and, for a live run with Prometheus, the services' series);
- a sweep (``guard.json``, ``sweep.csv``): the guard figures (iadeep's avg JCT over the better
  packing baseline, worst and median, against exclusive, headroom captured; with their goals), the
  lines ``iadeep experiment sweep`` prints, and ``sweep.png``.

Images are embedded as ``data:`` URIs, so the page shows them inside the Airflow UI's sandboxed
frame without further authenticated requests. The folder is only read; nothing from it is run.
Module without Airflow imports (the plugin, :mod:`iadeep.orchestration.plugin`, serves it).
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

__all__ = ["RUN_VIEW_ROUTE", "RESULT_FILES", "render_results", "render_missing", "render_index", "result_kind"]

#: The url_route of the DAG run page's tab of the plugin: the UI shows it at ``/dags/<dag>/runs/<run>/plugin/<route>``.
RUN_VIEW_ROUTE = "iadeep-results"

#: The files of an output folder the plugin serves (and the page may embed), by kind.
RESULT_FILES = {
    "experiment": ("summary.json", "report.md", "jct_cdf.png", "normalised.png", "queue_length.png", "services.png"),
    "sweep": ("guard.json", "sweep.csv", "sweep.png"),
}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1a202c; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.92rem; }
th, td { border: 1px solid #cbd5e0; padding: 0.3rem 0.6rem; }
th { background: #edf2f7; } td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #e2e8f0; margin: 0.5rem 0; }
.muted { color: #718096; font-size: 0.85rem; } code { background: #f7fafc; padding: 0 0.2rem; }
"""


def result_kind(out: Path) -> str | None:
    """``"sweep"`` (``guard.json``), ``"experiment"`` (``summary.json``) or ``None`` (neither yet)."""
    if (out / "guard.json").is_file():
        return "sweep"
    if (out / "summary.json").is_file():
        return "experiment"
    return None


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _markdown(text: str, out: Path) -> str:
    """Markdown (CommonMark with tables) to HTML; images naming a PNG of ``out`` are embedded."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    default_image = md.renderer.rules["image"]

    def image(_renderer, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        token = tokens[idx]
        src = str(token.attrGet("src") or "")
        name = Path(src).name
        if src == name and name.endswith(".png") and (out / name).is_file():
            token.attrSet("src", _data_uri(out / name))
            token.attrSet("title", name)
        return default_image(tokens, idx, options, env)

    md.add_render_rule("image", image)
    return md.render(text)


def _experiment_body(out: Path) -> str:
    from iadeep.report import markdown_report

    summary = json.loads((out / "summary.json").read_text())
    plots = {title: name for title, name in (("JCT CDF", "jct_cdf.png"), ("normalised to iadeep", "normalised.png"),
                                             ("queue length", "queue_length.png"),
                                             ("services' metrics", "services.png"))
             if (out / name).is_file()}
    return _markdown(markdown_report(summary, plots), out)


def _figure(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape(str(value))


def _sweep_body(out: Path) -> str:
    from iadeep.experiment import GUARD_GOALS, guard_lines

    guard = json.loads((out / "guard.json").read_text())
    policies: list[str] = []
    queues: set[str] = set()
    if (out / "sweep.csv").is_file():
        import csv

        with (out / "sweep.csv").open(newline="") as f:
            rows_csv = list(csv.DictReader(f))
        policies = sorted({row["policy"] for row in rows_csv if row.get("policy")})
        queues = {row["queue"] for row in rows_csv if row.get("queue")}
    rows = "".join(
        f"<tr><td><code>{html.escape(k)}</code></td><td>{_figure(v)}</td>"
        f"<td>{html.escape(('<= ' if k != 'median_headroom_captured' else '>= ') + str(GUARD_GOALS[k])) if k in GUARD_GOALS else ''}</td></tr>"
        for k, v in guard.items() if k != "null_reasons")
    lines = guard_lines(guard, "/".join(sorted(queues)) or "the sweep's", policies) if "worst_vs_packing" in guard else []
    body = [f"<h1>iadeep sweep: {guard.get('settings', '?')} settings</h1>",
            "<h2>Guard figures</h2>",
            "<table><thead><tr><th>figure</th><th>value</th><th>goal</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"]
    if lines:
        body.append("<pre>" + html.escape("\n".join(lines)) + "</pre>")
    if (out / "sweep.png").is_file():
        body.append(f"<h2>Settings</h2><img alt='sweep' title='sweep.png' src='{_data_uri(out / 'sweep.png')}'>")
    return "".join(body)


def render_results(out: str | Path, run: dict[str, Any] | None = None) -> str:
    """The results page of the output folder ``out``.

    Args:
        out: an ``iadeep_experiment`` or ``iadeep_sweep`` output folder.
        run: shown in the page's footer: ``dag_id``, ``run_id`` (and anything else, as given).

    Returns:
        The HTML document (str).

    Raises:
        FileNotFoundError: ``out`` holds neither ``summary.json`` nor ``guard.json``.
        ValueError: ``summary.json`` or ``guard.json`` is not valid JSON (the message names the file).
    """
    out = Path(out)
    kind = result_kind(out)
    if kind is None:
        raise FileNotFoundError(f"{out}: no summary.json (experiment) or guard.json (sweep): no results yet")
    try:
        body = _sweep_body(out) if kind == "sweep" else _experiment_body(out)
    except json.JSONDecodeError as exc:
        name = "guard.json" if kind == "sweep" else "summary.json"
        raise ValueError(f"{out / name}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    footer = f"<p class='muted'>output folder <code>{html.escape(str(out))}</code>"
    if run:
        footer += "; " + ", ".join(f"{html.escape(k)} <code>{html.escape(str(v))}</code>" for k, v in run.items())
    return _page(f"iadeep results: {out.name}", body + footer + "</p>")


def render_missing(why: str) -> str:
    """A page saying why a run has no results to show (not an iadeep run, not finished, folder reused)."""
    return _page("iadeep results", f"<h1>No iadeep results</h1><p>{html.escape(why)}</p>")


def render_index(runs: list[dict[str, Any]]) -> str:
    """The list of recent runs: dicts with ``dag_id``, ``run_id``, ``state``, ``start_date``, ``href``."""
    rows = "".join(
        f"<tr><td>{html.escape(str(r['dag_id']))}</td><td><a href='{html.escape(str(r['href']))}'>"
        f"{html.escape(str(r['run_id']))}</a></td><td>{html.escape(str(r.get('state')))}</td>"
        f"<td>{html.escape(str(r.get('start_date') or ''))}</td></tr>" for r in runs)
    table = ("<table><thead><tr><th>DAG</th><th>run</th><th>state</th><th>started</th></tr></thead>"
             f"<tbody>{rows}</tbody></table>") if runs else "<p>No runs of iadeep_experiment or iadeep_sweep yet.</p>"
    return _page("iadeep results", f"<h1>iadeep results</h1>{table}")
