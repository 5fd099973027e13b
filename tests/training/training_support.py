"""Tiny files in the training datasets' published formats (and broken variants), built in tests.

Formats (see :mod:`iadeep.training._data`): CIFAR python pickles (protocol 2, as the published
Python 2 files; keys ``data``/``labels``/``fine_labels`` plus the ``batch_label`` and
``filenames`` the real files carry), WikiText-2 token files in ``wikitext-2/``, and MovieLens-1M's
``ml-1m/ratings.dat`` (``UserID::MovieID::Rating::Timestamp``). Archives are laid out as the
published ones: ``cifar-10-batches-py/``, ``cifar-100-python/``, ``wikitext-2/``, ``ml-1m/``.
"""

from __future__ import annotations

import io
import pickle
import tarfile
import zipfile

import numpy as np

CIFAR10_TRAIN_PER_BATCH = 24  # x 5 batches
CIFAR_TEST = 24
CIFAR100_TRAIN = 120
ML_USERS, ML_ITEMS, ML_PER_USER = 30, 160, 12


def cifar_batch(n: int, classes: int, seed: int, label_key: str = "labels") -> tuple[bytes, np.ndarray, np.ndarray]:
    """A CIFAR pickle of ``n`` images: ``(bytes, data (n, 3072) uint8, labels (n,))``."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = rng.integers(0, classes, n)
    record = {"batch_label": f"batch {seed}", "data": data, label_key: [int(x) for x in labels],
              "filenames": [f"img_{seed}_{i}.png" for i in range(n)]}
    if label_key == "fine_labels":
        record["coarse_labels"] = [int(x) // 5 for x in labels]
    return pickle.dumps(record, protocol=2), data, labels


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def cifar10_files() -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """Files of ``cifar-10-batches-py/`` and the arrays they hold (``train_data``, ``train_labels``, ...)."""
    files, datas, labels = {}, [], []
    for i in range(1, 6):
        blob, data, lab = cifar_batch(CIFAR10_TRAIN_PER_BATCH, 10, i)
        files[f"cifar-10-batches-py/data_batch_{i}"] = blob
        datas.append(data)
        labels.append(lab)
    blob, test_data, test_labels = cifar_batch(CIFAR_TEST, 10, 99)
    files["cifar-10-batches-py/test_batch"] = blob
    files["cifar-10-batches-py/batches.meta"] = pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}, protocol=2)
    arrays = {"train_data": np.concatenate(datas), "train_labels": np.concatenate(labels),
              "test_data": test_data, "test_labels": test_labels}
    return files, arrays


def cifar10_archive() -> tuple[bytes, dict[str, np.ndarray]]:
    files, arrays = cifar10_files()
    return _tar(files), arrays


def cifar100_archive() -> bytes:
    train, _, _ = cifar_batch(CIFAR100_TRAIN, 100, 7, "fine_labels")
    test, _, _ = cifar_batch(CIFAR_TEST, 100, 8, "fine_labels")
    return _tar({"cifar-100-python/train": train, "cifar-100-python/test": test,
                 "cifar-100-python/meta": pickle.dumps({"fine_label_names": [str(i) for i in range(100)]}, protocol=2)})


WIKI_LINE = " = Valkyria Chronicles III = \n \n Senjō no Valkyria 3 : <unk> Chronicles is a tactical role @-@ playing game . \n"


def wikitext_files() -> dict[str, bytes]:
    train = (WIKI_LINE * 40).encode()
    valid = (WIKI_LINE * 6).encode()
    return {"wikitext-2/wiki.train.tokens": train, "wikitext-2/wiki.valid.tokens": valid,
            "wikitext-2/wiki.test.tokens": valid}


def wikitext_archive() -> bytes:
    return _zip(wikitext_files())


def ratings_dat(seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A ``ratings.dat`` of ``ML_USERS`` users x ``ML_PER_USER`` ratings; also the (n, 4) table."""
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(1, ML_USERS + 1):
        for item in rng.choice(np.arange(1, ML_ITEMS + 1), ML_PER_USER, replace=False):
            rows.append((user, int(item), int(rng.integers(1, 6)), int(rng.integers(956_703_932, 1_046_454_590))))
    text = "".join(f"{u}::{i}::{r}::{t}\n" for u, i, r, t in rows)
    return text.encode(), np.array(rows, dtype=np.int64)


def movielens_archive() -> tuple[bytes, np.ndarray]:
    dat, table = ratings_dat()
    files = {"ml-1m/ratings.dat": dat, "ml-1m/movies.dat": b"1::Toy Story (1995)::Animation|Children's|Comedy\n",
             "ml-1m/users.dat": b"1::F::1::10::48067\n", "ml-1m/README": b"SUMMARY\n"}
    return _zip(files), table


def write_tree(root, files: dict[str, bytes]) -> None:  # noqa: ANN001
    """Write ``files`` (relative paths) under ``root``."""
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
