"""Fixtures for tests on the real node (containerd + runc + kubelet joined to the real control
plane; ``make node``), with the services' images of ``make images``. Datasets come from the
shared ``tests/conftest.py`` (``throughputs_path``)."""

import pytest

from iadeep.dev import ControlPlaneError, Node, images_archive
from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    _required,
    control_plane,
    control_plane_options,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
from iadeep.testing.node import node_binaries, real_node  # noqa: F401


@pytest.fixture(scope="session")
def images(real_node: Node) -> list[str]:
    """The services' images of ``make images`` imported into the session's node (once: the
    import of the archive takes about a minute); skips without them (fails under CI)."""
    try:
        archive = images_archive()
    except ControlPlaneError as exc:
        if _required():
            pytest.fail(f"{exc} (required under CI)", pytrace=False)
        pytest.skip(str(exc))
    assert archive is not None
    return real_node.import_images([archive])
