"""Where the manifest, the cache and the mirror are: read from the environment at call time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from iadeep.datasets._errors import DatasetSettingsError

__all__ = ["ENV_CACHE_DIR", "ENV_MANIFEST", "ENV_MIRROR", "Settings", "default_manifest_path"]

ENV_CACHE_DIR = "IADEEP_CACHE_DIR"
ENV_MIRROR = "IADEEP_DATASET_MIRROR"
ENV_MANIFEST = "IADEEP_DATASET_MANIFEST"

PathLike = str | os.PathLike[str]


def default_manifest_path() -> Path:
    """The registry shipped with the project: ``<repo>/datasets/registry.toml``."""
    return Path(__file__).resolve().parents[2] / "datasets" / "registry.toml"


@dataclass(frozen=True)
class Settings:
    """Resolved locations for one registry operation.

    Attributes:
        cache_dir: Cache root; datasets live in ``<cache_dir>/datasets/<name>/``.
        manifest_path: The TOML registry file.
        mirror: ``None`` for the upstream URLs of the manifest, otherwise an ``http(s)://`` base
            URL or a local folder, both laid out as ``<mirror>/<dataset>/<file name>``.
    """

    cache_dir: Path
    manifest_path: Path
    mirror: str | None = None

    @classmethod
    def resolve(
        cls,
        *,
        cache_dir: PathLike | None = None,
        manifest: PathLike | None = None,
        mirror: PathLike | None = None,
    ) -> Settings:
        """Combine explicit arguments with the environment (arguments win).

        Args:
            cache_dir: Cache root; default ``$IADEEP_CACHE_DIR``, else the user cache dir of
                ``iadeep`` (``platformdirs.user_cache_dir``).
            manifest: Registry file; default ``$IADEEP_DATASET_MANIFEST``, else
                :func:`default_manifest_path`.
            mirror: Mirror folder or base URL; default ``$IADEEP_DATASET_MIRROR``. An empty
                string (explicit or from the environment) means the upstream URLs.

        Returns:
            The resolved settings.

        Raises:
            DatasetSettingsError: the mirror is a URL of a scheme other than ``http``, ``https``
                or ``file``; the cache root exists and is not a folder; the manifest named by
                ``$IADEEP_DATASET_MANIFEST`` (or ``manifest``) is not a file. The message names
                the environment variable when the value came from it.
        """
        cache_from = "cache_dir" if cache_dir is not None else ENV_CACHE_DIR
        manifest_from = "manifest" if manifest is not None else ENV_MANIFEST
        mirror_from = "mirror" if mirror is not None else ENV_MIRROR
        if cache_dir is None:
            cache_dir = os.environ.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("iadeep")
        chosen_manifest = manifest if manifest is not None else os.environ.get(ENV_MANIFEST)
        if mirror is None:
            mirror = os.environ.get(ENV_MIRROR)
        mirror_str = os.fspath(mirror).strip() if mirror is not None else ""
        scheme = mirror_str.split("://", 1)[0].lower() if "://" in mirror_str else ""
        if scheme and scheme not in ("http", "https", "file"):
            raise DatasetSettingsError(f"{mirror_from}={mirror_str!r}: a mirror is a local folder or an http://, "
                                       f"https:// or file:// URL, not {scheme}://")
        root = Path(cache_dir).expanduser()
        if root.exists() and not root.is_dir():
            raise DatasetSettingsError(f"{cache_from}={os.fspath(cache_dir)!r}: the cache root is a file, not a folder")
        manifest_path = Path(chosen_manifest).expanduser() if chosen_manifest else default_manifest_path()
        if chosen_manifest and not manifest_path.is_file():
            what = "is a folder" if manifest_path.is_dir() else "does not exist"
            raise DatasetSettingsError(f"{manifest_from}={os.fspath(chosen_manifest)!r}: the dataset manifest {what}")
        return cls(cache_dir=root, manifest_path=manifest_path, mirror=mirror_str or None)

    @property
    def datasets_root(self) -> Path:
        """``<cache_dir>/datasets``."""
        return self.cache_dir / "datasets"
