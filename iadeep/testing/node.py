"""pytest fixtures for a real node (containerd + runc + kubelet) on the session's control plane.

Use from a conftest next to the control-plane fixtures (:mod:`iadeep.testing.controlplane`)::

    from iadeep.testing.node import real_node, node_binaries  # noqa: F401

``real_node`` is one :class:`~iadeep.dev.Node` for the whole session, stopped (no process,
mount or cgroup left) before the control plane. Without root, Linux or ``make node`` the tests
are skipped, except in CI (``CI`` or ``IADEEP_REQUIRE_CONTROLPLANE`` set), where that fails.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from iadeep.dev import ControlPlane, ControlPlaneError, Node, NodeBinaries, find_node_binaries
from iadeep.testing.controlplane import _required

__all__ = ["node_binaries", "real_node"]


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"{reason} (required here because CI/IADEEP_REQUIRE_CONTROLPLANE is set)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node_binaries() -> NodeBinaries:
    """kubelet, kubectl, pause (``make node``) and Debian's containerd/runc; skips (fails in CI)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        _unavailable("a real node needs Linux and root")
    try:
        return find_node_binaries()
    except ControlPlaneError as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture(scope="session")
def real_node(control_plane: ControlPlane, node_binaries: NodeBinaries) -> Iterator[Node]:
    """A Ready real node named ``iadeep-node`` of :func:`control_plane`, shared by the session."""
    node = Node.for_control_plane(control_plane, name="iadeep-node", binaries=node_binaries)
    node.start()
    try:
        yield node
    finally:
        node.stop()
