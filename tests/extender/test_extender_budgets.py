"""Time budgets with etcd paused (SIGSTOP), against a real etcd of the test's own: the followed
copy knows how old its last confirmation is (a watch that merely times out is no confirmation),
filter answers ``Error`` past ``max_age_s``, and bind answers within ``call_budget_s`` (below
kube-scheduler's ``httpTimeout``) leaving nothing half-made once etcd is back."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from extender_support import ThreadServer, extender_args, gpu_pod, publish

from iadeep.extender import KubernetesPodApi, KubeSettings, create_app
from iadeep.extender._wire import ExtenderArgs
from iadeep.dev import LocalEtcd
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.testing import wait_for

client = pytest.importorskip("kubernetes.client")

R18 = {"iadeep.io/model": "ResNet-18", "iadeep.io/batch-size": "16"}


@pytest.fixture
def own_etcd(tmp_path) -> Iterator[LocalEtcd]:
    """An etcd this test may pause (the session's is shared)."""
    server = LocalEtcd(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()


@pytest.fixture
def paused_store(own_etcd) -> Iterator[EtcdStateStore]:
    settings = StateSettings(endpoints=[own_etcd.endpoint], prefix=f"/t-{uuid.uuid4().hex[:8]}")
    store = EtcdStateStore(settings)
    yield store
    store.close()


class Pause:
    def __init__(self, etcd: LocalEtcd) -> None:
        self.pid = etcd.proc.pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def _filter(svc, uid: str = "u1"):
    return svc.filter(ExtenderArgs.model_validate(extender_args(gpu_pod("p", mem=8, uid=uid), ["a"])))


def test_filter_refuses_a_copy_etcd_stopped_confirming(make_service, paused_store, own_etcd):
    """The field report: with etcd paused, filter kept answering from its copy for the whole pause."""
    publish(paused_store, ["a"])
    svc = make_service(state_store=paused_store, cache={"watch_idle_s": 0.3, "max_age_s": 1.5})
    svc.start()
    try:
        assert wait_for(lambda: _filter(svc), lambda r: r.node_names == ["a"], what="filter passes").error == ""
        with Pause(own_etcd):
            out = wait_for(lambda: _filter(svc), lambda r: bool(r.error), timeout=20,
                           what="filter answers Error while etcd is paused")
            assert "not confirmed by the store" in out.error or "unavailable" in out.error
            assert out.node_names is None or out.node_names == []
            age = svc.cache.age_s()
            assert age is not None and age > svc.settings.cache.max_age_s
            assert svc.ready()[0] is False
        # etcd is back: the copy is confirmed again and filter passes
        wait_for(lambda: _filter(svc), lambda r: r.node_names == ["a"] and not r.error, timeout=30,
                 what="filter passes after etcd resumes")
    finally:
        svc.stop()


def test_bind_answers_within_its_budget_and_leaves_nothing_half_made(
        k8s_client, k8s_namespace, control_plane, make_service, paused_store, own_etcd):
    names = control_plane.add_nodes(1, gpus=2, gpu_mem_gib=16, prefix=f"p{uuid.uuid4().hex[:6]}-")
    publish(paused_store, names)
    core = client.CoreV1Api(k8s_client)
    pod = core.create_namespaced_pod(k8s_namespace, gpu_pod("stalled", mem=6, namespace=k8s_namespace,
                                                            scheduler="nobody-schedules-this", annotations=R18))
    api = KubernetesPodApi(KubeSettings(), api_client=control_plane.api_client())
    svc = make_service(pod_api=api, state_store=paused_store, call_budget_s=2.0,
                       cache={"watch_idle_s": 0.3, "max_age_s": 60.0})
    body = {"PodName": "stalled", "PodNamespace": k8s_namespace, "PodUID": pod.metadata.uid, "Node": names[0]}
    try:
        with ThreadServer(create_app(service=svc)) as srv:
            httpx.post(f"{srv.url}/iadeep/filter", json=extender_args(pod, names)).raise_for_status()
            with Pause(own_etcd):
                # kube-scheduler would cancel at httpTimeout (10 s shipped): the answer must come first
                t0 = time.monotonic()
                answer = httpx.post(f"{srv.url}/iadeep/bind", json=body, timeout=10.0).json()
                took = time.monotonic() - t0
            assert "did not answer within the bind's budget (2 s)" in answer["Error"], answer
            print(f"bind answered in {took:.2f} s with etcd paused (budget 2 s)")
        # etcd is back: whatever the interrupted bind may have committed is released by the sweep
        svc.sweep()
        assert paused_store.assignments() == [] and paused_store.jobs() == {}
        live = core.read_namespaced_pod("stalled", k8s_namespace)
        assert not live.spec.node_name
        # and the pod binds at its next attempt
        with ThreadServer(create_app(service=svc)) as srv:
            assert httpx.post(f"{srv.url}/iadeep/bind", json=body, timeout=10.0).json() == {"Error": ""}
        assert [a.node for a in paused_store.assignments()] == names
    finally:
        svc.stop()
        api.close()
