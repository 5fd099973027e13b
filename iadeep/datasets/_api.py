"""The public operations: list, locate, fetch and verify registered datasets."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

from iadeep.datasets._download import DownloadPolicy, acquire, resolve_source
from iadeep.datasets._errors import DatasetError
from iadeep.datasets._extract import extract_archive, extraction_damage
from iadeep.datasets._integrity import VerifyResult, VerifyStatus, check_file, is_verified, sha256_of, write_stamp
from iadeep.datasets._manifest import DatasetInfo, FileSpec, load_manifest
from iadeep.datasets._progress import NewTask, progress_bar
from iadeep.datasets._settings import PathLike, Settings

__all__ = ["cache_root", "cache_state", "dataset_dir", "fetch", "list_datasets", "verify"]


def _lookup(datasets: dict[str, DatasetInfo], name: str) -> DatasetInfo:
    try:
        return datasets[name]
    except KeyError:
        known = ", ".join(sorted(datasets)) or "(none)"
        raise DatasetError(f"unknown dataset {name!r}; known datasets: {known}") from None


def list_datasets(*, manifest: PathLike | None = None) -> list[DatasetInfo]:
    """All registered datasets, in manifest order.

    Args:
        manifest: Registry file; default ``$IADEEP_DATASET_MANIFEST`` or the project's
            ``datasets/registry.toml``.

    Raises:
        DatasetError: The manifest is missing or malformed.
    """
    return list(load_manifest(Settings.resolve(manifest=manifest).manifest_path).values())


def cache_root(cache_dir: PathLike | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$IADEEP_CACHE_DIR``, else the user cache dir of ``iadeep``
    (datasets are under ``<root>/datasets/<name>``; the folder may not exist yet)."""
    return Settings.resolve(cache_dir=cache_dir).cache_dir


def dataset_dir(name: str, *, cache_dir: PathLike | None = None, manifest: PathLike | None = None) -> Path:
    """The cache folder of a dataset, ``<cache>/datasets/<name>`` (it may not exist yet).

    Args:
        name: Registered dataset name.
        cache_dir: Cache root; default ``$IADEEP_CACHE_DIR`` or the user cache dir.
        manifest: Registry file (see :func:`list_datasets`).

    Raises:
        DatasetError: Unknown dataset name (the message lists the known ones).
    """
    settings = Settings.resolve(cache_dir=cache_dir, manifest=manifest)
    info = _lookup(load_manifest(settings.manifest_path), name)
    return settings.datasets_root / info.name


def fetch(
    name: str,
    *,
    progress: bool = True,
    cache_dir: PathLike | None = None,
    mirror: PathLike | None = None,
    manifest: PathLike | None = None,
    policy: DownloadPolicy | None = None,
) -> Path:
    """Make a dataset present and verified in the cache; unpack its archives.

    Files already cached with the right size and SHA-256 are not downloaded again (a stamp
    keyed by size and mtime makes the repeated check instant). Others are downloaded into
    ``<file>.part``, checked, and renamed into place; an interrupted ``.part`` is resumed.

    Args:
        name: Registered dataset name.
        progress: Draw a progress bar on stderr.
        cache_dir: Cache root; default ``$IADEEP_CACHE_DIR`` or the user cache dir.
        mirror: Local folder or ``http(s)://`` base URL laid out as
            ``<mirror>/<dataset>/<file>``; default ``$IADEEP_DATASET_MIRROR``; ``""`` forces
            the upstream URLs.
        manifest: Registry file (see :func:`list_datasets`).
        policy: Retries, waits (seconds) and timeouts for HTTP; default :class:`DownloadPolicy`.

    Returns:
        The dataset folder ``<cache>/datasets/<name>``; an archive ``x.tar.gz`` is unpacked
        into its subfolder ``x/``.

    Raises:
        DatasetError: Unknown dataset; HTTP error status; retries exhausted; truncated file
            (expected vs received bytes); checksum mismatch (expected vs actual, the bad
            download is deleted); missing mirror file; unsafe or unreadable archive.
    """
    settings = Settings.resolve(cache_dir=cache_dir, manifest=manifest, mirror=mirror)
    info = _lookup(load_manifest(settings.manifest_path), name)
    folder = settings.datasets_root / info.name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create cache folder {folder}: {exc}", dataset=info.name) from exc
    try:
        with progress_bar(progress) as new_task:
            for spec in info.files:
                _fetch_file(info.name, spec, folder, settings.mirror, policy or DownloadPolicy(), new_task)
    except BaseException:
        # a fetch that got nothing leaves no folder (an empty one counted as cached for `verify`);
        # a partial download's .part stays, to resume
        try:
            folder.rmdir()
        except OSError:
            pass
        raise
    for spec in info.files:
        if spec.extract:
            extract_archive(folder / spec.name, folder / spec.extract_dir_name, dataset=info.name)
    return folder


def _fetch_file(
    dataset: str, spec: FileSpec, folder: Path, mirror: str | None, policy: DownloadPolicy, new_task: NewTask
) -> None:
    path = folder / spec.name
    if is_verified(dataset, spec, path):
        return
    path.unlink(missing_ok=True)  # wrong size or checksum: never keep it under the good name
    source = resolve_source(dataset, spec, mirror)
    part = path.with_name(f"{path.name}.part")
    acquire(dataset, spec, source, part, policy, new_task(f"{dataset}/{spec.name}", spec.size_bytes))

    def reject(reason: str) -> DatasetError:
        part.unlink(missing_ok=True)
        return DatasetError(reason, dataset=dataset, file=spec.name, source=source.location)

    size = part.stat().st_size
    if size < spec.size_bytes:
        raise reject(f"truncated (expected {spec.size_bytes} bytes, got {size})")
    if size > spec.size_bytes:
        raise reject(f"size mismatch (expected {spec.size_bytes} bytes, got {size})")
    actual = sha256_of(part)
    if actual != spec.sha256:
        raise reject(f"checksum mismatch (expected sha256 {spec.sha256}, got {actual})")
    os.replace(part, path)
    write_stamp(path, actual)


def verify(
    name: str | None = None, *, cache_dir: PathLike | None = None, manifest: PathLike | None = None
) -> list[VerifyResult]:
    """Re-hash cached files against the manifest; never downloads.

    Args:
        name: One dataset (every file is reported, missing ones too), or ``None`` for every
            dataset with at least one of its files in the cache.
        cache_dir: Cache root; default ``$IADEEP_CACHE_DIR`` or the user cache dir.
        manifest: Registry file (see :func:`list_datasets`).

    Returns:
        One result per file, in manifest order; ``result.ok`` tells success.

    Raises:
        DatasetError: Unknown dataset name, or a missing or malformed manifest.
    """
    settings = Settings.resolve(cache_dir=cache_dir, manifest=manifest)
    datasets = load_manifest(settings.manifest_path)
    if name is not None:
        selected = [_lookup(datasets, name)]
    else:
        # a dataset with at least one of its files in the cache (an empty folder is not a cached dataset)
        selected = [d for d in datasets.values()
                    if any((settings.datasets_root / d.name / spec.name).exists() for spec in d.files)]
    results = []
    for info in selected:
        for spec in info.files:
            r = check_file(info.name, spec, settings.datasets_root / info.name / spec.name)
            target = settings.datasets_root / info.name / spec.extract_dir_name if spec.extract else None
            if r.ok and target is not None and target.is_dir() and (why := extraction_damage(target)) is not None:
                r = dataclasses.replace(r, status=VerifyStatus.UNPACKED_DAMAGED, note=why)
            results.append(r)
    return results


def cache_state(info: DatasetInfo, settings: Settings) -> Literal["yes", "partial", "no"]:
    """Whether a dataset's files are all, partly or not verified in the cache (stamp-trusting)."""
    folder = settings.datasets_root / info.name
    good = sum(is_verified(info.name, spec, folder / spec.name) for spec in info.files)
    return "yes" if good == len(info.files) else "partial" if good else "no"
