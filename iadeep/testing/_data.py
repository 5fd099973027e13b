"""Datasets for tests, fetched the way users fetch them: through the dataset registry."""

from __future__ import annotations

from pathlib import Path

__all__ = ["fetch_dataset"]


def fetch_dataset(name: str, cache_dir: str | Path) -> Path:
    """Fetch and verify a registered dataset into ``cache_dir`` and return its folder.

    The source is the registry's documented one: ``$IADEEP_DATASET_MIRROR`` when set (the Makefile
    and ``.ci/run`` point it at the project's offline mirror), else the upstream URLs. A test never
    skips for missing data: a fetch that fails is an error naming the dataset and the variable.

    Raises:
        RuntimeError: the dataset could not be fetched (message from :class:`iadeep.datasets.DatasetError`).
    """
    from iadeep.datasets import DatasetError, fetch

    try:
        return fetch(name, progress=False, cache_dir=cache_dir)
    except DatasetError as exc:
        raise RuntimeError(f"test data {name!r} could not be fetched ({exc}); on a machine without internet "
                           "set IADEEP_DATASET_MIRROR to a local mirror (see README, Datasets)") from exc
