"""Where the manifest, the cache and the mirror are: read from the environment at call time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

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
        """
        if cache_dir is None:
            cache_dir = os.environ.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("iadeep")
        if manifest is None:
            manifest = os.environ.get(ENV_MANIFEST) or default_manifest_path()
        if mirror is None:
            mirror = os.environ.get(ENV_MIRROR)
        mirror_str = os.fspath(mirror).strip() if mirror is not None else ""
        return cls(
            cache_dir=Path(cache_dir).expanduser(),
            manifest_path=Path(manifest).expanduser(),
            mirror=mirror_str or None,
        )

    @property
    def datasets_root(self) -> Path:
        """``<cache_dir>/datasets``."""
        return self.cache_dir / "datasets"
