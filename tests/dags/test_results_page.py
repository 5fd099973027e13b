"""The results page the Airflow UI plugin shows (iadeep.orchestration._results_page), from the files
of a real small experiment and a real small sweep: the table holds the summary's figures, every plot
is embedded byte for byte, the guard figures are the sweep's, and bad folders give errors that name
the file. The plugin's routes, login and tab run in the Chromium test (tests/ui/test_airflow_ui.py).
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
from pathlib import Path

import pytest

from iadeep.experiment import ExperimentConfig, run_experiment
from iadeep.orchestration._results_page import render_index, render_results, result_kind


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, dataset_cache) -> Path:
    import os

    os.environ.setdefault("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path_factory.mktemp("results") / "experiment"
    run_experiment(ExperimentConfig(jobs=30, seed=3, out=str(out)), progress=False)
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, dataset_cache) -> Path:
    from iadeep.experiment._sweep import run_setting, write_sweep_files
    from iadeep.experiment import fetch_inputs

    out = tmp_path_factory.mktemp("results") / "sweep"
    base = ExperimentConfig(jobs=30, out=str(out), policies=("iadeep", "exclusive", "antman", "gandiva"))
    paths = fetch_inputs(base, progress=False)
    rows = [r for start in (0, 100) for r in run_setting(base, paths, start, 1.0, 0)]
    write_sweep_files(rows, out)
    return out


def _embedded(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
            + re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)]


def test_experiment_page_shows_the_summary_table_and_every_plot(experiment: Path) -> None:
    page = render_results(experiment, {"DAG": "iadeep_experiment", "run": "manual__<b>"})
    summary = json.loads((experiment / "summary.json").read_text())
    for policy, m in summary["policies"].items():
        row = re.search(rf"<tr>\s*<td>{policy}</td>(.*?)</tr>", page, re.S)
        assert row, f"no table row for {policy}"
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
        assert cells[0] == f"{m['avg_jct_s'] / 3600:.2f}" and cells[6] == f"{m['makespan_s'] / 3600:.2f}", cells
    plots = [experiment / n for n in ("jct_cdf.png", "normalised.png", "queue_length.png")]
    assert sorted(_embedded(page)) == sorted(p.read_bytes() for p in plots)
    assert "manual__&lt;b&gt;" in page and "manual__<b>" not in page  # the run id is escaped


def test_sweep_page_shows_the_guard_figures_and_the_plot(sweep: Path) -> None:
    assert result_kind(sweep) == "sweep"
    page = render_results(sweep)
    guard = json.loads((sweep / "guard.json").read_text())
    assert f"<td>{guard['worst_vs_packing']:.3f}</td>" in page and f"<td>{guard['median_vs_packing']:.3f}</td>" in page
    assert f"worst {guard['worst_vs_packing']:.2f} ({guard['worst_setting']})" in page  # the CLI's guard line
    assert "guard (the sweep's queue, 2 settings)" in html.unescape(page)  # the DAG's sweep.csv has no queue column
    assert _embedded(page) == [(sweep / "sweep.png").read_bytes()]


def test_folders_without_results_or_with_broken_files_say_which_file(tmp_path: Path, experiment: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no summary.json .* or guard.json"):
        render_results(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(experiment, broken)
    (broken / "summary.json").write_text('{"policies": ')
    with pytest.raises(ValueError, match=r"broken/summary.json: not valid JSON \(line 1"):
        render_results(broken)
    (broken / "jct_cdf.png").unlink()  # a plot that is gone is left out, the rest still shows
    (broken / "summary.json").write_text((experiment / "summary.json").read_text())
    assert len(_embedded(render_results(broken))) == 2


def test_index_links_each_run_and_escapes_names() -> None:
    page = render_index([{"dag_id": "iadeep_sweep", "run_id": "r<1>", "state": "success", "start_date": None,
                          "href": "runs/iadeep_sweep/r%3C1%3E"}])
    assert "href='runs/iadeep_sweep/r%3C1%3E'" in page and "r&lt;1&gt;" in page
    assert "No runs" in render_index([])
