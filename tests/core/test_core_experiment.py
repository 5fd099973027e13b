"""The main job end to end (small): summary.json schema, files, plots, CLI output and errors."""

import json
from pathlib import Path

import pytest

from typer.testing import CliRunner

from iadeep._climain import run_cli
from iadeep.cli import app
from iadeep.experiment import ExperimentConfig, run_experiment

KEYS = {"avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queueing_s", "makespan_s", "gpu_utilisation", "mean_slowdown",
        "jct_jobs", "censored_jobs", "unschedulable_jobs"}


def test_run_experiment_writes_summary_and_plots(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    cfg = ExperimentConfig(jobs=80, out=str(tmp_path / "run"))
    summary = run_experiment(cfg, progress=False)
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc == json.loads(json.dumps(summary))
    assert doc["trace"]["name"] == "philly" and doc["trace"]["jobs"] == 80
    assert doc["trace"]["sha256"] == "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"
    assert doc["cluster"]["nodes"] == 5 and doc["seed"] == 0
    assert set(doc["policies"]) == {"iadeep", "exclusive", "antman", "gandiva"}
    for metrics in doc["policies"].values():
        assert set(metrics) == KEYS
        assert metrics["p50_jct_s"] <= metrics["p95_jct_s"] <= metrics["p99_jct_s"]
    for name in ("jct_cdf.png", "normalised.png", "queue_length.png", "report.md", "jobs-iadeep.csv"):
        assert (tmp_path / "run" / name).stat().st_size > 0
    assert (tmp_path / "run" / "jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_prints_summary_and_rejects_bad_input(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "run", "--jobs", "40", "--policies", "iadeep,exclusive", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "offered load mean" in res.output and "iadeep" in res.output and "exclusive" in res.output
    bad = runner.invoke(app, ["experiment", "run", "--trace", "nope", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown trace 'nope'" in bad.output
    bad = runner.invoke(app, ["experiment", "run", "--jobs", "20", "--policies", "iadeep,nope", "--out", str(tmp_path / "y")])
    assert bad.exit_code == 2 and "unknown policy 'nope'" in bad.output


def test_sweep_compares_every_setting(tmp_path, dataset_cache, monkeypatch):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    res = CliRunner().invoke(app, ["experiment", "sweep", "--start-jobs", "40000,60000", "--loads", "1", "--seeds", "0,1",
                                   "--jobs", "40", "--policies", "iadeep,exclusive", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(tmp_path / "sweep.csv")
    assert len(df) == 2 * 2 * 2 and set(df["policy"]) == {"iadeep", "exclusive"}
    assert (df[df.policy == "iadeep"]["avg_jct_vs_iadeep"] == 1.0).all()
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_guard_figures_name_the_worst_setting():
    """The guard divides iadeep's avg JCT by the better packing baseline's, per setting."""
    import pandas as pd

    from iadeep.experiment._sweep import guard_figures

    rows = []
    floors = {"s1": 1.0, "s2": 2.4, "s3": 1.0}  # mean dedicated run time per setting
    for setting, (i, a, g, e) in {"s1": (2.0, 4.0, 2.5, 6.0), "s2": (3.0, 2.0, 2.4, 4.0), "s3": (1.0, 1.25, 1.5, 2.5)}.items():
        rows += [{"setting": setting, "policy": p, "avg_jct_s": v, "avg_dedicated_s": floors[setting]} for p, v in
                 (("iadeep", i), ("antman", a), ("gandiva", g), ("exclusive", e))]
    guard = guard_figures(pd.DataFrame(rows))
    assert guard["worst_vs_packing"] == 1.5 and guard["worst_setting"] == "s2"  # 3.0 / min(2.0, 2.4)
    assert guard["median_vs_packing"] == 0.8  # ratios 0.8, 1.5, 0.8
    assert guard["above_packing"] == "s2 1.50"  # the only one above 1.05
    assert guard["worst_vs_exclusive"] == 0.75 and guard["above_exclusive"] == ""
    assert guard["met"] == "no"  # worst 1.5 > 1.02 decides it, though no ceiling ran (headroom not measured)
    within = guard_figures(pd.DataFrame([r for r in rows if r["setting"] != "s2"]))
    assert within["worst_vs_packing"] == 0.8 and within["met"] is None  # the rest meet their goals: undecided
    assert guard["floor_vs_exclusive"] == 0.6  # s2: 2.4 / 4.0
    # the ceiling: headroom captured = (1 - iadeep/packing) / (1 - ceiling/packing)
    ceilings = {"s1": 1.5, "s2": 1.0, "s3": 1.0}
    with_ceiling = pd.DataFrame(rows).assign(ceiling_avg_jct_s=lambda d: d["setting"].map(ceilings))
    captured = guard_figures(with_ceiling)
    # s1: (1 - 2/2.5) / (1 - 1.5/2.5) = 0.5; s2: (1 - 1.5) / (1 - 0.5) = -1; s3: (1 - 0.8) / (1 - 0.8) = 1
    assert captured["median_headroom_captured"] == pytest.approx(0.5)
    assert captured["ceiling_median_vs_packing"] == pytest.approx(0.6)  # 0.6, 0.5, 0.8
    assert captured["met"] == "no"  # worst 1.5 > 1.02
    # perfect prediction slower than learned on s3 only
    oracle = [{**r, "policy": "iadeep@oracle", "avg_jct_s": r["avg_jct_s"] * (1.2 if r["setting"] == "s3" else 0.9)}
              for r in rows if r["policy"] == "iadeep"]
    by_oracle = guard_figures(pd.DataFrame(rows + oracle))
    assert by_oracle["oracle_worse"] == "s3 1.20"
    assert by_oracle["oracle_worst_vs_packing"] == pytest.approx(1.35)  # s2: 2.7 / 2.0
    # iadeep's avg JCT undefined on every setting (no job counted): no packing figures, no crash
    undefined = pd.DataFrame(rows).assign(avg_jct_s=lambda d: d["avg_jct_s"].where(d["policy"] != "iadeep"))
    assert guard_figures(undefined)["worst_vs_packing"] is None


def test_the_dedicated_floor_bounds_every_policy_on_a_real_slice(tmp_path):
    """No policy's avg JCT is below the mean dedicated run time (progress is capped at dedicated
    speed), and the floor counts the same jobs as the JCT statistics."""
    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment._steps import build_workload, fetch_inputs
    from iadeep.experiment._sweep import dedicated_floor
    from iadeep.interference import InterferenceModel
    from iadeep.policy import make_policy
    from iadeep.sim import ClusterSpec, SimSettings, simulate

    cfg = ExperimentConfig(jobs=60, target_load=2.0, seed=0, out=str(tmp_path))
    paths = fetch_inputs(cfg, progress=False)
    workload, _ = build_workload(cfg, paths["trace"])
    model = InterferenceModel.from_file(paths["throughputs"])
    for name in ("iadeep", "gandiva", "exclusive"):
        result = simulate(workload, make_policy(name, model), model, ClusterSpec(), SimSettings(seed=0, record_timeline=False))
        floor = dedicated_floor(result.jobs)
        assert result.summary()["avg_jct_s"] >= floor > 0
        assert (result.jobs["jct_s"] >= result.jobs["duration_s"] - 1e-6).all()


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "--trace-file", "{dir}"], "'--trace-file': "),
    (["run", "--trace-file", "{dir}"], ": is a folder; trace 'philly' reads one file (philly.csv)"),
    (["sweep", "--from-draw", "{dir}/none.json"], "none.json: no such file"),
    (["sweep", "--from-draw", "{dir}"], ": is a folder, not a guard.json"),
    (["run", "--scheduler-config", "{dir}/none.yaml"], "'--scheduler-config': cannot read the scheduler configuration"),
    (["run", "--timeout-s", "-5"], "'--timeout-s': must be greater than 0"),
    (["run", "--window-start-s", "100", "--window-end-s", "50"],
     "'--window-end-s': must be after the window's start (100.0 s), got 50.0"),
    (["run", "--backfill", "--queue", "kube"], "'--backfill'"),
    (["run", "--policies", "iadeep,iadeep"], "'--policies': 'iadeep' named more than once"),
    (["sweep", "--seeds", "0,0"], "'--seeds': 0 given more than once"),
    (["sweep", "--loads", "1,1.0"], "'--loads': 1 given more than once"),
    (["sweep", "--loads", "-1"], "'--loads': must be at least 0"),
    (["sweep", "--queue", "fifo,fifo"], "'--queue': fifo given more than once"),
    # an option given empty is refused, never read as its default grid
    (["sweep", "--loads", ""], "'--loads': expected comma-separated floats, got ''"),
    (["sweep", "--seeds", ""], "'--seeds': expected comma-separated ints, got ''"),
    (["sweep", "--start-jobs", ""], "'--start-jobs': expected comma-separated ints, got ''"),
    (["sweep", "--trace", "philly-json"], "'--trace': trace 'philly-json' has no dataset in the registry"),
    (["compare", "--trace", "philly-json"], "'--trace': trace 'philly-json' has no dataset in the registry"),
    (["compare", "--nodes", "0"], "'--nodes': must be at least 1"),
    # values out of range
    (["run", "--seed", "-1"], "'--seed': must be at least 0"),
    (["sweep", "--seeds", "0,-1"], "'--seeds': must be at least 0"),
    (["run", "--arrival-scale", "2"], "'--arrival-scale': target_load (here 1; default 1) sets the arrival scaling itself"),
    (["sweep", "--loads", "1", "--seeds", "0", "--start-jobs", "20000,99999999"],
     "'--start-jobs': the window starting at job 99999999 cannot be built: philly: no job left"),
    # the option named as the user spelled it, before any download
    (["run", "--throughputs", "{dir}/none.json"], "'--throughputs': "),
    (["run", "--cluster", "{dir}"], "is a folder, not a cluster file"),
    (["sweep", "--throughputs", "{dir}"], "'--throughputs': "),
])
def test_bad_options_are_refused_before_any_run_naming_the_option(tmp_path, dataset_cache, monkeypatch, capsys, argv, says):
    """Each bad option is refused with one line naming it (no traceback, nothing on stdout, no
    option the command does not have, nothing silently accepted). Run as the ``iadeep`` console
    script runs the app (:func:`iadeep._climain.run_cli`)."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path / "out"
    code = run_cli(app, ["experiment", *[a.format(dir=tmp_path) for a in argv], "--out", str(out)])
    std = capsys.readouterr()
    assert code == 2, std
    assert not std.out.strip() and "Traceback" not in std.err
    (line,) = std.err.strip().splitlines()  # one line on stderr
    assert line.startswith(f"iadeep experiment {argv[0]}: error: ") and says in line, line
    assert not out.exists()  # refused before any setting ran


def test_a_sweep_window_the_trace_lacks_is_one_line_and_a_sweep_without_iadeep_compares_to_its_first_policy(
        tmp_path, dataset_cache, monkeypatch, capsys):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    few = ["--jobs", "15", "--loads", "1", "--seeds", "0"]
    assert run_cli(app, ["experiment", "sweep", *few, "--start-jobs", "99999999", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "'--start-jobs': the window starting at job 99999999" in err.strip().splitlines()[-1]
    res = CliRunner().invoke(app, ["experiment", "sweep", *few, "--start-jobs", "20000", "--policies", "exclusive,antman",
                                   "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "avg_jct_vs_exclusive" in (tmp_path / "b" / "sweep.csv").read_text().splitlines()[0]
    assert json.loads((tmp_path / "b" / "guard.json").read_text())["worst_vs_packing"] is None  # no iadeep: no guard
    assert (tmp_path / "b" / "sweep.png").stat().st_size > 0


def test_help_shows_the_defaults_written_in_brackets_of_old(monkeypatch):
    """``[default: ...]`` in a help text is shown, not read as rich markup and dropped."""
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: no wrapping inside the phrases
    res = CliRunner().invoke(app, ["experiment", "run", "--help"])
    text = " ".join(res.output.split())
    assert "default: 40000 for the registry's Philly trace" in text
    assert "default: the cluster's size" in text


def test_a_reused_output_folder_holds_only_the_new_run(tmp_path, dataset_cache, monkeypatch, capsys):
    """A second run into the same ``--out`` left the first run's per-policy files of policies it
    did not have (and, when interrupted, the old summary and plots beside the new workload): a
    folder that looked complete but mixed two runs. Files that are not results stay."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path / "out"
    assert run_cli(app, ["experiment", "run", "--jobs", "20", "--policies", "iadeep,antman", "--out", str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    assert run_cli(app, ["experiment", "run", "--jobs", "20", "--policies", "exclusive", "--seed", "3", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert not {n for n in names if "iadeep" in n or "antman" in n}, names
    assert {"jobs-exclusive.csv", "summary.json", "workload.csv", "notes.txt"} <= names
    assert json.loads((out / "summary.json").read_text())["seed"] == 3


def test_results_that_cannot_be_written_are_one_line_not_a_traceback(tmp_path, dataset_cache, monkeypatch, capsys):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)  # a folder where a result file belongs
    code = run_cli(app, ["experiment", "run", "--jobs", "20", "--policies", "exclusive", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"iadeep experiment run: error: cannot write the results in {out}")
    assert run_cli(app, ["experiment", "run", "--jobs", "20", "--out", ""]) == 2
    assert "'--out': an output folder is needed" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "trace", "says"), [
    ("sweep", "ms-itp", "'--virtual-cluster': ms-itp: unknown virtual cluster(s) ['nope']"),
    ("sweep", "philly", "'--virtual-cluster': philly: unknown virtual cluster(s) ['nope']"),
    ("run", "philly", "'--virtual-cluster': philly: unknown virtual cluster(s) ['nope']"),
    ("run", "openb", "'--virtual-cluster': openb: the trace has no virtual clusters"),
])
def test_an_unknown_virtual_cluster_is_blamed_on_its_option(tmp_path, dataset_cache, monkeypatch, capsys, command, trace, says):
    """A virtual cluster the trace lacks names ``--virtual-cluster`` (not the sweep's windows)."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    out = tmp_path / "out"
    code = run_cli(app, ["experiment", command, "--trace", trace, "--virtual-cluster", "nope", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]  # the datasets' download progress may come first
    assert line.startswith(f"iadeep experiment {command}: error: Invalid value for ") and says in line, line
    assert "--start-jobs" not in line and not out.exists()


@pytest.mark.parametrize("command", ["run", "sweep", "compare"])
def test_an_out_folder_that_cannot_be_made_is_one_line_naming_the_option(tmp_path, dataset_cache, monkeypatch, capsys, command):
    """``--out`` naming a file, a path below a file, or a place no folder can be made: exit code 2,
    one line on stderr naming ``--out`` and what is wrong, ahead of any fetch."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    afile = tmp_path / "afile"
    afile.write_text("mine")
    cases = [(afile, f"'--out': {afile} is a file, not a folder"),
             (afile / "sub", f"'--out': {afile / 'sub'}: {afile} is a file, not a folder")]
    if Path("/proc/self").is_dir():  # Linux: no folder can be made in /proc
        cases.append((Path("/proc/iadeep-out"), "'--out': /proc/iadeep-out: cannot make the folder: "))
    for out, says in cases:
        code = run_cli(app, ["experiment", command, "--out", str(out)])
        std = capsys.readouterr()
        assert code == 2, std
        (line,) = std.err.strip().splitlines()
        assert line.startswith(f"iadeep experiment {command}: error: Invalid value for ") and says in line, line
        assert "Errno" not in line and not std.out.strip()
    assert afile.read_text() == "mine"
    # the check makes no folder: a command refused after it (a window past the trace's end) leaves none behind
    later = {"run": ["--start-job", "99999999"], "sweep": ["--start-jobs", "99999999", "--loads", "1", "--seeds", "0"]}
    if command in later:
        assert run_cli(app, ["experiment", command, *later[command], "--out", str(tmp_path / "new" / "out")]) == 2
        assert "no job left" in capsys.readouterr().err
        assert not (tmp_path / "new").exists()


def test_a_simulation_that_deadlocks_is_one_line_naming_the_policy(tmp_path, dataset_cache, monkeypatch, capsys):
    """The engine's error for jobs left unfinished reaches the user as one line (exit code 1: an
    internal failure, not a bad input) that keeps the policy and the count of unfinished jobs."""
    import iadeep.experiment._steps as steps

    def deadlock(*args, **kwargs):
        raise RuntimeError("simulation ended with 30 unfinished jobs (policy exclusive deadlocked)")

    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    monkeypatch.setattr(steps, "run_policies", deadlock)
    code = run_cli(app, ["experiment", "run", "--jobs", "20", "--policies", "exclusive", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("iadeep experiment run: error: simulation ended with 30 unfinished jobs "
                                            "(policy exclusive deadlocked)")


def test_a_time_window_picks_its_own_jobs():
    """The main job's default ``start_job`` (40,000 of Philly) does not apply inside a
    submission-time window (a window with fewer jobs would have no job left)."""
    assert ExperimentConfig().start_job == 40_000
    assert ExperimentConfig(window_start_s=5e6, window_end_s=6e6).start_job == 0
    assert ExperimentConfig(window_start_s=5e6, start_job=7).start_job == 7


def _script(relative: str):
    """A script of the repository that is not a package module (``tools/``, ``benchmarks/``), loaded."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_results_page_says_a_goal_is_missed_even_without_the_ceiling():
    """``make results`` states the goals of a sweep run without ``--ceiling``: a measured figure that
    misses its goal decides "no"; only when every measured figure meets its goal does the page say
    what was not measured, never a bare None."""
    results = _script("tools/results.py")
    guard = {"settings": 3, "worst_vs_packing": 1.5, "worst_setting": "s2", "median_vs_packing": 0.8,
             "worst_vs_exclusive": 0.75, "median_headroom_captured": None, "met": "no"}
    assert "(met: no)" in results.guard_text(guard, "fifo")
    within = {**guard, "worst_vs_packing": 1.01, "worst_setting": "s1", "met": None}
    assert "(met: n/a, median_headroom_captured not measured)" in results.guard_text(within, "fifo")
    assert "None" not in results.guard_text(within, "kube")
    assert "(met: yes)" in results.guard_text({**within, "median_headroom_captured": 0.9, "met": "yes"}, "kube")


def test_the_guard_line_names_the_baselines_that_ran(tmp_path, dataset_cache, monkeypatch):
    """The guard line names the packing baselines that ran (one: no 'better of'), says n/a for a
    figure not measured, the table leaves out iadeep against itself, and without either packing
    baseline a line says why there is no guard."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    monkeypatch.setenv("COLUMNS", "300")
    few = ["--jobs", "15", "--loads", "1", "--seeds", "0", "--start-jobs", "20000"]
    res = CliRunner().invoke(app, ["experiment", "sweep", *few, "--policies", "iadeep,antman", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "guard (fifo queue, 1 setting): iadeep / antman: worst" in text and "better of" not in text
    assert "n/a (exclusive did not run)" in text and "met n/a, not every figure was measured" in text
    header = next(line for line in res.output.splitlines() if "setting" in line)
    assert "antman" in header and "iadeep" not in header
    res = CliRunner().invoke(app, ["experiment", "sweep", *few, "--policies", "iadeep,exclusive", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "guard (fifo queue): none: it compares iadeep with antman and gandiva, and neither ran" in " ".join(res.output.split())


def test_a_throughput_table_unusable_for_the_gpu_type_is_named_as_such(tmp_path, dataset_cache, monkeypatch, capsys):
    """A table without the GPU type was blamed on ``--start-jobs`` (the window check read it first)."""
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    table = tmp_path / "list.json"
    table.write_text("[1, 2]")
    argv = ["experiment", "sweep", "--loads", "1", "--seeds", "0", "--start-jobs", "40000", "--throughputs", str(table),
            "--out", str(tmp_path / "out")]
    assert run_cli(app, argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"iadeep experiment sweep: error: Invalid value for '--throughputs': {table}: ") and "v100" in line, line
    assert run_cli(app, argv + ["--gpu-type", "k80"]) == 2
    assert "k80" in capsys.readouterr().err


def test_sweep_takes_the_predictor_and_a_throughput_table_of_its_own(tmp_path, dataset_cache, throughputs_path,
                                                                     monkeypatch):
    """The ceiling measurements of issue 9 (README, "The remaining losses at a glance") are sweeps
    with ``--predictor oracle`` and ``--throughputs`` set to ``tools/zero_interference.py``'s table:
    on that table a job runs its dedicated time whatever shares its GPU, on the measured one not."""
    import runpy

    import pandas as pd

    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    tool = runpy.run_path(str(Path(__file__).resolve().parents[2] / "tools" / "zero_interference.py"))
    table = tmp_path / "zero.json"
    assert tool["main"]([str(table), "--input", str(throughputs_path)]) == 0
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    for bad in ([str(tmp_path), "--input", str(throughputs_path)], [str(tmp_path / "x.json"), "--input", str(listed)]):
        with pytest.raises(SystemExit) as exit_:  # argparse's one-line error, no traceback
            tool["main"](bad)
        assert exit_.value.code == 2
    common = ["--start-jobs", "40000", "--loads", "2", "--seeds", "0", "--jobs", "60", "--policies", "iadeep,antman"]
    runner = CliRunner()
    for name, extra in (("zero", ["--throughputs", str(table), "--predictor", "oracle"]), ("measured", ["--predictor", "oracle"]),
                        ("learned", [])):
        res = runner.invoke(app, ["experiment", "sweep", *common, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output

    def stretch(name: str, policy: str) -> pd.Series:
        jobs = pd.read_csv(tmp_path / name / "40000-2-0" / f"jobs-{policy}.csv")
        return (jobs["end_s"] - jobs["start_s"]) / jobs["duration_s"]

    assert stretch("zero", "antman").max() == pytest.approx(1.0) and (stretch("measured", "antman") > 1.01).any()
    # the oracle reaches the sweep's iadeep: its avg JCT is that of `experiment run --predictor oracle`
    run = runner.invoke(app, ["experiment", "run", "--start-job", "40000", "--target-load", "2", "--seed", "0", "--jobs", "60",
                              "--policies", "iadeep", "--predictor", "oracle", "--out", str(tmp_path / "run")])
    assert run.exit_code == 0, run.output
    swept = pd.read_csv(tmp_path / "measured" / "sweep.csv").set_index("policy")["avg_jct_s"]
    learned = pd.read_csv(tmp_path / "learned" / "sweep.csv").set_index("policy")["avg_jct_s"]
    direct = json.loads((tmp_path / "run" / "summary.json").read_text())["policies"]["iadeep"]["avg_jct_s"]
    assert swept["iadeep"] == pytest.approx(direct) and swept["iadeep"] != pytest.approx(learned["iadeep"])


def test_a_draw_is_a_function_of_its_seed_and_recorded_to_rerun_exactly(tmp_path, dataset_cache, monkeypatch):
    """``--draw N --draw-seed S`` draws the same settings every time (the first ``m`` of a larger
    draw are those of the draw of ``m``; another seed draws others), each within its trace's
    windows and the documented ranges; ``guard.json`` records them and ``--from-draw`` reruns the
    same sweep row for row."""
    from iadeep.experiment import draw_settings
    from iadeep.experiment._draw import ITP_CLUSTERS, LOAD_RANGE, NODES_RANGE

    counts = {"philly": 80_000, "ms-itp": 3_000, "openb": 6_000}
    count = lambda trace, vc, nodes, gpus: counts[trace]  # noqa: E731
    big = draw_settings(40, 7, count, 400)
    assert draw_settings(40, 7, count, 400) == big and draw_settings(10, 7, count, 400) == big[:10]
    assert draw_settings(10, 8, count, 400) != big[:10]
    assert {s.trace for s in big} == {"philly", "ms-itp", "openb"}
    for s in big:
        assert 0 <= s.start_job <= counts[s.trace] - 400 and LOAD_RANGE[0] <= s.target_load <= LOAD_RANGE[1]
        assert NODES_RANGE[0] <= s.nodes <= NODES_RANGE[1] and s.gpus_per_node in (4, 8)
        assert (s.virtual_cluster in ITP_CLUSTERS) == (s.trace == "ms-itp") and (s.mix == "gavel") == (s.trace == "openb")
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    few = ["--jobs", "30", "--queue", "kube", "--policies", "iadeep,antman"]
    res = CliRunner().invoke(app, ["experiment", "sweep", "--draw", "2", "--draw-seed", "3", *few, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    guard = json.loads((tmp_path / "a" / "guard.json").read_text())
    assert guard["draw"]["seed"] == 3 and len(guard["draw"]["settings"]) == 2
    assert (guard["draw"]["jobs"], guard["draw"]["queues"], guard["draw"]["repeats"]) == (30, ["kube"], 1)
    # the rerun takes the jobs a setting and the queue model from the record, not the options' defaults
    res = CliRunner().invoke(app, ["experiment", "sweep", "--from-draw", str(tmp_path / "a" / "guard.json"),
                                   "--policies", "iadeep,antman", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "2 settings, 30 jobs a setting, queue kube, 1 run(s) a setting" in " ".join(res.output.split())
    assert (tmp_path / "a" / "sweep.csv").read_text() == (tmp_path / "b" / "sweep.csv").read_text()
    res = CliRunner().invoke(app, ["experiment", "sweep", "--from-draw", str(tmp_path / "a" / "guard.json"),
                                   "--policies", "iadeep", "--jobs", "20", "--out", str(tmp_path / "b20")])
    assert res.exit_code == 0, res.output  # an option given is what runs
    import pandas as pd

    assert set(pd.read_csv(tmp_path / "b20" / "sweep.csv")["jct_jobs"]) == {20}
    res = CliRunner().invoke(app, ["experiment", "sweep", "--draw", "2", "--start-jobs", "0", *few, "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "--start-jobs cannot be given with it" in " ".join(res.output.split())


def test_the_benchmarks_old_and_new_sides_each_run_their_own_tree(tmp_path):
    """``make bench`` compares the working tree with a baseline worktree by running each side's
    processes with that tree on ``PYTHONPATH``; ``python -m``/``-c`` put the working directory ahead
    of it, so each side also runs in its tree. A tree holding another ``iadeep`` package is the one
    imported, and the checkout's own tree imports itself."""
    bench = _script("benchmarks/startup.py")
    root = bench.ROOT
    other = tmp_path / "baseline"
    (other / "iadeep").mkdir(parents=True)
    (other / "iadeep" / "__init__.py").write_text("")
    assert bench.imported_from(other) == other.resolve()
    assert bench.imported_from(root) == root
    marker = tmp_path / "ran-in"
    bench._wall([bench.PY, "-c", f"import os; open({str(marker)!r}, 'w').write(os.getcwd())"], bench._env(other), cwd=other)
    assert marker.read_text() == str(other)
