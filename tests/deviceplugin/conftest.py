"""Fixtures of the device-plugin tests: a real etcd, a kubelet peer (real gRPC Registration server
on a unix socket in a temporary folder), the plugin with emulated GPUs, and the real local
control plane for the pods the extender would have bound."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iadeep.deviceplugin import DevicePluginService, DevicePluginSettings, EmulatedBackend
from iadeep.testing.controlplane import (  # noqa: F401 - fixtures by name
    control_plane,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
from iadeep.testing.etcd import etcd_server, etcd_settings, etcd_store  # noqa: F401
from iadeep.testing.kubelet import KubeletPeer


@pytest.fixture(scope="session")
def control_plane_options() -> dict:
    return {"nodes": 0, "gpus_per_node": 2, "gpu_mem_gib": 16}


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer
    with tempfile.TemporaryDirectory(prefix="dp-") as d:
        yield Path(d)


@pytest.fixture
def kubelet(socket_dir) -> Iterator[KubeletPeer]:
    k = KubeletPeer(socket_dir).start()
    yield k
    k.stop()


class NoPods:
    """A PodApi with no pods (for tests that never allocate)."""

    def allocating_pods(self, node):
        return []

    def mark_allocated(self, pod):
        raise AssertionError("nothing to mark")


@pytest.fixture
def state_file(tmp_path) -> Path:
    p = tmp_path / "gpus.json"
    p.write_text(json.dumps({}))
    return p


@pytest.fixture
def make_plugin(socket_dir, etcd_store, etcd_settings, state_file):
    started: list[DevicePluginService] = []

    def make(node: str = "n1", pods=None, count: int = 2, mem_gib: int = 16) -> DevicePluginService:
        s = DevicePluginSettings(node=node, socket_dir=socket_dir, backend="emulated", lease_ttl_s=5, poll_s=0.1,
                                 etcd=etcd_settings)
        backend = EmulatedBackend(node, count, mem_gib, state_file=state_file)
        svc = DevicePluginService(s, backend=backend, store=etcd_store, pods=pods or NoPods()).start()
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()
