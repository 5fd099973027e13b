"""The profiler measures on the CPU at tiny scale; its table is read back by the interference model
and the simulator (through the experiment's --throughputs path)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iadeep.interference import GavelMeasurements, InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.training._profile import METADATA_KEY, ProfileSettings, profile

TYPES = (JobType("ResNet-18", 16), JobType("Recommendation", 512))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    settings = ProfileSettings(models=("squeezenet", "neumf"), batch_sizes={"squeezenet": (16,), "neumf": (512,)},
                               window_s=0.3, warmup_steps=1, device="cpu", threads=1, tiny=True)
    seen: list[tuple[str, int, int]] = []
    result = profile(settings, lambda what, done, total: seen.append((what, done, total)))
    assert [d for _, d, _ in seen] == [1, 2, 3, 4, 5] and seen[-1][2] == 5  # 2 alone + 3 pairs (self-pairs included)
    return result, result.write(tmp_path_factory.mktemp("profile") / "throughputs.json")


@pytest.fixture
def table(profiled) -> Path:  # noqa: ANN001
    return profiled[1]


def test_each_job_reads_its_own_rate(profiled) -> None:  # noqa: ANN001
    """Gavel's entry[a][b] is [a's steps/s, b's steps/s] while a and b share the device."""
    result, path = profiled
    raw = json.loads(path.read_text())["cpu"]
    for (a, b), (rate_a, rate_b) in result.colocated.items():
        assert raw[a.gavel_key()][b.gavel_key()] == [rate_a, rate_b]
        assert raw[a.gavel_key()]["null"] == result.isolated[a]
    assert len(result.colocated) == 3


def test_profile_writes_gavel_schema(table: Path) -> None:
    raw = json.loads(table.read_text())
    assert set(raw) == {"cpu", METADATA_KEY}
    keys = {t.gavel_key() for t in TYPES}
    assert set(raw["cpu"]) == keys
    for key in keys:
        entry = raw["cpu"][key]
        assert entry["null"] > 0 and set(entry) == keys | {"null"}
        for other in keys:
            own, partner = entry[other]
            assert own > 0 and partner > 0
            if other != key:
                assert raw["cpu"][other][key] == [partner, own]  # one measurement, both directions
    assert raw[METADATA_KEY]["workloads"] == {"ResNet-18 (batch size 16)": "squeezenet", "Recommendation (batch size 512)": "neumf"}


def test_interference_model_and_simulator_read_the_profile(table: Path, tmp_path: Path) -> None:
    from iadeep.experiment._config import ExperimentConfig
    from iadeep.experiment._steps import run_policy

    m = GavelMeasurements.load(table, "cpu")
    assert m.types == tuple(sorted(TYPES))
    model = InterferenceModel.from_file(table, "cpu")
    assert np.all(model.norm > 0)
    with pytest.raises(ValueError, match="unknown GPU type 'v100'; the file has cpu"):
        GavelMeasurements.load(table, "v100")
    with pytest.raises(ValueError, match="unknown gpu_type 'cpu'"):
        ExperimentConfig(gpu_type="cpu")  # without a file only Gavel's published types exist
    cfg = ExperimentConfig(gpu_type="cpu", throughputs_file=str(table), policies=("exclusive", "iadeep"),
                           nodes=1, gpus_per_node=2, out=str(tmp_path / "run"))
    jobs = pd.DataFrame({
        "job_id": [str(i) for i in range(6)], "submit_time": [0.0, 0.0, 10.0, 20.0, 30.0, 40.0],
        "duration": [300.0, 200.0, 400.0, 100.0, 250.0, 150.0], "num_gpus": [1] * 6, "gpu_milli": [np.nan] * 6,
        "model": [t.model for t in TYPES] * 3, "batch_size": [t.batch_size for t in TYPES] * 3,
        "app": ["squeezenet", "neumf"] * 3})
    for name in cfg.policies:
        result = run_policy(cfg, name, jobs, table).jobs
        assert len(result) == 6 and result["end_s"].notna().all()
        assert (result["jct_s"] >= result["duration_s"] * (1 - 1e-9)).all()
    raw = json.loads(table.read_text())["cpu"]
    a, b = (t.gavel_key() for t in sorted(TYPES))
    # The model's normalised throughput is the profiled co-located rate over the isolated one.
    assert model.norm[0, 1] == pytest.approx(raw[a][b][0] / raw[a]["null"])


def test_profile_heatmap(profiled, tmp_path: Path) -> None:  # noqa: ANN001
    from iadeep.training._plot import plot_profile

    png = plot_profile(profiled[0], tmp_path / "profile.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_profile_errors_are_one_line() -> None:
    from typer.testing import CliRunner

    from iadeep.cli import app

    res = CliRunner().invoke(app, ["profile", "--models", "vgg16,resnet50", "--device", "cpu"])
    assert res.exit_code == 2 and "resnet50 and vgg16 both stand for ResNet-50" in res.output
    res = CliRunner().invoke(app, ["profile", "--models", "alexnet"])
    assert res.exit_code == 2 and "unknown workload 'alexnet'" in res.output


def test_experiment_cli_names_job_types_missing_from_the_profile(table: Path, philly_path: Path, tmp_path: Path,
                                                                 capsys) -> None:
    """The iadeep mix draws every batch size of four families: a two-type profile is refused up front."""
    from typer.testing import CliRunner

    from iadeep.cli import app

    res = CliRunner().invoke(app, ["experiment", "run", "--trace-file", str(philly_path), "--jobs", "30", "--throughputs", str(table),
                                   "--gpu-type", "cpu", "--policies", "exclusive", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert "has no cpu measurements of" in res.output and "LM (batch size" in res.output
    # checked before the trace is read, as the one line the console script prints (run_cli)
    from iadeep._climain import run_cli

    capsys.readouterr()
    assert run_cli(app, ["experiment", "run", "--trace-file", str(philly_path), "--jobs", "30", "--throughputs", str(table),
                         "--gpu-type", "v100", "--policies", "exclusive", "--out", str(tmp_path / "run")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("iadeep experiment run: error: Invalid value for '--throughputs': ") and \
        "unknown GPU type 'v100'; the file has cpu" in line, line
