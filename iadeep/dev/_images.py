"""Where ``make images`` put the services' image archive, and the kube-scheduler image.

``tools/images/build.sh`` builds ``images/*/Dockerfile`` (buildah, no daemon, no registry) into
one OCI image archive under the user's cache, named by the build context's content hash; the
local node imports it (:meth:`iadeep.dev.Node.import_images`). The upstream kube-scheduler image
cannot be pulled here either, so :func:`kube_scheduler_image` writes one from the binary that
``make controlplane`` built (same version as the cluster's own scheduler).
"""

from __future__ import annotations

import os
from pathlib import Path

from iadeep._host import build_output
from iadeep.dev._errors import ControlPlaneError
from iadeep.dev._oci import ImageFile, write_image_archive

__all__ = [
    "IMAGE_PREFIX",
    "IMAGE_TAG",
    "SERVICES",
    "images_archive",
    "kube_scheduler_image",
    "service_image",
]

IMAGE_PREFIX = os.environ.get("IADEEP_IMAGE_PREFIX", "localhost/iadeep")
IMAGE_TAG = os.environ.get("IADEEP_IMAGE_TAG", "dev")
SERVICES = ("extender", "deviceplugin", "coordinator", "tuner")
IMAGES_HINT = "build them with `make images` (tools/images/build.sh)"


def service_image(service: str) -> str:
    """The local name of a service's image, e.g. ``localhost/iadeep/extender:dev``."""
    return f"{IMAGE_PREFIX}/{service}:{IMAGE_TAG}"


def _script() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        script = parent / "tools" / "images" / "build.sh"
        if script.is_file():
            return script
    return None


def images_archive(*, required: bool = True) -> Path | None:
    """The archive of the current source tree's images (``make images``), or the one
    ``$IADEEP_IMAGES_ARCHIVE`` names.

    Raises:
        ControlPlaneError: it is not built (only with ``required``).
    """
    env = os.environ.get("IADEEP_IMAGES_ARCHIVE")
    if env:  # an archive built elsewhere (another checkout, CI's cache)
        if not Path(env).is_file():
            raise ControlPlaneError(f"IADEEP_IMAGES_ARCHIVE={env} is not a file")
        return Path(env)
    script = _script()
    path = None
    if script is not None:
        out = build_output(script, "--print-archive", timeout_s=60.0)
        if out and (Path(out).parent / "DONE").is_file():
            path = Path(out)
    if path is None and required:
        raise ControlPlaneError(f"the services' images are not built for this source tree; {IMAGES_HINT}")
    return path


def kube_scheduler_image(binary: Path, version: str, out: Path) -> str:
    """Write an image holding ``binary`` as ``/usr/local/bin/kube-scheduler`` (the path the
    upstream image uses) to ``out``; returns its name ``<prefix>/kube-scheduler:<version>``."""
    if not os.access(binary, os.X_OK):
        raise ControlPlaneError(f"{binary} is not an executable kube-scheduler")
    name = f"{IMAGE_PREFIX}/kube-scheduler:{version}"
    write_image_archive(
        out, name, {"usr/local/bin/kube-scheduler": ImageFile(binary)}, entrypoint=["/usr/local/bin/kube-scheduler"]
    )
    return name
