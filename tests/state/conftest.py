"""Fixtures for the state-store tests: one real etcd per session (random loopback port, temporary
data dir, stopped afterwards), a fresh key prefix per test, and the ``store`` fixture that runs a
behavioural test against both :class:`MemoryStateStore` and :class:`EtcdStateStore`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from state_support import etcd_settings

from iadeep.state import EtcdStateStore, MemoryStateStore
from iadeep.testing.etcd import etcd_server  # noqa: F401 - pytest finds fixtures by name


@pytest.fixture
def prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def etcd_store(etcd_server, prefix) -> Iterator[EtcdStateStore]:
    store = EtcdStateStore(etcd_settings(etcd_server.endpoint, prefix))
    yield store
    store.close()


@pytest.fixture(params=["memory", "etcd"])
def store(request, prefix):
    """The same behavioural test against both implementations of the protocol."""
    if request.param == "memory":
        yield MemoryStateStore(prefix=prefix)
        return
    server = request.getfixturevalue("etcd_server")
    s = EtcdStateStore(etcd_settings(server.endpoint, prefix))
    yield s
    s.close()
