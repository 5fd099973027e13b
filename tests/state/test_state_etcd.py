"""What only the etcd store has: restarts, outages, failover, retried commits, TLS and auth."""

from __future__ import annotations

import time

import pytest
from state_support import etcd_serving_cert, etcd_settings, inventory, job, snapshot

from iadeep.dev import LocalEtcd, ServerTls
from iadeep.state import (
    AuthSettings,
    EtcdStateStore,
    InterferenceSampleRecord,
    Measurement,
    RetrySettings,
    StoreUnavailable,
    TimeoutSettings,
    TlsSettings,
)
from iadeep.state._etcdwire import _Transient


def _populate(store) -> None:
    store.put_inventory(inventory("n1", 2))
    store.put_inventory(inventory("n2", 2), lease_ttl_s=60)
    store.reserve(job("a", 10.0, 2), "n1", [0, 1], colocation_limit=2, now_s=1.0)
    store.reserve(job("b", 4.0), "n2", [1], colocation_limit=2, now_s=2.0)
    store.put_job(job("pending"))
    for i in range(3):
        store.add_measurement(Measurement("a", 5.0 + i, 32, float(i)))
    store.add_samples([InterferenceSampleRecord("ResNet-50", 32, "LM", 80, 0.61, 5.0)] * 2)


def test_state_survives_a_new_store_object(etcd_store):
    _populate(etcd_store)
    before = snapshot(etcd_store)
    etcd_store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        etcd_store.jobs()
    again = EtcdStateStore(etcd_store.settings)
    try:
        assert snapshot(again) == before
        assert len(before["samples"]) == 2 and len(before["assignments"]) == 3
        assert [m.steps_per_s for m in again.measurements("a")] == [5.0, 6.0, 7.0]
        again.release("a", now_s=3.0)  # and it can carry on from there
        assert {a.pod_uid for a in again.assignments()} == {"b"}
    finally:
        again.close()


def test_outage_and_etcd_restart(tmp_path):
    """etcd stops: healthy() turns False and every method raises StoreUnavailable within the retry
    budget (no other exception); etcd restarts on its data: the same object carries on."""
    etcd = LocalEtcd(tmp_path / "etcd").start()
    restarted = LocalEtcd(tmp_path / "etcd", client_port=etcd.client_port, peer_port=etcd.peer_port)
    try:
        fast = RetrySettings(attempts=3, initial_backoff_s=0.02)  # the default budget: see the next tests
        store = EtcdStateStore(etcd_settings(etcd.endpoint, retry=fast))
        _populate(store)
        before = snapshot(store)
        events = store.watch("jobs/", timeout_s=5.0)
        store.put_job(job("w"))
        assert next(events)["key"].endswith("/jobs/w")

        etcd.stop(timeout_s=0)  # a crash: etcd's graceful stop would wait for the open watch
        assert store.healthy() is False
        calls = {
            "inventories": lambda: store.inventories(),
            "put_inventory": lambda: store.put_inventory(inventory("n3", 1), lease_ttl_s=5),
            "keepalive": lambda: store.keepalive("n2"),
            "reserve": lambda: store.reserve(job("c"), "n1", [0], colocation_limit=2, now_s=3.0),
            "release": lambda: store.release("a", now_s=3.0),
            "assignments": lambda: store.assignments("n1"),
            "add_samples": lambda: store.add_samples([InterferenceSampleRecord("a", 1, "b", 1, 0.5)]),
            "samples": lambda: store.samples(),
            "watch": lambda: store.watch("jobs/", timeout_s=1.0),
            "open watch": lambda: next(events),
        }
        for name, call in calls.items():  # (how fast they fail: `make bench`, benchmarks/timings.py)
            with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{etcd.client_port}") as info:
                call()
            assert "ConnectionTimeoutError" not in str(info.value), name  # refused at once, no timeout waited
        assert store.stats()["retries"] >= len(calls)

        restarted.start()
        assert store.healthy() is True
        after = snapshot(store)
        assert after["samples"] == before["samples"]
        assert after["assignments"] == before["assignments"]
        assert after["jobs"] == {**before["jobs"], "w": job("w")}
        assert store.reserve(job("c"), "n1", [0], colocation_limit=2, now_s=3.0)
    finally:
        etcd.stop(timeout_s=0)
        restarted.stop(timeout_s=0)


def test_failover_to_the_next_endpoint(etcd_server, prefix):
    from iadeep.testing import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    store = EtcdStateStore(etcd_settings([dead, etcd_server.endpoint], prefix))
    try:
        store.put_inventory(inventory("n", 1))
        assert store.reserve(job("a"), "n", [0], colocation_limit=2, now_s=0.0)
        assert store.healthy()
        assert store.stats()["retries"] == 1  # one failed try, then it stays on the live endpoint
    finally:
        store.close()


def test_no_endpoint_reachable_names_them_all(prefix):
    from iadeep.testing import free_port

    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    store = EtcdStateStore(etcd_settings(dead, prefix))  # default retry policy: 4 tries
    with pytest.raises(StoreUnavailable) as err:
        store.jobs()
    assert dead[0] in str(err.value) and dead[1] in str(err.value) and "4 tries" in str(err.value)
    assert "ConnectionFailedError" in str(err.value)  # refused: no timeout was waited
    assert store.healthy() is False


def _lose_first_commit_answer(store, monkeypatch):
    """The first compare-transaction lands in etcd but its answer is lost on the wire."""
    real = store.backend._post_once
    lost = []

    def flaky(path, payload):
        result = real(path, payload)
        if path == "/kv/txn" and payload.get("compare") and not lost:
            lost.append(path)
            raise _Transient("test", "connection reset after the commit")
        return result

    monkeypatch.setattr(store.backend, "_post_once", flaky)
    return lost


def test_retried_reserve_that_landed_is_not_a_conflict(etcd_store, monkeypatch):
    etcd_store.put_inventory(inventory("n", 1))
    lost = _lose_first_commit_answer(etcd_store, monkeypatch)
    got = etcd_store.reserve(job("a", 4.0), "n", [0], colocation_limit=2, now_s=1.0)
    assert lost and [a.pod_uid for a in got] == ["a"]
    assert etcd_store.gpu_states()[("n", 0)].pods == ("a",)
    assert etcd_store.stats()["retries"] == 1


def test_retried_release_that_landed_returns_what_it_released(etcd_store, monkeypatch):
    etcd_store.put_inventory(inventory("n", 1))
    held = etcd_store.reserve(job("a", 4.0), "n", [0], colocation_limit=2, now_s=1.0)
    lost = _lose_first_commit_answer(etcd_store, monkeypatch)
    assert etcd_store.release("a", now_s=2.0) == held
    assert lost and etcd_store.assignments() == []


def test_tls_with_client_certificates(tmp_path, prefix):
    from iadeep.dev._pki import generate

    pki = generate(tmp_path / "pki")
    admin = pki.clients["admin"]
    cert, key = etcd_serving_cert(pki.dir, pki.ca_cert, pki.ca_key)
    etcd = LocalEtcd(tmp_path / "etcd", tls=ServerTls(cert, key, pki.ca_cert, admin.cert, admin.key)).start()
    try:
        assert etcd.endpoint.startswith("https://")
        fast = RetrySettings(attempts=2, initial_backoff_s=0.01)
        no_cert = EtcdStateStore(etcd_settings(etcd.endpoint, prefix, tls=TlsSettings(ca_file=pki.ca_cert), retry=fast))
        with pytest.raises(StoreUnavailable):
            no_cert.jobs()
        assert no_cert.healthy() is False
        untrusted = EtcdStateStore(etcd_settings(etcd.endpoint, prefix, retry=fast))  # system CAs only
        with pytest.raises(StoreUnavailable, match="SSL|certificate"):
            untrusted.jobs()

        client_tls = TlsSettings(ca_file=pki.ca_cert, cert_file=admin.cert, key_file=admin.key)
        store = EtcdStateStore(etcd_settings(etcd.endpoint, prefix, tls=client_tls))
        store.put_inventory(inventory("n", 1))
        assert store.reserve(job("a"), "n", [0], colocation_limit=2, now_s=0.0)
        events = store.watch("jobs/", timeout_s=0.3)
        store.put_job(job("b"))
        assert [e["key"].rsplit("/", 1)[1] for e in events] == ["b"]
        assert store.healthy()
    finally:
        etcd.stop(timeout_s=0)


def test_password_auth_and_token_renewal(tmp_path, prefix):
    """etcd with users enabled; its simple tokens expire after 1 s idle and the store renews them."""
    etcd = LocalEtcd(tmp_path / "etcd", extra_args=["--auth-token=simple", "--auth-token-ttl=1"]).start()
    try:
        admin = EtcdStateStore(etcd_settings(etcd.endpoint, prefix))
        admin.put_inventory(inventory("n", 1))
        admin.backend._post("/auth/role/add", {"name": "root"})
        admin.backend._post("/auth/user/add", {"name": "root", "password": "s3cret"})
        admin.backend._post("/auth/user/grant", {"user": "root", "role": "root"})
        admin.backend._post("/auth/enable", {})
        with pytest.raises(StoreUnavailable, match="rejected"):
            admin.jobs()  # no credentials any more

        def with_auth(password: str) -> EtcdStateStore:
            auth = AuthSettings(username="root", password=password)
            fast = RetrySettings(attempts=2, initial_backoff_s=0.01)
            return EtcdStateStore(etcd_settings(etcd.endpoint, prefix, auth=auth, retry=fast))

        with pytest.raises(StoreUnavailable, match="refused user 'root'.*authentication failed"):
            with_auth("wrong").jobs()
        good = with_auth("s3cret")
        assert set(good.inventories()) == {"n"}
        assert good.reserve(job("a"), "n", [0], colocation_limit=2, now_s=0.0)
        events = good.watch("jobs/", timeout_s=0.3)
        good.put_job(job("b"))
        assert [e["key"].rsplit("/", 1)[1] for e in events] == ["b"]
        tokens = good.backend._token_gen
        time.sleep(1.8)  # the token expires
        assert good.healthy()  # renews it
        assert good.backend._token_gen == tokens + 1
        time.sleep(1.8)
        assert [a.pod_uid for a in good.assignments()] == ["a"]
        assert good.backend._token_gen == tokens + 2
        assert good.stats()["retries"] == 1  # one 'invalid auth token', then a new token
    finally:
        etcd.stop(timeout_s=0)


def test_settings_timeouts_bound_a_silent_endpoint(prefix):
    """An endpoint that accepts connections but never answers costs ``request_s`` per try."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        endpoint = f"http://127.0.0.1:{srv.getsockname()[1]}"
        settings = etcd_settings(
            endpoint,
            prefix,
            timeouts=TimeoutSettings(connect_s=0.2, request_s=0.2),
            retry=RetrySettings(attempts=2, initial_backoff_s=0.01),
        )
        store = EtcdStateStore(settings)
        with pytest.raises(StoreUnavailable, match="ConnectionTimeoutError") as info:
            store.jobs()
        assert "2 tries" in str(info.value)  # the configured attempts, each bounded by the timeouts
    finally:
        srv.close()
