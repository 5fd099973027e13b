"""``iadeep datasets list|fetch|verify`` through typer's CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets_support import Entry, payload, write_manifest
from typer.testing import CliRunner

from iadeep.datasets._cli import app

DATA = payload(5_000, seed=3)
runner = CliRunner()


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A manifest with datasets 'alpha' and 'beta' and a local mirror holding them."""
    mirror = tmp_path / "mirror"
    for name in ("alpha", "beta"):
        (mirror / name).mkdir(parents=True)
        (mirror / name / f"{name}.csv").write_bytes(DATA)
    manifest = write_manifest(
        tmp_path / "m.toml",
        {n: [Entry(f"{n}.csv", f"https://example.invalid/{n}.csv", DATA)] for n in ("alpha", "beta")},
    )
    monkeypatch.setenv("IADEEP_DATASET_MANIFEST", str(manifest))
    monkeypatch.setenv("IADEEP_DATASET_MIRROR", str(mirror))
    monkeypatch.setenv("COLUMNS", "200")
    return mirror


def test_list_fetch_verify(mirror: Path, isolated_env: Path) -> None:
    listed = runner.invoke(app, ["list"])
    assert listed.exit_code == 0, listed.output
    assert "alpha" in listed.output and "beta" in listed.output and "CC0-1.0" in listed.output
    assert "yes" not in listed.output

    fetched = runner.invoke(app, ["fetch", "alpha", "--no-progress"])
    assert fetched.exit_code == 0, fetched.output
    assert str(isolated_env / "datasets" / "alpha") in fetched.output
    assert (isolated_env / "datasets" / "alpha" / "alpha.csv").read_bytes() == DATA

    listed = runner.invoke(app, ["list"])
    rows = [line.split("│") for line in listed.output.splitlines() if "alpha" in line or "beta" in line]
    assert [(row[1].strip(), row[5].strip()) for row in rows] == [("alpha", "yes"), ("beta", "no")]
    verified = runner.invoke(app, ["verify"])
    assert verified.exit_code == 0, verified.output
    assert "alpha" in verified.output and "beta" not in verified.output


def test_fetch_all(mirror: Path, isolated_env: Path) -> None:
    result = runner.invoke(app, ["fetch", "--all", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (isolated_env / "datasets" / "beta" / "beta.csv").exists()


def test_verify_failure_exits_1(mirror: Path, isolated_env: Path) -> None:
    assert runner.invoke(app, ["fetch", "alpha", "--no-progress"]).exit_code == 0
    (isolated_env / "datasets" / "alpha" / "alpha.csv").write_bytes(b"short")
    result = runner.invoke(app, ["verify", "alpha"])
    assert result.exit_code == 1
    assert "size mismatch" in result.output and "expected 5000 bytes, got 5" in result.output
    missing = runner.invoke(app, ["verify", "beta"])
    assert missing.exit_code == 1 and "missing" in missing.output


def test_errors_are_messages_not_tracebacks(mirror: Path) -> None:
    unknown = runner.invoke(app, ["fetch", "nope", "--no-progress"])
    assert unknown.exit_code == 2 and isinstance(unknown.exception, SystemExit)  # a usage error, as the CLI's others
    assert "unknown dataset 'nope'; known datasets: alpha, beta" in unknown.output
    assert "Traceback" not in unknown.output
    assert not runner.invoke(app, ["fetch", "alpha", "nope", "--no-progress"]).stdout.strip()  # nothing fetched

    (mirror / "beta" / "beta.csv").unlink()
    partial = runner.invoke(app, ["fetch", "beta", "alpha", "--no-progress"])
    assert partial.exit_code == 1  # beta failed, alpha still fetched
    assert "missing mirror file" in partial.output and "alpha" in partial.output

    assert runner.invoke(app, ["verify", "nope"]).exit_code == 1
    assert runner.invoke(app, ["fetch"]).exit_code == 2  # usage error: no names


def test_top_level_cli_mounts_datasets(mirror: Path) -> None:
    from iadeep.cli import app as main_app

    result = runner.invoke(main_app, ["datasets", "list"])
    assert result.exit_code == 0, result.output
    assert "alpha" in result.output


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("IADEEP_DATASET_MIRROR", "ftp://x", "IADEEP_DATASET_MIRROR='ftp://x': a mirror is a local folder or an http://, "
                                         "https:// or file:// URL, not ftp://"),
    ("IADEEP_DATASET_MANIFEST", "{tmp}/nope.toml", "IADEEP_DATASET_MANIFEST='{tmp}/nope.toml': the dataset manifest does "
                                                   "not exist"),
    ("IADEEP_DATASET_MANIFEST", "{tmp}", "IADEEP_DATASET_MANIFEST='{tmp}': the dataset manifest is a folder"),
    ("IADEEP_CACHE_DIR", "{tmp}/m.toml", "IADEEP_CACHE_DIR='{tmp}/m.toml': the cache root is a file, not a folder"),
])
@pytest.mark.parametrize("command", [["list"], ["fetch", "alpha", "--no-progress"], ["verify"]])
def test_a_bad_setting_is_a_configuration_error_naming_the_variable(mirror: Path, tmp_path: Path, monkeypatch, variable,
                                                                     value, message, command) -> None:
    """Exit code 2 and one line naming the variable, as every bad IADEEP_* setting of the CLI."""
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == f"error: {message.format(tmp=tmp_path)}"


def test_a_file_url_mirror_is_a_local_folder(mirror: Path, isolated_env: Path, monkeypatch) -> None:
    monkeypatch.setenv("IADEEP_DATASET_MIRROR", mirror.as_uri())
    result = runner.invoke(app, ["fetch", "alpha", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert Path(result.stdout.strip().splitlines()[-1], "alpha.csv").read_bytes() == DATA
