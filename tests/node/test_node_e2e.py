"""The real node end to end: kubelet (built from the control plane's pins), Debian's containerd
and runc, joined to the real control plane; real containers, no mocks.

Every pod is hostNetwork and uses an image written locally (Debian's static busybox), since no
registry is reachable; the services' images are tested in ``test_images.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from node_support import host_pod, leftovers, pod_log, processes_mentioning, wait_phase

from iadeep.dev import REAL_NODE_LABEL, ControlPlane, Node
from iadeep.dev._node import KUBELET_DEVICE_PLUGINS, KUBELET_ROOT_MAX
from iadeep.dev._nodeclean import cgroup_pids, cgroup_v2, mounts_under
from iadeep.testing import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def busybox(real_node: Node) -> str:
    return real_node.busybox_image()


def test_the_node_registers_ready_on_loopback(real_node: Node, k8s_client) -> None:
    node = client.CoreV1Api(k8s_client).read_node(real_node.name)
    conds = {c.type: c.status for c in node.status.conditions}
    assert conds["Ready"] == "True", node.status.conditions
    assert node.metadata.labels[REAL_NODE_LABEL] == "true"
    # The apiserver reaches the kubelet at its InternalIP: loopback, and nothing else is offered.
    assert {(a.type, a.address) for a in node.status.addresses if a.type.endswith("IP")} == {("InternalIP", "127.0.0.1")}
    assert node.status.daemon_endpoints.kubelet_endpoint.port == real_node.ports["kubelet"]
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert node.status.node_info.kubelet_version.startswith("v1.")
    log = (real_node.log_dir / f"kubelet-{real_node.name}.log").read_text()
    assert "--node-ip=127.0.0.1" in log
    if not cgroup_v2():  # said in the log when the kubelet is allowed onto a cgroup v1 host
        assert "failCgroupV1: false" in log
        assert "failCgroupV1: false" in real_node.paths.kubelet_config.read_text()


def test_a_hostnetwork_pod_runs_a_command_and_its_logs_are_readable(real_node, busybox, k8s_client, k8s_namespace) -> None:
    core = client.CoreV1Api(k8s_client)
    marker = uuid.uuid4().hex
    cmd = ["/bin/sh", "-c", f"echo hello-{marker}; echo host=$(hostname); echo uid=$(id -u)"]
    core.create_namespaced_pod(k8s_namespace, host_pod("hello", busybox, cmd, automountServiceAccountToken=False))
    pod = wait_phase(core, k8s_namespace, "hello", {"Succeeded", "Failed"})
    assert pod.status.phase == "Succeeded", pod.status
    assert pod.spec.node_name == real_node.name  # placed by kube-scheduler on the real node
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert pod.status.pod_ip == "127.0.0.1"  # hostNetwork on a loopback-only node
    logs = pod_log(core, k8s_namespace, "hello")  # apiserver -> kubelet on 127.0.0.1
    assert f"hello-{marker}" in logs.splitlines()
    assert "uid=0" in logs


def test_a_failing_command_makes_the_pod_fail_with_its_exit_code(real_node, busybox, k8s_client, k8s_namespace) -> None:
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(k8s_namespace, host_pod("fails", busybox, ["/bin/sh", "-c", "echo oops >&2; exit 7"]))
    pod = wait_phase(core, k8s_namespace, "fails", {"Succeeded", "Failed"})
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 7
    assert "oops" in pod_log(core, k8s_namespace, "fails")


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from kubernetes import client, config
    from iadeep.dev import Node
    args = json.loads(sys.argv[1])
    node = Node(server=args["server"], pki_dir=Path(args["pki"]), admin_kubeconfig=Path(args["kubeconfig"]),
                workdir=Path(args["workdir"]), log_dir=Path(args["logs"]), name=args["name"])
    node.start()
    image = node.busybox_image()
    core = client.CoreV1Api(config.new_client_from_config(config_file=args["kubeconfig"]))
    core.create_namespaced_pod(args["namespace"], {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
        "spec": {"nodeName": args["name"], "hostNetwork": True, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                 "command": ["/bin/sleep", "3600"]}]}})
    while core.read_namespaced_pod("sleeper", args["namespace"]).status.phase != "Running":
        time.sleep(0.2)
    print(json.dumps({"cgroup": node.cgroup, "kubelet": str(node.paths.kubelet_root)}), flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.parametrize("how", ["stop", "sigkill"])
def test_teardown_leaves_no_process_mount_or_cgroup(
    how: str, control_plane: ControlPlane, node_binaries, k8s_client, k8s_namespace, tmp_path: Path
) -> None:
    """A second node runs a sleeping container (service-account token mounted, overlay root
    filesystem), then goes away: by ``stop()``, or by SIGKILL of the Python process that
    started it (its reaper cleans up). Nothing of it may remain."""
    assert control_plane.workdir is not None and control_plane.pki is not None
    name = f"teardown-{how}"
    workdir = control_plane.workdir / f"node-{name}"
    core = client.CoreV1Api(k8s_client)
    args = {
        "server": control_plane.server, "pki": str(control_plane.pki.dir), "kubeconfig": str(control_plane.kubeconfig),
        "workdir": str(workdir), "logs": str(control_plane.log_dir), "name": name, "namespace": k8s_namespace,
    }  # fmt: skip
    if how == "stop":
        node = Node(
            server=args["server"], pki_dir=control_plane.pki.dir, admin_kubeconfig=control_plane.kubeconfig,
            workdir=workdir, log_dir=control_plane.log_dir, name=name, binaries=node_binaries,
        ).start()  # fmt: skip
        image = node.busybox_image()
        core.create_namespaced_pod(k8s_namespace, host_pod("sleeper", image, ["/bin/sleep", "3600"], node=name))
        wait_phase(core, k8s_namespace, "sleeper", {"Running"})
        cgroup, kubelet = node.cgroup, node.paths.kubelet_root
        linked = (workdir / "kubelet").resolve()
        before = leftovers(workdir, cgroup, kubelet)
        node.stop()
    else:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(args)], stdout=subprocess.PIPE, text=True,
            stderr=open(tmp_path / "child.log", "w"),  # noqa: SIM115
        )  # fmt: skip
        line = child.stdout.readline() if child.stdout else ""
        if not line:
            child.wait(10)
            pytest.fail(f"the child never got its node up:\n{(tmp_path / 'child.log').read_text()[-4000:]}")
        cgroup, kubelet = json.loads(line)["cgroup"], Path(json.loads(line)["kubelet"])
        linked = (workdir / "kubelet").resolve()
        before = leftovers(workdir, cgroup, kubelet)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        wait_for(
            lambda: leftovers(workdir, cgroup, kubelet),
            lambda left: not any(left.values()),
            timeout=60,
            what="the reaper's cleanup after SIGKILL",
        )
    # The node really had something to clean: a shim, the container, its mounts and cgroups.
    assert any("containerd-shim-runc-v2" in cmd for _pid, cmd in before["processes"]), before
    assert before["cgroup_pids"] and before["mounts"] and before["cgroups"], before
    # pytest's folders are long: the kubelet ran in a short folder of its own (its sockets must fit
    # a unix socket path), reached through <workdir>/kubelet; it had the token's mount, and is gone
    assert len(str(kubelet)) <= KUBELET_ROOT_MAX < len(str(workdir / "kubelet")) and linked == kubelet
    assert before["kubelet_dir"] == [str(kubelet)] and any(m.startswith(str(kubelet)) for m in before["mounts"]), before
    assert leftovers(workdir, cgroup, kubelet) == {"processes": [], "cgroup_pids": [], "mounts": [], "cgroups": [],
                                                   "log_links": [], "kubelet_dir": []}
    assert not cgroup_pids(cgroup) and not mounts_under(workdir)
    assert str(KUBELET_DEVICE_PLUGINS) not in _host_mount_points()  # bound only in the node's namespace
    assert not processes_mentioning(f"-id {cgroup}")
    # Its Node object goes too (stop() deletes it; after a SIGKILL nobody did): the session's later
    # modules roll DaemonSets out onto the real nodes.
    if how == "sigkill":
        core.delete_node(name)


def _host_mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return {line.split()[4] for line in f}
