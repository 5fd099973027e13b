"""Fixtures of the extender tests: a real etcd (one per session, a fresh key prefix per test), the
real Gavel measurements, and the real control plane whose kube-scheduler runs the
``iadeep-scheduler`` profile with our extender at a loopback port chosen for the session."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from extender_support import free_port, scheduler_config

from iadeep.extender import ExtenderService, ExtenderSettings, KubernetesPodApi, KubeSettings
from iadeep.interference import InterferenceModel
from iadeep.dev import LocalEtcd
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    control_plane,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)

@pytest.fixture(scope="session")
def model(throughputs_path: Path) -> InterferenceModel:
    return InterferenceModel.from_file(throughputs_path)


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    """A real etcd server on loopback for the whole session."""
    server = LocalEtcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_settings(etcd: LocalEtcd) -> StateSettings:
    """Store settings with a key prefix of this test's own."""
    return StateSettings(endpoints=[etcd.endpoint], prefix=f"/t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def store(etcd_settings: StateSettings) -> Iterator[EtcdStateStore]:
    s = EtcdStateStore(etcd_settings)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def settings(etcd_settings: StateSettings, throughputs_path: Path) -> ExtenderSettings:
    """Extender settings for in-process tests: fast refresh, no sweep thread."""
    return ExtenderSettings(etcd=etcd_settings, throughputs_file=throughputs_path,
                            cache={"watch_idle_s": 0.5,
                                   "max_age_s": 5.0, "sweep_interval_s": 0})


@pytest.fixture
def make_service(settings: ExtenderSettings, store: EtcdStateStore, model: InterferenceModel
                 ) -> Callable[..., ExtenderService]:
    """Build an :class:`ExtenderService` (on the test's store unless ``state_store`` is given);
    other keyword arguments override settings."""

    def make(pod_api: Any = None, state_store: Any = None, **overrides: Any) -> ExtenderService:
        data = settings.model_dump()
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value.model_dump() if hasattr(value, "model_dump") else value
        s = ExtenderSettings.model_validate(data)
        return ExtenderService(s, store=state_store or store, pod_api=pod_api, model=model)

    return make


# -- the real control plane ----------------------------------------------------------------------

@pytest.fixture(scope="session")
def extender_port() -> int:
    """The loopback port kube-scheduler calls the extender on (each end-to-end test serves there)."""
    return free_port()


@pytest.fixture(scope="session")
def control_plane_options(extender_port: int) -> dict[str, Any]:
    """No initial nodes (each test adds its own); kube-scheduler with our two-profile configuration."""
    return {"nodes": 0, "gpus_per_node": 2, "gpu_mem_gib": 16, "scheduler_config": scheduler_config(extender_port)}


@pytest.fixture
def extender(control_plane, make_service, extender_port):
    """The extender in a thread on the port kube-scheduler calls: ``(server, service)``."""
    from extender_support import ThreadServer

    from iadeep.extender import create_app

    api = KubernetesPodApi(KubeSettings(), api_client=control_plane.api_client())
    svc = make_service(pod_api=api)
    with ThreadServer(create_app(service=svc), port=extender_port) as srv:
        yield srv, svc
    api.close()


@pytest.fixture
def api(control_plane) -> Iterator[KubernetesPodApi]:
    """The extender's Kubernetes client against the local control plane's API server, closed after."""
    pod_api = KubernetesPodApi(KubeSettings(), api_client=control_plane.api_client())
    yield pod_api
    pod_api.close()
