"""Registered public datasets (traces and throughput measurements): list, fetch, verify.

The registry is ``datasets/registry.toml`` in the project (override with
``$IADEEP_DATASET_MANIFEST``). Files are cached in ``<cache>/datasets/<name>/`` where
``<cache>`` is ``$IADEEP_CACHE_DIR`` or the user cache dir of ``iadeep``; every file is pinned
by size and SHA-256. ``$IADEEP_DATASET_MIRROR`` (a folder or an ``http(s)://`` base URL laid out
as ``<mirror>/<dataset>/<file>``) replaces the upstream hosts, e.g. on offline machines.

Example:
    >>> from iadeep.datasets import fetch
    >>> philly_csv = fetch("philly") / "philly.csv"  # doctest: +SKIP
"""

from iadeep.datasets._api import cache_root, dataset_dir, fetch, list_datasets, verify
from iadeep.datasets._download import DownloadPolicy
from iadeep.datasets._errors import DatasetError, DatasetSettingsError
from iadeep.datasets._integrity import VerifyResult, VerifyStatus
from iadeep.datasets._manifest import DatasetInfo, FileSpec
from iadeep.datasets._settings import ENV_CACHE_DIR, ENV_MANIFEST, ENV_MIRROR

__all__ = [
    "ENV_CACHE_DIR",
    "ENV_MANIFEST",
    "ENV_MIRROR",
    "DatasetError",
    "DatasetSettingsError",
    "DatasetInfo",
    "DownloadPolicy",
    "FileSpec",
    "VerifyResult",
    "VerifyStatus",
    "cache_root",
    "dataset_dir",
    "fetch",
    "list_datasets",
    "verify",
]
