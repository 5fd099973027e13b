"""The interference model on the real Gavel measurements."""

import json

import numpy as np
import pytest

from iadeep.interference import (
    InterferenceSample,
    OnlineInterferenceLearner,
    agreement_with_measurements,
    evaluate_holdout,
)
from iadeep.jobtypes import JobType


def test_gavel_v100_facts(model):
    """26 single-GPU job types, 40 ordered pairs that do not fit, mean pair sum about 1.31 (WORKLOAD-NOTES)."""
    assert len(model.types) == 26
    assert int((~model.fits).sum()) == 40
    sums = (model.norm + model.norm.T)[model.fits]
    assert sums.mean() == pytest.approx(1.31, abs=0.01)
    assert 0.3 < sums.min() < 0.4 and sums.max() == pytest.approx(2.0, abs=0.01)


def test_normalised_rules(model):
    r50 = model.type_id(JobType("ResNet-50", 64))
    lm = model.type_id(JobType("LM", 20))
    assert model.normalised([r50]).tolist() == [1.0]
    pair = model.normalised([r50, lm])
    assert pair[0] == pytest.approx(model.norm[r50, lm]) and pair[1] == pytest.approx(model.norm[lm, r50])
    triple = model.normalised([r50, lm, lm])
    assert triple[0] == pytest.approx(model.norm[r50, lm] ** 2)  # multiplicative rule
    big = model.type_id(JobType("ResNet-50", 128))
    assert not model.set_fits([big, big])
    assert model.normalised([big, big]).tolist() == [0.0, 0.0]


def test_memory_estimate_agrees_with_measured_oom(model):
    """The memory model reproduces most of Gavel's measured fits/out-of-memory pairs on a 16 GiB V100."""
    co = model.norm * model.isolated_steps_per_s[:, None]
    assert agreement_with_measurements(model.types, co, 16.0) > 0.9


def test_learner_beats_constant_on_held_out_pairs(model):
    report = evaluate_holdout(model.types, model.norm, model.fits, train_fraction=0.5, seed=1)
    assert report.n_test_pairs > 100
    assert report.mae < 0.75 * report.baseline_mae


def test_learner_converges_on_observed_pair(model):
    learner = OnlineInterferenceLearner(model.types)
    a, b = JobType("ResNet-18", 32), JobType("Transformer", 64)
    before = abs(learner.predict(a, b) - 0.95)
    learner.observe_many([InterferenceSample(a, b, 0.95)] * 10)
    assert abs(learner.predict(a, b) - 0.95) < min(before, 0.05)
    assert np.all((learner.matrix() >= 0) & (learner.matrix() <= 1))


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -0.2])
def test_the_learner_refuses_a_value_that_would_poison_its_fit(model, bad):
    """An infinite or NaN sample would turn the fit's sums, and so every pair's prediction, into
    NaN: a value that is negative, NaN or infinite is refused and nothing is learned. (A stored
    sample beyond ``iadeep.state.MAX_NORMALISED_THROUGHPUT`` is malformed and never read.)"""
    learner = OnlineInterferenceLearner(model.types)
    learner.observe_many([InterferenceSample(JobType("ResNet-18", 32), JobType("Transformer", 64), 0.9)] * 3)
    before = learner.matrix().copy()
    with pytest.raises(ValueError, match="finite and >= 0"):
        learner.observe_ids(0, 1, bad)
    assert learner.n_samples == 3
    assert np.array_equal(learner.matrix(), before) and np.isfinite(before).all()


def test_interference_report_cli(dataset_cache, monkeypatch):
    from typer.testing import CliRunner

    from iadeep.cli import app

    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    res = CliRunner().invoke(app, ["interference", "report", "--seeds", "1"])
    assert res.exit_code == 0, res.output
    assert "40 ordered pairs do not fit" in res.output and "98.2%" in res.output
    bad = CliRunner().invoke(app, ["interference", "report", "--gpu-type", "h100"])
    assert bad.exit_code == 2 and "unknown GPU type 'h100'" in bad.output


_BAD_KEY = '("ResNet-50 (batch size 16)", 1)'


@pytest.mark.parametrize(("text", "match"), [
    ("a,b\n1,2\n", r"not JSON: Expecting value: line 1 column 1"),
    ('{"v100": {}}', r"the 'v100' table is empty"),
    ('{"p100": {}}', r"unknown GPU type 'v100'; the file has p100"),
    ('{"v100": {%s: {"null": 1}}}' % json.dumps(_BAD_KEY), r"v100: not a Gavel job-type key"),
    ('{"v100": {"(\'A3C\', 1)": {}}}', r"v100 \('A3C', 1\): expected a mapping with a \"null\""),
    ('{"v100": {"(\'A3C\', 1)": {"null": "fast"}}}', r"v100 \('A3C', 1\) \"null\": isolated throughput must be a finite number > 0 \(steps/s\), got 'fast'"),
    ('{"v100": {"(\'A3C\', 1)": {"null": Infinity}}}', r"v100 \('A3C', 1\) \"null\": isolated throughput must be a finite number > 0 \(steps/s\), got inf"),
    ('{"v100": {"(\'A3C\', 1)": {"null": NaN}}}', r"v100 \('A3C', 1\) \"null\": isolated throughput must be a finite number > 0 \(steps/s\), got nan"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 0}}}', r"isolated throughput must be a finite number > 0 \(steps/s\), got 0"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": 3}}}', r"expected \[own, other\] steps/s, got 3"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [1.0]}}}',
     r"v100 \('A3C', 1\) \('A3C', 1\): co-located measurement: expected \[own, other\] steps/s, got \[1.0\]"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [1.0, 1.0, 1.0]}}}', r"expected \[own, other\] steps/s, got \[1.0, 1.0, 1.0\]"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [-1.0, 0.5]}}}',
     r"v100 \('A3C', 1\) \('A3C', 1\): co-located measurement: each steps/s must be a finite number >= 0, got \[-1.0, 0.5\]"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [0.5, NaN]}}}', r"each steps/s must be a finite number >= 0, got \[0.5, nan\]"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [Infinity, 0.5]}}}', r"each steps/s must be a finite number >= 0, got \[inf, 0.5\]"),
])
def test_bad_throughputs_file_raises_value_error_naming_the_file(tmp_path, text, match):
    from iadeep.interference import InterferenceModel

    p = tmp_path / "trace.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=match) as ei:
        InterferenceModel.from_file(p, "v100")
    assert str(ei.value).startswith(f"{p}: ")
    with pytest.raises(ValueError, match=r"is a folder"):
        InterferenceModel.from_file(tmp_path, "v100")


@pytest.mark.parametrize(("text", "match"), [
    ("a,b\n1,2\n", "trace.csv: not JSON: Expecting value: line 1 column 1"),
    ('{"v100": {}}', "trace.csv: the 'v100' table is empty"),
    ('{"v100": {%s: {"null": 1}}}' % json.dumps(_BAD_KEY), "trace.csv: v100: not a Gavel job-type key"),
    ('{"v100": {"(\'A3C\', 1)": {"null": Infinity}}}', "trace.csv: v100 ('A3C', 1) \"null\": isolated throughput must be a finite number > 0"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [-1.0, 0.5]}}}',
     "trace.csv: v100 ('A3C', 1) ('A3C', 1): co-located measurement: each steps/s must be a finite number >= 0"),
    ('{"v100": {"(\'A3C\', 1)": {"null": 1, "(\'A3C\', 1)": [1.0]}}}',
     "trace.csv: v100 ('A3C', 1) ('A3C', 1): co-located measurement: expected [own, other] steps/s, got [1.0]"),
])
def test_experiment_run_names_a_bad_throughputs_file(tmp_path, dataset_cache, monkeypatch, capsys, text, match):
    """A bad ``--throughputs`` file: one line on stderr naming it, exit code 2, no traceback."""
    from iadeep.cli import main

    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text(text)
    assert main(["experiment", "run", "--throughputs", "trace.csv", "--jobs", "10", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]  # a first run may print the datasets' download progress before
    assert last.startswith("iadeep experiment run: error: ") and err.count(": error: ") == 1, err
    assert match in last and "Traceback" not in err + out
