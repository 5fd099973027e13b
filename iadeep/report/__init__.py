"""Experiment reports: summary.json, markdown, plots.

The plot functions load matplotlib on first use (``iadeep.report.plot_jct_cdf`` and the others are
resolved lazily), so writing ``summary.json`` or ``report.md`` costs no plotting library.
"""

from typing import Any

from iadeep.report._json import dumps_strict, strict_doc, write_json
from iadeep.report._summary import COUNT_KEYS, SUMMARY_KEYS, git_commit, markdown_table, write_markdown, write_summary_json

_PLOTS = {"plot_jct_cdf": "iadeep.report._plots", "plot_normalised_bars": "iadeep.report._plots",
          "plot_queue_length": "iadeep.report._plots", "plot_service_series": "iadeep.report._series"}

__all__ = ["COUNT_KEYS", "SUMMARY_KEYS", "dumps_strict", "strict_doc", "write_json", "git_commit", "markdown_table", "plot_jct_cdf", "plot_normalised_bars", "plot_queue_length",
           "plot_service_series", "write_markdown", "write_summary_json"]


def __getattr__(name: str) -> Any:
    if name in _PLOTS:
        import importlib

        return getattr(importlib.import_module(_PLOTS[name]), name)
    raise AttributeError(f"module 'iadeep.report' has no attribute {name!r}")
