"""Fixtures for tests on the real node (containerd + runc + kubelet joined to the real control
plane; ``make node``), with the services' images of ``make images``. Datasets come from the
shared ``tests/conftest.py`` (``throughputs_path``)."""

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from node_stack import Stack, rolled_out

from iadeep.dev import ControlPlane, ControlPlaneError, Node, images_archive
from iadeep.dev._binaries import Binaries
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


@pytest.fixture(scope="module")
def scheduler_gates() -> Mapping[str, bool]:
    """``--feature-gates`` of the rolled-out ``iadeep-scheduler``: none, as shipped (a module
    overrides this fixture to roll it out with others)."""
    return {}


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, real_node: Node, images: list[str], k8s_client, throughputs_path: Path,
          controlplane_binaries: Binaries, scheduler_gates: Mapping[str, bool],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One rollout of every component onto the real node for the module (node_stack.rolled_out),
    removed after it."""
    with rolled_out(control_plane, real_node, k8s_client, throughputs_path, controlplane_binaries,
                    tmp_path_factory.mktemp("rollout"), scheduler_gates=scheduler_gates) as s:
        yield s
