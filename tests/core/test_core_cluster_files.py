"""Clusters as data: YAML cluster files, openb's node list, Philly's machine list (issue 10)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from iadeep._climain import run_cli
from iadeep.cli import app
from iadeep.sim import (
    ClusterFileError,
    ClusterSpec,
    NodeGroup,
    cluster_from_openb,
    cluster_from_philly,
    dump_cluster,
    load_cluster,
    philly_consistency,
)


def test_yaml_round_trip_and_gpu_layout(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("groups:\n  - {count: 2, gpus_per_node: 4, gpu_mem_gib: 32, gpu_model: V100M32}\n"
                 "  - {count: 1, gpus_per_node: 2, gpu_mem_gib: 16, gpu_model: T4, name: edge}\n")
    c = load_cluster(p)
    assert (c.nodes, c.total_gpus, c.gpus_per_node, c.gpu_mem_gib) == (3, 10, 4, 32.0)
    assert c.node_names() == ("v100m32-00", "v100m32-01", "edge-00")
    node, local, mem, model = c.gpu_arrays()
    assert node.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert local.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert mem.tolist() == [32.0] * 8 + [16.0] * 2 and model.tolist() == ["V100M32"] * 8 + ["T4"] * 2
    assert load_cluster(dump_cluster(c, tmp_path / "back.yaml", "a comment")) == c
    # a homogeneous spec keeps its old layout and names
    h = ClusterSpec(2, 3, 24.0)
    assert h.node_names() == ("node-00", "node-01") and h.total_gpus == 6 and h.gpu_arrays()[0].tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(("text", "match"), [
    ("groups: []\n", "non-empty 'groups' list"),
    ("groups:\n  - {count: 1, gpus_per_node: 2}\n", r"groups\[0\]: missing key\(s\) \['gpu_mem_gib'\]"),
    ("groups:\n  - {count: 1, gpus_per_node: 2, gpu_mem_gib: 16, colour: red}\n", "unknown key"),
    ("groups:\n  - {count: 0, gpus_per_node: 2, gpu_mem_gib: 16}\n", r"groups\[0\]: count: expected a whole number >= 1, got 0"),
    ("groups:\n  - {count: 1.5, gpus_per_node: 2, gpu_mem_gib: 16}\n", r"groups\[0\]: count: expected a whole number >= 1, got 1.5"),
    ("groups:\n  - {count: 1, gpus_per_node: .inf, gpu_mem_gib: 16}\n", r"groups\[0\]: gpus_per_node: expected a whole number >= 1, got inf"),
    ("groups:\n  - {count: 1, gpus_per_node: 2, gpu_mem_gib: .inf}\n", r"groups\[0\]: gpu_mem_gib: expected a finite number of GiB > 0, got inf"),
    ("groups:\n  - {count: 1, gpus_per_node: 2, gpu_mem_gib: .nan}\n", r"groups\[0\]: gpu_mem_gib: expected a finite number of GiB > 0, got nan"),
    ("groups:\n  - {count: 1, gpus_per_node: 2, gpu_mem_gib: 0}\n", r"groups\[0\]: gpu_mem_gib: expected a finite number of GiB > 0, got 0"),
    ("groups: [\n", "invalid YAML"),
])
def test_bad_cluster_files_name_file_and_group(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ClusterFileError, match=match) as ei:
        load_cluster(p)
    assert str(p) in str(ei.value)


def test_openb_node_list_gives_its_1213_nodes(dataset):
    nodes = dataset("openb") / "openb_node_list_gpu_node.csv"
    c = cluster_from_openb(nodes)
    import pandas as pd

    raw = pd.read_csv(nodes)
    gpu = raw[raw["gpu"] > 0]
    assert c.nodes == len(gpu) == 1213 and c.total_gpus == int(gpu["gpu"].sum())
    _, _, _, model = c.gpu_arrays()
    per_model = raw.groupby("model")["gpu"].sum().to_dict()
    assert {m: int((model == m).sum()) for m in per_model} == {m: int(v) for m, v in per_model.items()}


MACHINES = "machineId,number of GPUs,single GPU mem\nm1,8,24G\nm2,8,24G\nm3,2,12G\nm4,0,12G\n"


def test_philly_machine_list_and_consistency_report(tmp_path):
    ml = tmp_path / "cluster_machine_list"
    ml.write_text(MACHINES)
    c = cluster_from_philly(ml)
    assert c.total_gpus == 18 and c.nodes == 3
    assert sorted((g.count, g.gpus_per_node, g.gpu_mem_gib) for g in c.node_groups()) == [(1, 2, 12.0), (2, 8, 24.0)]
    log = tmp_path / "cluster_job_log"
    att = lambda ip, n: {"start_time": None, "end_time": None, "detail": [{"ip": ip, "gpus": [f"gpu{i}" for i in range(n)]}]}  # noqa: E731
    log.write_text(json.dumps([{"jobid": "a", "attempts": [att("m1", 8), att("m3", 4)]},
                               {"jobid": "b", "attempts": [att("m9", 1)]}]))
    r = philly_consistency(ml, log)
    assert r.machines_listed == 4 and r.machines_used == 3
    assert r.fewer_gpus_than_used == {"m3": (2, 4)}
    assert r.used_not_listed == ["m9"]
    assert json.loads(json.dumps(r.to_dict()))["fewer_gpus_than_used"] == {"m3": [2, 4]}
    bad = tmp_path / "bad_list"
    bad.write_text("machineId,number of GPUs,single GPU mem\nm1,eight,24G\n")
    with pytest.raises(ClusterFileError, match=r"bad_list:2: column 'number of GPUs'"):
        cluster_from_philly(bad)


@pytest.mark.parametrize(("row", "match"), [
    ("m9,2.5,24G", r"list:3: column 'number of GPUs': '2.5' is not a whole number"),
    ("m9,-1,24G", r"list:3: column 'number of GPUs': '-1' is not a whole number"),
    ("m9,8,0", r"list:3: column 'single GPU mem': '0': expected a finite number of GiB, > 0 on a machine with GPUs"),
    ("m9,8,-24G", r"list:3: column 'single GPU mem': '-24G': expected a finite number of GiB"),
    ("m9,8,inf", r"list:3: column 'single GPU mem': 'inf': expected a finite number of GiB"),
    ("m9,8,nan", r"list:3: column 'single GPU mem': 'nan': expected a finite number of GiB"),
])
def test_a_bad_philly_machine_row_names_the_file_line_and_column(tmp_path, row, match):
    """A machine row is taken whole or refused: a fractional GPU count is not truncated, and GPU
    memory that is 0 (on a machine with GPUs), negative or not finite never reaches the cluster."""
    ml = tmp_path / "list"
    ml.write_text(f"machineId,number of GPUs,single GPU mem\nm1,8,24G\n{row}\n")
    with pytest.raises(ClusterFileError, match=match) as ei:
        cluster_from_philly(ml)
    assert str(ei.value).startswith(f"{ml}:3: ")
    with pytest.raises(ClusterFileError, match=match):
        philly_consistency(ml, tmp_path / "no log read first")


def test_experiment_runs_on_a_cluster_file(tmp_path, dataset_cache, monkeypatch, capsys):
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(dataset_cache))
    spec = ClusterSpec(groups=(NodeGroup(2, 4, 32.0, "V100M32"), NodeGroup(2, 2, 16.0, "P100")))
    path = dump_cluster(spec, tmp_path / "cluster.yaml")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["experiment", "run", "--cluster", str(path), "--jobs", "40", "--policies", "iadeep,exclusive",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "summary.json").read_text())
    assert doc["cluster"]["total_gpus"] == 12 and doc["cluster"]["cluster_file"] == str(path)
    assert "P100" in (out / "report.md").read_text()
    capsys.readouterr()
    assert run_cli(app, ["experiment", "run", "--cluster", str(tmp_path / "nope.yaml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"iadeep experiment run: error: Invalid value for '--cluster': {tmp_path / 'nope.yaml'}: no such file", err


def test_cluster_command_writes_a_file_and_prints_the_report(tmp_path):
    ml = tmp_path / "cluster_machine_list"
    ml.write_text(MACHINES)
    log = tmp_path / "cluster_job_log"
    log.write_text(json.dumps([{"jobid": "a", "attempts": [{"detail": [{"ip": "m3", "gpus": ["gpu0", "gpu1", "gpu2"]}]},
                                                           {"detail": [{"ip": "m7", "gpus": ["gpu0"]}]}]}]))
    out = tmp_path / "philly.yaml"
    res = CliRunner().invoke(app, ["experiment", "cluster", "--from-philly", str(ml), "--job-log", str(log), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "GPUs raised to what the jobs used: 1: m3 (2 listed -> 3)" in res.output
    assert "added, used but not listed: 1, 12 GiB per GPU (the list's most common): m7 (1 GPU)" in res.output  # a tie: the smaller
    assert load_cluster(out).total_gpus == 18 + 1 + 1  # m3 has 3, m7 is added with 1
    assert "m3 (2 listed -> 3)" in out.read_text()  # the report is kept in the file's comment
    res = CliRunner().invoke(app, ["experiment", "cluster", "--out", str(out)])
    assert res.exit_code == 2 and "exactly one of" in res.output


def test_philly_cluster_covers_what_the_job_log_used(tmp_path):
    """Capacity per machine = max(listed, observed); machines used but not listed are added; the
    report names every corrected machine."""
    ml = tmp_path / "cluster_machine_list"
    ml.write_text("machineId,number of GPUs,single GPU mem\n"
                  "m1,8,24G\nm2,8,24G\nm3,2,12G\nm4,0,24G\nm5,4,12G\n")
    att = lambda *used: {"start_time": None, "end_time": None,  # noqa: E731
                         "detail": [{"ip": ip, "gpus": [f"gpu{i}" for i in gpus]} for ip, gpus in used]}
    log = tmp_path / "cluster_job_log"
    log.write_text(json.dumps([
        {"jobid": "a", "attempts": [att(("m1", range(8)), ("m3", range(2)))]},
        {"jobid": "b", "attempts": [att(("m3", [2, 3]))]},  # m3: 4 distinct GPUs over the log, 2 at a time
        {"jobid": "c", "attempts": [att(("m4", [0]))]},  # listed with none
        {"jobid": "d", "attempts": [att(("m9", range(2))), att(("m8", [0]))]},  # not listed
        {"jobid": "e", "attempts": [att(("m5", [0, 1]))]},  # within the list: unchanged
    ]))
    plain = cluster_from_philly(ml)
    assert plain.total_gpus == 22 and plain.nodes == 4
    c = cluster_from_philly(ml, log)
    assert c.total_gpus == 8 + 8 + 4 + 1 + 4 + 2 + 1 and c.nodes == 7
    shapes = sorted((g.count, g.gpus_per_node, g.gpu_mem_gib) for g in c.node_groups())
    # m1 m2: 8 x 24; m3: 4 x 12 (raised), m5: 4 x 12; m4: 1 x 24 (raised); m8: 1, m9: 2 (added, 24 GiB)
    assert shapes == [(1, 2, 24.0), (2, 1, 24.0), (2, 4, 12.0), (2, 8, 24.0)]
    r = philly_consistency(ml, log)
    assert r.fewer_gpus_than_used == {"m3": (2, 4), "m4": (0, 1)}
    assert r.used_not_listed == ["m8", "m9"] and r.used_gpus["m9"] == 2 and r.unlisted_gpu_mem_gib == 24.0
    out = tmp_path / "philly.yaml"
    res = CliRunner().invoke(app, ["experiment", "cluster", "--from-philly", str(ml), "--job-log", str(log), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "GPUs raised to what the jobs used: 2: m3 (2 listed -> 4), m4 (0 listed -> 1)" in res.output
    assert "added, used but not listed: 2, 24 GiB per GPU (the list's most common): m8 (1 GPU), m9 (2 GPUs)" in res.output
    assert "7 nodes, 28 GPUs" in res.output
    assert load_cluster(out).total_gpus == 28


def _cluster_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from iadeep.cli import main

    code = main(["experiment", "cluster", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("case", "match"), [
    ("no source", "give exactly one of --from-openb and --from-philly"),
    ("job log not JSON", "trace.csv: not JSON: Expecting value: line 1 column 1"),
    ("empty machine list", "empty.csv: empty file"),
    ("folder as node list", "some_dir: is a folder, not a CSV file"),
    ("missing node list", "nope.csv: No such file or directory"),
    ("folder as --out", "--out some_dir: is a folder"),
    ("file as --out's folder", "machines.csv is a file, not a folder"),
    ("GPU memory 0", "zero.csv:2: column 'single GPU mem': '0': expected a finite number of GiB"),
])
def test_cluster_command_bad_input_is_one_line_on_stderr(tmp_path, monkeypatch, capsys, case, match):
    """Bad input to ``iadeep experiment cluster``: exit code 2, one stderr line naming the file, no traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "machines.csv").write_text(MACHINES)
    (tmp_path / "trace.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "zero.csv").write_text("machineId,number of GPUs,single GPU mem\nm1,8,0\n")
    (tmp_path / "some_dir").mkdir()
    argv = {"no source": ["--out", "x.yaml"],
            "job log not JSON": ["--from-philly", "machines.csv", "--job-log", "trace.csv", "--out", "x.yaml"],
            "empty machine list": ["--from-philly", "empty.csv", "--out", "x.yaml"],
            "folder as node list": ["--from-openb", "some_dir", "--out", "x.yaml"],
            "missing node list": ["--from-openb", "nope.csv", "--out", "x.yaml"],
            "folder as --out": ["--from-philly", "machines.csv", "--out", "some_dir"],
            "file as --out's folder": ["--from-philly", "machines.csv", "--out", "machines.csv/x.yaml"],
            "GPU memory 0": ["--from-philly", "zero.csv", "--out", "x.yaml"]}[case]
    code, out, err = _cluster_cli(argv, capsys)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("iadeep experiment cluster: error: "), err
    assert match in err and "Traceback" not in err + out
    assert "error" not in out and not (tmp_path / "x.yaml").exists()


def test_cluster_command_creates_the_out_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "machines.csv").write_text(MACHINES)
    out = tmp_path / "new" / "sub" / "philly.yaml"
    code, stdout, err = _cluster_cli(["--from-philly", "machines.csv", "--out", str(out)], capsys)
    assert code == 0 and err == "", err
    assert load_cluster(out).total_gpus == 18


@pytest.mark.parametrize(("name", "text", "match"), [
    ("empty.csv", "", "empty.csv: empty file"),
    ("binary.csv", b"\xff\xfe\x00\x81", "binary.csv: not a CSV table"),
])
def test_node_lists_that_are_not_csv_name_the_file(tmp_path, name, text, match):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    for read in (cluster_from_openb, cluster_from_philly):
        with pytest.raises(ClusterFileError, match=match):
            read(p)
    with pytest.raises(ClusterFileError, match=f"{tmp_path}: is a folder"):
        cluster_from_openb(tmp_path)
    with pytest.raises(ClusterFileError, match=f"{tmp_path}: is a folder"):
        load_cluster(tmp_path)
