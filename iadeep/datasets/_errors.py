"""The one exception type of the dataset registry."""

from __future__ import annotations

__all__ = ["DatasetError", "DatasetSettingsError"]


class DatasetError(Exception):
    """A dataset could not be listed, fetched, verified or extracted.

    The message names, where known, the dataset, the file, the source (URL or mirror path) and
    what failed, e.g. ``dataset 'philly', file 'philly.csv' (https://...): HTTP 404 Not Found``.

    Attributes:
        reason: What failed, without the location prefix.
        dataset: Dataset name, or ``None`` when the error is not about one dataset.
        file: File name inside the dataset, or ``None``.
        source: URL or local mirror path the file was read from, or ``None``.
    """

    def __init__(
        self,
        reason: str,
        *,
        dataset: str | None = None,
        file: str | None = None,
        source: str | None = None,
    ) -> None:
        self.reason = reason
        self.dataset = dataset
        self.file = file
        self.source = source
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.dataset is not None:
            where.append(f"dataset {self.dataset!r}")
        if self.file is not None:
            where.append(f"file {self.file!r}")
        prefix = ", ".join(where)
        if self.source is not None:
            prefix = f"{prefix} ({self.source})" if prefix else self.source
        return f"{prefix}: {self.reason}" if prefix else self.reason


class DatasetSettingsError(DatasetError):
    """A registry setting is unusable (a bad ``IADEEP_DATASET_MIRROR``, ``IADEEP_CACHE_DIR`` or
    ``IADEEP_DATASET_MANIFEST``, or the argument given in its place): a configuration error, which
    the CLI reports with exit code 2. The message names the setting and the value."""
