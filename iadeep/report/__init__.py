"""Experiment reports: summary.json, markdown, plots."""

from iadeep.report._plots import plot_jct_cdf, plot_normalised_bars, plot_queue_length
from iadeep.report._json import dumps_strict, strict_doc, write_json
from iadeep.report._series import plot_service_series
from iadeep.report._summary import COUNT_KEYS, SUMMARY_KEYS, git_commit, markdown_report, markdown_table, write_markdown, write_summary_json

__all__ = ["COUNT_KEYS", "SUMMARY_KEYS", "dumps_strict", "strict_doc", "write_json", "git_commit", "markdown_report", "markdown_table", "plot_jct_cdf", "plot_normalised_bars", "plot_queue_length",
           "plot_service_series", "write_markdown", "write_summary_json"]
