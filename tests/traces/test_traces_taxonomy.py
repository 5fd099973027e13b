"""The skip/flag taxonomy is one list: loaders report only its names, the docs page on traces documents them all."""

from __future__ import annotations

from pathlib import Path

from iadeep.traces import QUIRKS, REASONS, load_trace, reason_table

TRACES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "traces.md"


def test_every_reason_is_documented_in_the_traces_page() -> None:
    text = TRACES_PAGE.read_text()
    missing = [name for name in REASONS if f"`{name}`" not in text]
    assert not missing, f"docs/traces.md lacks {missing}"
    table = reason_table()
    assert all(f"`{name}`" in table for name in REASONS)
    assert QUIRKS == {n for n, r in REASONS.items() if r.quirk} and "zero_gpu" not in QUIRKS and "censored" in QUIRKS
    assert {r.action for r in REASONS.values()} == {"drop", "flag"}


def test_loaders_report_only_taxonomy_names(philly_json: Path, tmp_path: Path) -> None:
    df = load_trace("philly-json", philly_json, max_gpus=4, cluster_gpus=8, n_jobs=3)
    names = set(df.attrs["dropped"]) | set(df.attrs["flagged"])
    assert names and names <= set(REASONS), names - set(REASONS)
    flagged = {n for n, r in REASONS.items() if r.action == "flag"}
    assert set(df.attrs["flagged"]) <= flagged and not set(df.attrs["dropped"]) & flagged
