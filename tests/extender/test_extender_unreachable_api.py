"""The extender's loops against a Kubernetes API that does not answer (a closed port on loopback):
the pod watch and the node-annotation writes retry after waits that double up to a cap, and the
log says the outage once, not four lines a second; the pod watch lists again when the API is back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from extender_support import closed_port_kubeconfig

from iadeep._serving import configure_logging
from iadeep.extender import KubernetesPodApi, KubeSettings
from iadeep.extender._bind import KubeError
from iadeep.extender._nodestate import NodeStatePublisher
from iadeep.extender._podwatch import PodFollower

FIRST_S, MAX_S = 0.01, 0.08
WAITS = [0.01, 0.02, 0.04, 0.08]  # without jitter: doubling from FIRST_S, then MAX_S


@pytest.fixture
def unreachable(tmp_path):
    """A :class:`KubernetesPodApi` whose kubeconfig names a closed port on 127.0.0.1."""
    kubeconfig = closed_port_kubeconfig(tmp_path / "kubeconfig", scheme="http")
    api = KubernetesPodApi(KubeSettings(kubeconfig=kubeconfig, request_timeout_s=2))
    yield api
    api.close()


def recording(failed: Callable[[object], float], waits: list[float]) -> Callable[[object], float]:
    def wrapper(exc: object) -> float:
        wait = failed(exc)
        waits.append(wait)
        return wait
    return wrapper


def until(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_pod_watch_backs_off_and_logs_the_outage_once(unreachable, caplog):
    configure_logging("INFO")  # the service's logging setup: urllib3's per-attempt retry lines at DEBUG
    follower = PodFollower(unreachable, lambda uids: None, retry_s=FIRST_S, retry_max_s=MAX_S, rand=lambda: 0.0)
    waits: list[float] = []
    follower.backoff.failed = recording(follower.backoff.failed, waits)  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG):
        follower.start()
        try:
            until(lambda: len(waits) >= 10)  # six tries at the cap after the ramp
        finally:
            follower.stop()
    assert len(waits) >= 10, waits
    assert waits[:4] == pytest.approx(WAITS) and all(w == pytest.approx(MAX_S) for w in waits[4:])
    shown = warnings(caplog)
    # the first failure and the first wait at the cap; nothing from urllib3 (3 a try otherwise)
    assert [r.name for r in shown] == ["iadeep.extender", "iadeep.extender"], [r.getMessage() for r in shown]
    assert "pod watch failed: list pods" in shown[0].getMessage()
    assert "pod watch still failing after 4 tries" in shown[1].getMessage()
    assert any(r.name == "urllib3.connectionpool" and r.getMessage().startswith("Retrying (") for r in caplog.records)
    assert not follower.synced and follower.listings == 0


def test_the_node_annotation_writes_back_off_and_log_the_outage_once(unreachable, caplog):
    nodes = [f"n{i}" for i in range(5)]
    publisher = NodeStatePublisher(unreachable.annotate_node, lambda node: '[{"gpu":0}]', retry_s=FIRST_S,
                                   retry_max_s=MAX_S, rand=lambda: 0.0)
    waits: list[float] = []
    publisher.backoff.failed = recording(publisher.backoff.failed, waits)  # type: ignore[method-assign]
    configure_logging("INFO")
    with caplog.at_level(logging.DEBUG):
        publisher.start()
        try:
            publisher.mark(nodes)
            until(lambda: len(waits) >= 10)
        finally:
            publisher.stop()
    assert len(waits) >= 10, waits
    assert waits[:4] == pytest.approx(WAITS) and all(w == pytest.approx(MAX_S) for w in waits[4:])
    shown = warnings(caplog)
    assert len(shown) == 2, [r.getMessage() for r in shown]  # not one a node a try: 5 x the tries
    assert "node(s) n0, n1, n2 and 2 more" in shown[0].getMessage()


class FlakyApi:
    """Fails ``failures`` listings as an unreachable API does, then lists no pods; its watch
    delivers nothing and ends after its timeout."""

    def __init__(self, failures: int):
        self.failures = failures
        self.lists = 0

    def list_pods(self):
        self.lists += 1
        if self.lists <= self.failures:
            raise KubeError("list pods: Kubernetes API unreachable: connection refused")
        return [], "7"

    def watch_pods(self, resource_version, *, timeout_s):
        time.sleep(timeout_s)
        return iter(())


def test_the_pod_watch_lists_again_when_the_api_is_back_and_starts_its_waits_over(caplog):
    api = FlakyApi(failures=3)
    follower = PodFollower(api, lambda uids: None, timeout_s=0.05, retry_s=FIRST_S, retry_max_s=MAX_S, rand=lambda: 0.0)
    with caplog.at_level(logging.INFO, logger="iadeep.extender"):
        follower.start()
        try:
            assert follower.wait_listed(5)
            assert follower.synced and follower.listings == 1 and api.lists == 4
            assert follower.backoff.failures == 0
        finally:
            follower.stop()
    assert any("pod watch works again after 3 failed tries" in r.getMessage() for r in caplog.records)
    assert len(warnings(caplog)) == 1
