"""Start-up and teardown of the control plane: nothing outlives a test, whatever happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iadeep.dev import ControlPlane

pytestmark = pytest.mark.slow


def _gone(pids, timeout=15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                # A zombie still has a /proc entry; its state letter is Z.
                stat = Path(f"/proc/{pid}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_teardown_after_a_failing_block(controlplane_binaries, tmp_path):
    cp = ControlPlane(nodes=1, binaries=controlplane_binaries)
    with pytest.raises(RuntimeError, match="boom"), cp:
        pids = [p.pid for p in cp.procs.values()]
        workdir = cp.workdir
        assert workdir is not None and (workdir / "kubeconfig").exists()
        assert cp.timings["ready"] > 0
        raise RuntimeError("boom")
    assert len(pids) == 5
    assert _gone(pids)
    assert not workdir.exists()  # a temporary workdir is removed


_KILLED_PARENT = """
import json, sys, time
from iadeep.dev import ControlPlane
cp = ControlPlane(nodes=0, workdir=sys.argv[1]).start()
print(json.dumps([p.pid for p in cp.procs.values()]), flush=True)
time.sleep(600)
"""


def test_components_die_with_a_killed_parent(controlplane_binaries, tmp_path):
    """SIGKILL skips __exit__ and atexit; PR_SET_PDEATHSIG still takes the components down."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT, str(tmp_path / "cp")], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line, "the child failed to start a control plane"
        pids = json.loads(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert _gone(pids), "components survived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_cluster_up_status_down(controlplane_binaries, tmp_path, monkeypatch):
    from kubernetes import client, config

    from iadeep.dev._cli import app

    monkeypatch.setenv("IADEEP_DEV_STATE_DIR", str(tmp_path / "state"))
    sched = tmp_path / "sched.yaml"
    sched.write_text("profiles:\n- schedulerName: default-scheduler\n- schedulerName: iadeep-cli\n")
    runner = CliRunner()
    up = runner.invoke(
        app,
        ["cluster", "up", "--name", "t", "--nodes", "2", "--gpus-per-node", "2", "--gpu-mem-gib", "16",
         "--scheduler-config", str(sched)],
    )
    state_file = tmp_path / "state" / "t" / "state.json"
    try:
        assert up.exit_code == 0, up.output
        assert "export KUBECONFIG=" in up.output
        state = json.loads(state_file.read_text())
        pids = [p["pid"] for p in state["processes"].values()]

        again = runner.invoke(app, ["cluster", "up", "--name", "t"])
        assert again.exit_code == 1 and "already up" in again.output

        status = runner.invoke(app, ["cluster", "status", "--name", "t"])
        assert status.exit_code == 0, status.output
        assert "kube-scheduler" in status.output

        api = config.new_client_from_config(config_file=state["kubeconfig"])
        with api:
            nodes = client.CoreV1Api(api).list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["gpu-node-0", "gpu-node-1"]
        assert {n.status.allocatable["iadeep.io/gpu-mem"] for n in nodes} == {"32"}
        assert "iadeep-cli" in Path(state["scheduler_config"]).read_text()
    finally:
        down = runner.invoke(app, ["cluster", "down", "--name", "t"])
    assert down.exit_code == 0, down.output
    assert _gone(pids)
    assert not state_file.parent.exists()
    status = runner.invoke(app, ["cluster", "status", "--name", "t"])
    assert status.exit_code == 1 and "not up" in status.output
