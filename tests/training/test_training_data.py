"""Loaders of the training datasets on format-correct files fetched through the registry, and on broken ones."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from training_support import (
    CIFAR10_TRAIN_PER_BATCH,
    CIFAR100_TRAIN,
    CIFAR_TEST,
    ML_PER_USER,
    ML_USERS,
    WIKI_LINE,
    cifar10_files,
    ratings_dat,
    wikitext_files,
    write_tree,
)

from iadeep.datasets import DatasetError, fetch
from iadeep.training import WorkloadDataError, load_cifar, load_movielens_ratings, load_wikitext2


def test_cifar10_from_registry_folder_keeps_pixels_and_labels(datasets: dict) -> None:
    train, test = load_cifar(datasets["root"] / "cifar-10", 10)
    want = datasets["cifar10"]
    assert train.images.shape == (5 * CIFAR10_TRAIN_PER_BATCH, 3, 32, 32) and train.images.dtype == np.uint8
    assert test.images.shape == (CIFAR_TEST, 3, 32, 32)
    np.testing.assert_array_equal(train.labels, want["train_labels"])
    # Published layout: 1024 red values (row-major 32x32), then green, then blue.
    first = want["train_data"][0]
    np.testing.assert_array_equal(train.images[0, 0, 0], first[:32])
    np.testing.assert_array_equal(train.images[0, 2, 31], first[3072 - 32:])
    np.testing.assert_array_equal(test.images.reshape(CIFAR_TEST, -1), want["test_data"])


def test_cifar100_fine_labels(datasets: dict) -> None:
    train, test = load_cifar(datasets["root"] / "cifar-100", 100)
    assert len(train.labels) == CIFAR100_TRAIN and len(test.labels) == CIFAR_TEST
    assert train.labels.max() < 100 and train.labels.max() >= 10  # fine (100-class) labels, not coarse


def test_wikitext_and_movielens_from_registry(datasets: dict) -> None:
    text = load_wikitext2(datasets["root"] / "wikitext-2")
    assert text["train"] == WIKI_LINE * 40 and text["valid"] == WIKI_LINE * 6
    ratings = load_movielens_ratings(datasets["root"] / "movielens-1m")
    table = datasets["ratings"]
    assert len(ratings.users) == ML_USERS * ML_PER_USER
    np.testing.assert_array_equal(np.stack([ratings.users, ratings.items, ratings.ratings, ratings.timestamps], 1), table)


def test_loaders_accept_the_innermost_folder(tmp_path: Path) -> None:
    files, _ = cifar10_files()
    write_tree(tmp_path, files)
    train, _ = load_cifar(tmp_path / "cifar-10-batches-py", 10)
    assert len(train.labels) == 5 * CIFAR10_TRAIN_PER_BATCH


def test_missing_files_name_the_dataset_and_the_fix(tmp_path: Path) -> None:
    files, _ = cifar10_files()
    del files["cifar-10-batches-py/data_batch_3"]
    write_tree(tmp_path, files)
    with pytest.raises(WorkloadDataError, match="cifar-10: missing .*data_batch_3.*iadeep datasets fetch cifar-10"):
        load_cifar(tmp_path, 10)
    with pytest.raises(WorkloadDataError, match="does not exist"):
        load_wikitext2(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[: len(b) // 2], "not a readable CIFAR pickle"),
        (lambda b: b"", "not a readable CIFAR pickle"),
        (lambda b: pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}, protocol=2), "field 'labels' is missing"),
        (lambda b: pickle.dumps({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}, protocol=2), r"uint8 \(N, 3072\)"),
        (lambda b: pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, protocol=2), "label 10 outside"),
    ],
)
def test_corrupt_cifar_batches_are_named(tmp_path: Path, damage, message: str) -> None:
    files, _ = cifar10_files()
    files["cifar-10-batches-py/data_batch_2"] = damage(files["cifar-10-batches-py/data_batch_2"])
    write_tree(tmp_path, files)
    with pytest.raises(WorkloadDataError, match=message) as info:
        load_cifar(tmp_path, 10)
    if "label 10" not in message:
        assert "data_batch_2" in str(info.value)


class _Exploit:
    def __reduce__(self):  # noqa: ANN204 - a pickle that would create a file when loaded
        return (os.mkdir, (self.target,))


def test_a_pickle_cannot_run_code(tmp_path: Path) -> None:
    files, _ = cifar10_files()
    exploit = _Exploit()
    exploit.target = str(tmp_path / "pwned")
    files["cifar-10-batches-py/test_batch"] = pickle.dumps({"data": exploit, "labels": []}, protocol=2)
    write_tree(tmp_path, files)
    with pytest.raises(WorkloadDataError, match="forbidden object posix.mkdir"):
        load_cifar(tmp_path, 10)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"7::12::4\n", r"ratings.dat:3: expected 4 fields"),
        (b"7::twelve::4::978300760\n", r"ratings.dat:3: MovieID b'twelve' is not an integer"),
        (b"7::12::9::978300760\n", r"ratings.dat:3: Rating 9 outside 1-5"),
    ],
)
def test_corrupt_ratings_name_line_and_field(tmp_path: Path, line: bytes, message: str) -> None:
    dat, _ = ratings_dat()
    lines = dat.splitlines(keepends=True)
    write_tree(tmp_path, {"ml-1m/ratings.dat": b"".join(lines[:2]) + line + b"".join(lines[2:])})
    with pytest.raises(WorkloadDataError, match=message):
        load_movielens_ratings(tmp_path)


def test_corrupt_wikitext_names_the_byte(tmp_path: Path) -> None:
    files = wikitext_files()
    files["wikitext-2/wiki.valid.tokens"] = b"fine text \xff\xfe more"
    write_tree(tmp_path, files)
    with pytest.raises(WorkloadDataError, match=r"wiki.valid.tokens: not UTF-8 at byte 10"):
        load_wikitext2(tmp_path)
    files["wikitext-2/wiki.valid.tokens"] = b" \n \n"
    write_tree(tmp_path, files)
    with pytest.raises(WorkloadDataError, match="wiki.valid.tokens is empty"):
        load_wikitext2(tmp_path)


def test_corrupt_download_is_refused_by_the_registry(datasets: dict, http_server, tmp_path: Path) -> None:
    """The server now answers with other bytes of the same size: the pinned sha256 refuses them."""
    path = "/movielens-1m/ml-1m.zip"
    good = http_server.routes[path].body
    http_server.add(path, bytes(reversed(good)))
    try:
        with pytest.raises(DatasetError, match="checksum mismatch"):
            fetch("movielens-1m", progress=False, cache_dir=tmp_path, manifest=datasets["manifest"], mirror="")
        assert not (tmp_path / "datasets" / "movielens-1m" / "ml-1m").exists()
    finally:
        http_server.add(path, good)
