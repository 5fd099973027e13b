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
# The training workloads' datasets, from their authors' hosts; sha256 as published (sources in the registry).
TRAINING = {
    "cifar-10": {"cifar-10-python.tar.gz": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"},
    "cifar-100": {"cifar-100-python.tar.gz": "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7"},
    "wikitext-2": {"wikitext-2-v1.zip": "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c"},
    "movielens-1m": {"ml-1m.zip": "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20"},
}
TRAINING_SIZES = {"cifar-10-python.tar.gz": 170498071, "cifar-100-python.tar.gz": 169001437,
                  "wikitext-2-v1.zip": 4475746, "ml-1m.zip": 5917549}


def test_shipped_registry_is_found_and_pinned() -> None:
    assert default_manifest_path() == REPO_ROOT / "datasets" / "registry.toml"
    datasets = {d.name: d for d in list_datasets()}
    assert {name: {f.name: f.sha256 for f in d.files} for name, d in datasets.items()} == EXPECTED | TRAINING
    for name, info in datasets.items():
        assert info.licence and info.citation and info.homepage.startswith("https://")
        for spec in info.files:
            # Commit-pinned GitHub URLs, except the training datasets' own hosts (no commits there).
            assert spec.url.startswith("https://" if name in TRAINING else "https://raw.githubusercontent.com/")
            assert spec.url.endswith("/" + spec.name)
            assert spec.size_bytes > 0 and spec.extract == spec.name.endswith((".tar.gz", ".zip"))
            if name in TRAINING:
                assert spec.size_bytes == TRAINING_SIZES[spec.name]
    assert datasets["philly"].licence == "CC-BY-4.0"
    assert datasets["ms-itp"].files[0].extract_dir_name == "raw-traces"


def test_registry_sizes_match_the_real_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pinned size is the size of the file the registry serves (the run's mirror, else upstream)."""
    from iadeep.testing import fetch_dataset

    if ORIGINAL_MIRROR:
        monkeypatch.setenv("IADEEP_DATASET_MIRROR", ORIGINAL_MIRROR)
    for info in list_datasets():
        if info.name in TRAINING:
            continue  # not in the offline mirror (170 MB of CIFAR...); their published sizes are pinned above
        folder = fetch_dataset(info.name, tmp_path)
        for spec in info.files:
            assert (folder / spec.name).stat().st_size == spec.size_bytes, spec.name


def test_env_manifest_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IADEEP_DATASET_MANIFEST", str(tmp_path / "absent.toml"))
    with pytest.raises(DatasetError, match="IADEEP_DATASET_MANIFEST=.*: the dataset manifest does not exist") as info:
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
