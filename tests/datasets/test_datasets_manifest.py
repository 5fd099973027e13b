"""The shipped registry and manifest validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets_support import ORIGINAL_MIRROR, REPO_ROOT

from iadeep.datasets import DatasetError, list_datasets
from iadeep.datasets._manifest import load_manifest
from iadeep.datasets._settings import default_manifest_path

# From the project's data notes (shared/data/SOURCES.md).
EXPECTED = {
    "philly": {"philly.csv": "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"},
    "ms-itp": {"raw-traces.tar.gz": "67398e1a89245c50ae0881bf997e6cda0c95f9f47980af5bc56d67998965669f"},
    "openb": {
        "openb_pod_list_default.csv": "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
        "openb_node_list_gpu_node.csv": "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",
    },
    "gavel-throughputs": {
        "simulation_throughputs.json": "17111f7295f03265fd9e5118d7eba31e3dd9d6e50a2e215c13ad3d3f91f74381"
    },
}


def test_shipped_registry_is_found_and_pinned() -> None:
    assert default_manifest_path() == REPO_ROOT / "datasets" / "registry.toml"
    datasets = {d.name: d for d in list_datasets()}
    assert {name: {f.name: f.sha256 for f in d.files} for name, d in datasets.items()} == EXPECTED
    for info in datasets.values():
        assert info.licence and info.citation and info.homepage.startswith("https://")
        for spec in info.files:
            assert spec.url.startswith("https://raw.githubusercontent.com/")
            assert spec.url.endswith("/" + spec.name)
            assert spec.size_bytes > 0 and spec.extract == spec.name.endswith(".tar.gz")
    assert datasets["philly"].licence == "CC-BY-4.0"
    assert datasets["ms-itp"].files[0].extract_dir_name == "raw-traces"


def test_registry_sizes_match_the_real_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pinned size is the size of the file the registry serves (the run's mirror, else upstream)."""
    from iadeep.testing import fetch_dataset

    if ORIGINAL_MIRROR:
        monkeypatch.setenv("IADEEP_DATASET_MIRROR", ORIGINAL_MIRROR)
    for info in list_datasets():
        folder = fetch_dataset(info.name, tmp_path)
        for spec in info.files:
            assert (folder / spec.name).stat().st_size == spec.size_bytes, spec.name


def test_env_manifest_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IADEEP_DATASET_MANIFEST", str(tmp_path / "absent.toml"))
    with pytest.raises(DatasetError, match="dataset manifest not found") as info:
        list_datasets()
    assert str(tmp_path / "absent.toml") in str(info.value)


@pytest.mark.parametrize(
    ("snippet", "problem"),
    [
        ('sha256 = "abc"', "sha256 must be 64 hex digits"),
        ('name = "../escape.csv"', "must be a plain file name"),
        ('url = "ftp://example.invalid/x"', "must be http(s)"),
        ("size_bytes = -1", "size_bytes must be a non-negative integer"),
        ("extract = true", "can be extracted"),
    ],
)
def test_malformed_entries_are_rejected(tmp_path: Path, snippet: str, problem: str) -> None:
    good = {
        "name": 'name = "x.csv"',
        "url": 'url = "https://example.invalid/x.csv"',
        "sha256": f'sha256 = "{"0" * 64}"',
        "size_bytes": "size_bytes = 3",
        "extract": "extract = false",
    }
    good[snippet.split(" ")[0]] = snippet
    text = "\n".join(
        [
            "[datasets.d]",
            'description = "d"',
            'licence = "MIT"',
            'citation = "c"',
            'homepage = "https://example.invalid"',
            "[[datasets.d.files]]",
            *good.values(),
        ]
    )
    path = tmp_path / "m.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_manifest(path)
    assert problem in str(info.value) and str(path) in str(info.value) and "'d'" in str(info.value)


def test_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[datasets\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="cannot read dataset manifest"):
        load_manifest(path)
