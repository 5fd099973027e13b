"""Loaders for the training datasets, reading the files in their published formats.

Each loader takes a *dataset folder*: the folder ``iadeep datasets fetch <name>`` fills (its
archive unpacked beside it), the unpacked archive folder, or the innermost folder holding the
files (a local path or an NFS mount). Missing, truncated or corrupt files raise
:class:`WorkloadDataError` naming the file and, where it applies, the line and field.

Formats
-------
CIFAR-10/100, python version (Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html):
pickled (Python 2) dicts with ``"data"``, a ``(N, 3072)`` uint8 array (1024 red, then 1024
green, then 1024 blue values of a 32x32 image in row-major order) and ``"labels"`` (CIFAR-10)
or ``"fine_labels"`` (CIFAR-100). Files ``data_batch_1..5``/``test_batch`` in
``cifar-10-batches-py/``; ``train``/``test`` in ``cifar-100-python/``. The pickles are read with
an unpickler that only builds the numpy arrays, lists, dicts and bytes the format contains (a
pickle can otherwise run code).

WikiText-2 (Merity et al. 2017): ``wikitext-2/wiki.{train,valid,test}.tokens``, UTF-8 text.

MovieLens-1M (Harper and Konstan 2015): ``ml-1m/ratings.dat``, one rating per line,
``UserID::MovieID::Rating::Timestamp`` (ratings 1-5, Unix seconds).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "WorkloadDataError",
    "ImageData",
    "Ratings",
    "load_cifar",
    "load_wikitext2",
    "load_movielens_ratings",
]


class WorkloadDataError(ValueError):
    """A training dataset is missing, truncated or not in its published format."""


@dataclass(frozen=True)
class ImageData:
    """Images and labels of one split.

    Attributes:
        images: uint8, shape ``(n, 3, 32, 32)`` (channels first).
        labels: int64 class indices, shape ``(n,)``.
    """

    images: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class Ratings:
    """MovieLens ratings, one entry per rating, in file order.

    Attributes:
        users, items: int64 ids as in the file, shape ``(n,)``.
        ratings: int64 stars 1-5, shape ``(n,)``.
        timestamps: int64 Unix seconds, shape ``(n,)``.
    """

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray


def _find(folder: Path, inner: tuple[str, ...], names: tuple[str, ...], dataset: str) -> Path:
    """The first of ``folder/<inner...>`` holding every file of ``names``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkloadDataError(f"{dataset}: dataset folder {folder} does not exist")
    candidates = [folder / rel for rel in inner] + [folder]
    for candidate in candidates:
        if all((candidate / n).is_file() for n in names):
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise WorkloadDataError(
        f"{dataset}: missing {', '.join(names)} (looked in {looked}); "
        f"fetch it with `iadeep datasets fetch {dataset}` or pass the folder holding the files")


class _ArrayUnpickler(pickle.Unpickler):
    """Builds only numpy arrays and plain containers (the CIFAR pickles' content)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("builtins", "bytes"),
        ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"forbidden object {module}.{name}")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path, label_key: str, dataset: str) -> ImageData:
    try:
        with path.open("rb") as fh:
            # The published files are Python 2 pickles: numpy needs latin-1 to rebuild the arrays.
            raw = _ArrayUnpickler(io.BufferedReader(fh), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise WorkloadDataError(f"{dataset}: {path} is not a readable CIFAR pickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict):
        raise WorkloadDataError(f"{dataset}: {path}: expected a dict, found {type(raw).__name__}")
    raw = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in raw.items()}
    for key in ("data", label_key):
        if key not in raw:
            raise WorkloadDataError(f"{dataset}: {path}: field {key!r} is missing")
    data = np.asarray(raw["data"])
    labels = np.asarray(raw[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise WorkloadDataError(f"{dataset}: {path}: field 'data' must be uint8 (N, 3072), found {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise WorkloadDataError(
            f"{dataset}: {path}: field {label_key!r} must hold {data.shape[0]} integers, found {labels.dtype} {labels.shape}")
    return ImageData(data.reshape(-1, 3, 32, 32), labels.astype(np.int64))


def load_cifar(folder: str | Path, classes: int) -> tuple[ImageData, ImageData]:
    """Read CIFAR-10 or CIFAR-100 (python version).

    Args:
        folder: dataset folder (see the module docstring).
        classes: 10 or 100.

    Returns:
        ``(train, test)``: 50,000 and 10,000 images in the full dataset.

    Raises:
        WorkloadDataError: missing file, unreadable pickle, missing field, wrong shape or dtype,
            or a label outside ``[0, classes)``.
    """
    if classes == 10:
        dataset, label_key = "cifar-10", "labels"
        train_names = tuple(f"data_batch_{i}" for i in range(1, 6))
        test_names: tuple[str, ...] = ("test_batch",)
        base = _find(Path(folder), ("cifar-10-python/cifar-10-batches-py", "cifar-10-batches-py"),
                     train_names + test_names, dataset)
    elif classes == 100:
        dataset, label_key = "cifar-100", "fine_labels"
        train_names, test_names = ("train",), ("test",)
        base = _find(Path(folder), ("cifar-100-python/cifar-100-python", "cifar-100-python"),
                     train_names + test_names, dataset)
    else:
        raise ValueError(f"CIFAR has 10 or 100 classes, not {classes}")
    splits = []
    for names in (train_names, test_names):
        parts = [_read_cifar_batch(base / n, label_key, dataset) for n in names]
        split = ImageData(np.concatenate([p.images for p in parts]), np.concatenate([p.labels for p in parts]))
        bad = (split.labels < 0) | (split.labels >= classes)
        if bad.any():
            raise WorkloadDataError(f"{dataset}: {base}: label {int(split.labels[bad][0])} outside [0, {classes})")
        splits.append(split)
    return splits[0], splits[1]


def load_wikitext2(folder: str | Path) -> dict[str, str]:
    """Read WikiText-2's token files.

    Returns:
        ``{"train": text, "valid": text, "test": text}``.

    Raises:
        WorkloadDataError: a file is missing, empty, or not UTF-8 (the byte offset is named).
    """
    names = {"train": "wiki.train.tokens", "valid": "wiki.valid.tokens", "test": "wiki.test.tokens"}
    base = _find(Path(folder), ("wikitext-2-v1/wikitext-2", "wikitext-2"), tuple(names.values()), "wikitext-2")
    out = {}
    for split, name in names.items():
        data = (base / name).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkloadDataError(f"wikitext-2: {base / name}: not UTF-8 at byte {exc.start}") from exc
        if not text.strip():
            raise WorkloadDataError(f"wikitext-2: {base / name} is empty")
        out[split] = text
    return out


def load_movielens_ratings(folder: str | Path) -> Ratings:
    """Read MovieLens-1M's ``ratings.dat``.

    Raises:
        WorkloadDataError: missing file, a line without four ``::``-separated fields, a field that
            is not an integer, a rating outside 1-5 (file, line and field are named), or no rating.
    """
    base = _find(Path(folder), ("ml-1m/ml-1m", "ml-1m"), ("ratings.dat",), "movielens-1m")
    path = base / "ratings.dat"
    fields = ("UserID", "MovieID", "Rating", "Timestamp")
    rows: list[list[int]] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line:
                continue
            parts = line.split(b"::")
            if len(parts) != 4:
                raise WorkloadDataError(f"movielens-1m: {path}:{lineno}: expected 4 fields UserID::MovieID::Rating::Timestamp, found {len(parts)}")
            row = []
            for field, value in zip(fields, parts):
                try:
                    row.append(int(value))
                except ValueError:
                    raise WorkloadDataError(f"movielens-1m: {path}:{lineno}: {field} {value[:20]!r} is not an integer") from None
            if not 1 <= row[2] <= 5:
                raise WorkloadDataError(f"movielens-1m: {path}:{lineno}: Rating {row[2]} outside 1-5")
            rows.append(row)
    if not rows:
        raise WorkloadDataError(f"movielens-1m: {path} holds no rating")
    table = np.asarray(rows, dtype=np.int64)
    return Ratings(table[:, 0], table[:, 1], table[:, 2], table[:, 3])
