"""pytest fixtures for a real, session-wide Kubernetes control plane (see :mod:`iadeep.dev`).

Use from a conftest::

    from iadeep.testing.controlplane import (  # noqa: F401
        control_plane, control_plane_options, controlplane_binaries, k8s_client, k8s_namespace,
    )

and override ``control_plane_options`` (session scope) there to change the nodes or pass a
KubeSchedulerConfiguration. When the binaries are missing (``make controlplane`` not run) the
tests are skipped, except in CI (``CI`` or ``IADEEP_REQUIRE_CONTROLPLANE`` set), where that is
an error. The working directory (certificates, etcd data, one log per component) is under
pytest's basetemp, so the logs of a failed run stay there (pytest keeps the last three).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from iadeep.dev import Binaries, ControlPlane, ControlPlaneError, find_binaries

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _required() -> bool:
    return any(os.environ.get(v, "").lower() not in ("", "0", "false") for v in ("IADEEP_REQUIRE_CONTROLPLANE", "CI"))


def helm_binary():
    """The helm binary of ``make helm`` (:func:`iadeep.orchestration.find_helm`); skips the test
    without it, fails it when the suite runs under CI (``IADEEP_REQUIRE_CONTROLPLANE``)."""
    from iadeep.orchestration import find_helm

    try:
        return find_helm()
    except FileNotFoundError as exc:
        _missing(exc)


def _missing(exc: Exception):
    """Skip the test for a missing build product, or fail it where one is required (CI)."""
    if _required():
        pytest.fail(f"{exc} (required here because CI/IADEEP_REQUIRE_CONTROLPLANE is set)", pytrace=False)
    pytest.skip(str(exc))


@pytest.fixture(scope="session")
def controlplane_binaries() -> Binaries:
    """The located binaries; skips (fails under CI) when ``make controlplane`` has not run."""
    pytest.importorskip("kubernetes")
    try:
        return find_binaries()
    except ControlPlaneError as exc:
        _missing(exc)


@pytest.fixture(scope="session")
def control_plane_options() -> dict[str, Any]:
    """Keyword arguments for :class:`~iadeep.dev.ControlPlane`; override in a conftest."""
    return {"nodes": 3, "gpus_per_node": 4, "gpu_mem_gib": 32}


@pytest.fixture(scope="session")
def control_plane(
    controlplane_binaries: Binaries,
    control_plane_options: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControlPlane]:
    """A started :class:`~iadeep.dev.ControlPlane`, shared by the whole session."""
    options = dict(control_plane_options)
    options.setdefault("binaries", controlplane_binaries)
    for attempt in (1, 2):
        kwargs = dict(options)
        kwargs.setdefault("workdir", tmp_path_factory.mktemp("controlplane"))
        cp = ControlPlane(**kwargs)
        try:
            cp.start()
            break
        except ControlPlaneError as exc:
            # Ports are picked free, then bound by the component: on a busy machine another
            # process can take one in between. Worth exactly one more try.
            if attempt == 2 or "address already in use" not in str(exc):
                raise
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def k8s_client(control_plane: ControlPlane) -> Iterator[ApiClient]:
    """A ``kubernetes.client.ApiClient`` with admin rights on :func:`control_plane`."""
    api = control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def k8s_namespace(control_plane: ControlPlane, k8s_client: ApiClient) -> Iterator[str]:
    """A fresh namespace for one test (its default service account exists); deleted afterwards
    (:func:`delete_test_namespace`)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        delete_test_namespace(k8s_client, name)


def delete_test_namespace(api_client: ApiClient, name: str) -> None:
    """Delete a test's namespace, its unscheduled pods first and at once (best effort, never raises).

    An unbound pod has no kubelet to wait for, so it is gone when the call returns. The namespace
    controller deletes everything else in the background; a pending pod it has not reached yet
    would be placed by the next test's scheduler extender, into that test's state store (an
    extra reservation in the extender's restart test).
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    try:
        core.delete_collection_namespaced_pod(name, field_selector="spec.nodeName=", grace_period_seconds=0)
    except Exception:  # noqa: BLE001 - best effort, as below
        pass
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except Exception:  # noqa: BLE001 - best effort; the cluster goes away with the session
        pass
