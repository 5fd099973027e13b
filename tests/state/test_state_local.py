"""Settings from the environment, and the local etcd of ``iadeep etcd start|status|stop``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from state_support import job
from typer.testing import CliRunner

from iadeep.state import EtcdStateStore, LocalEtcdSettings, StateSettings, StoreUnavailable, ensure_local_etcd
from iadeep.state._cli import app
from iadeep.state._local import local_status, stop_local


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("IADEEP_ETCD_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_settings_defaults(clean_env):
    s = StateSettings()
    assert s.endpoints == [] and s.prefix == "/iadeep"
    assert s.tls.ca_file is None and s.auth.username is None
    assert (s.timeouts.connect_s, s.timeouts.request_s) == (2.0, 5.0)
    assert (s.retry.attempts, s.retry.conflict_attempts) == (4, 64)
    assert s.local.dir is None and s.local.client_port == 0 and s.local.fsync is True


def test_settings_from_environment(clean_env, tmp_path):
    env = {
        "IADEEP_ETCD_ENDPOINTS": "http://127.0.0.2:2379, https://etcd.example,127.0.0.3",
        "IADEEP_ETCD_PREFIX": "prod/iadeep/",
        "IADEEP_ETCD_TLS__CA_FILE": str(tmp_path / "ca.crt"),
        "IADEEP_ETCD_TLS__CERT_FILE": str(tmp_path / "c.crt"),
        "IADEEP_ETCD_TLS__KEY_FILE": str(tmp_path / "c.key"),
        "IADEEP_ETCD_AUTH__USERNAME": "iadeep",
        "IADEEP_ETCD_AUTH__PASSWORD": "hunter2",
        "IADEEP_ETCD_TIMEOUTS__REQUEST_S": "1.5",
        "IADEEP_ETCD_RETRY__ATTEMPTS": "7",
        "IADEEP_ETCD_LOCAL__DIR": str(tmp_path / "etcd"),
        "IADEEP_ETCD_LOCAL__CLIENT_PORT": "23790",
    }
    for k, v in env.items():
        clean_env.setenv(k, v)
    s = StateSettings()
    assert s.endpoints == ["http://127.0.0.2:2379", "https://etcd.example:2379", "http://127.0.0.3:2379"]
    assert s.prefix == "/prod/iadeep"
    assert s.tls.cert_file == tmp_path / "c.crt" and s.auth.username == "iadeep"
    assert s.auth.password.get_secret_value() == "hunter2" and "hunter2" not in repr(s)
    assert s.timeouts.request_s == 1.5 and s.retry.attempts == 7
    assert s.local.dir == tmp_path / "etcd" and s.local.client_port == 23790


@pytest.mark.parametrize(
    "env, match",
    [
        ({"IADEEP_ETCD_ENDPOINTS": "ftp://x:1"}, "expected http"),
        ({"IADEEP_ETCD_ENDPOINTS": "http://x:99999"}, "endpoint"),
        ({"IADEEP_ETCD_PREFIX": "/"}, "prefix"),
        ({"IADEEP_ETCD_TLS__CERT_FILE": "/c.crt"}, "go together"),
        ({"IADEEP_ETCD_RETRY__ATTEMPTS": "0"}, "attempts"),
    ],
)
def test_settings_reject_bad_values(clean_env, env, match):
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValidationError, match=match):
        StateSettings()


def test_no_endpoint_and_no_local_etcd(clean_env, tmp_path):
    settings = StateSettings(local=LocalEtcdSettings(dir=tmp_path / "none"))
    with pytest.raises(StoreUnavailable, match="iadeep etcd start"):
        EtcdStateStore(settings)


def test_cli_start_in_a_folder_it_cannot_make_is_one_line(clean_env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = CliRunner().invoke(app, ["start", "--dir", str(blocker / "etcd")])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), repr(res.exception)  # not an OSError
    assert f"local etcd folder {blocker / 'etcd'}" in res.output and "Traceback" not in res.output


def test_cli_start_status_stop_restart(clean_env, tmp_path):
    runner = CliRunner()
    directory = tmp_path / "local-etcd"
    settings = StateSettings(local=LocalEtcdSettings(dir=directory))
    try:
        res = runner.invoke(app, ["status", "--dir", str(directory)])
        assert res.exit_code == 1 and "not running" in res.output

        res = runner.invoke(app, ["start", "--dir", str(directory)])
        assert res.exit_code == 0, res.output
        state = local_status(settings)
        assert state["running"] and state["healthy"]
        assert f"export IADEEP_ETCD_ENDPOINTS={state['endpoint']}" in res.output
        res = runner.invoke(app, ["start", "--dir", str(directory)])
        assert res.exit_code == 0 and "already running" in res.output
        assert ensure_local_etcd(settings) == state["endpoint"]

        res = runner.invoke(app, ["status", "--dir", str(directory)])
        assert res.exit_code == 0 and "healthy" in res.output

        store = EtcdStateStore(settings)  # no endpoint configured: the local etcd
        assert store.endpoints == (state["endpoint"],)
        store.put_job(job("kept"))
        store.close()

        res = runner.invoke(app, ["stop", "--dir", str(directory)])
        assert res.exit_code == 0 and "stopped" in res.output
        assert runner.invoke(app, ["status", "--dir", str(directory)]).exit_code == 1
        with pytest.raises(StoreUnavailable):
            EtcdStateStore(settings)

        res = runner.invoke(app, ["start", "--dir", str(directory)])  # same port, same data
        assert res.exit_code == 0, res.output
        assert local_status(settings)["endpoint"] == state["endpoint"]
        again = EtcdStateStore(settings)
        assert set(again.jobs()) == {"kept"}
        again.close()

        res = runner.invoke(app, ["stop", "--purge", "--dir", str(directory)])
        assert res.exit_code == 0 and "data deleted" in res.output
        assert not (directory / "data").exists() and local_status(settings) is None
    finally:
        stop_local(settings)
