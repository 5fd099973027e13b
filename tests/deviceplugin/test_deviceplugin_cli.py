"""``iadeep deviceplugin serve`` as a process against a real etcd and the kubelet peer: registers
both resources, publishes the inventory, is ready; refuses NVML-less hosts without the emulated
backend in one line."""

from __future__ import annotations

import signal
import subprocess

import httpx
import yaml

from iadeep._prometheus import samples
from iadeep.testing import free_port
from iadeep.testing.services import IADEEP, DevicePluginProcess


def kubeconfig(path) -> None:
    """A kubeconfig naming a loopback API server (only Allocate would call it)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))


def test_serve_registers_and_publishes(kubelet, socket_dir, etcd_settings, etcd_store, tmp_path) -> None:
    """... and SIGTERM (the kubelet stopping the pod) runs its shutdown: its sockets are removed and
    it exits 0 (uvicorn re-raised the signal after its own shutdown: exit 143, sockets left)."""
    kubeconfig(tmp_path / "kubeconfig")
    dp = DevicePluginProcess("cli-node", socket_dir, tmp_path / "kubeconfig", etcd_settings, count=3, mem_gib=8,
                             env={"IADEEP_DEVICEPLUGIN_EMULATED__MODEL": "V100M32"})
    dp.start()
    try:
        names = {kubelet.registration().resource_name for _ in range(2)}
        assert names == {"iadeep.io/gpu-mem", "iadeep.io/gpu-count"}
        inv = etcd_store.inventories()["cli-node"]
        # the model too: the extender matches it against a pod's iadeep.io/gpu-models (it was dropped)
        assert [(g.index, g.mem_gib, g.model) for g in inv.gpus] == [(0, 8.0, "V100M32"), (1, 8.0, "V100M32"), (2, 8.0, "V100M32")]
        assert "EMULATED GPUs" in dp.log()
        ours = {"iadeep-gpu-mem.sock", "iadeep-gpu-count.sock"}
        assert ours <= {p.name for p in socket_dir.iterdir()}
        # the process's own /metrics, on its health port
        got = samples(httpx.get(dp.url + "/metrics", timeout=10).text)
        assert got[("iadeep_deviceplugin_registrations_total", (("outcome", "ok"),))] == 1
        assert got[("iadeep_deviceplugin_gpus", ())] == 3
        assert got[("iadeep_deviceplugin_devices", (("health", "Healthy"), ("resource", "iadeep.io/gpu-mem")))] == 3 * 8
        assert dp.kill(signal.SIGTERM) == 0, dp.log()[-2000:]
        assert not ours & {p.name for p in socket_dir.iterdir()}
        assert "Traceback" not in dp.log()
    finally:
        dp.kill()


def test_the_cluster_s_model_name_overrides_the_backend_s(kubelet, socket_dir, etcd_settings, etcd_store, tmp_path) -> None:
    """``--gpu-model``: NVML's product name ("Tesla V100-SXM2-32GB") is not how a cluster names
    its models in ``iadeep.io/gpu-models``; the operator names them."""
    kubeconfig(tmp_path / "kubeconfig")
    dp = DevicePluginProcess("named-node", socket_dir, tmp_path / "kubeconfig", etcd_settings, count=1, mem_gib=8,
                             env={"IADEEP_DEVICEPLUGIN_GPU_MODEL": "T4"})
    dp.start()
    try:
        assert [g.model for g in etcd_store.inventories()["named-node"].gpus] == ["T4"]
    finally:
        dp.kill()


def test_nvml_missing_is_a_one_line_error(socket_dir, tmp_path) -> None:
    kubeconfig(tmp_path / "kubeconfig")
    r = subprocess.run([IADEEP, "deviceplugin", "serve", "--node", "n", "--socket-dir", str(socket_dir),
                        "--kubeconfig", str(tmp_path / "kubeconfig")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "NVML unavailable" in r.stderr and "--backend emulated" in r.stderr and "Traceback" not in r.stderr


def test_a_node_name_kubernetes_would_refuse_is_a_one_line_error(socket_dir, tmp_path) -> None:
    r = subprocess.run([IADEEP, "deviceplugin", "serve", "--node", "bad/node", "--socket-dir", str(socket_dir),
                        "--backend", "emulated", "--log-level", "info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--node / IADEEP_DEVICEPLUGIN_NODE: 'bad/node' is not a Kubernetes node name" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([IADEEP, "deviceplugin", "serve", "--node", "n", "--socket-dir", str(socket_dir),
                        "--backend", "emulated", "--log-level", "loud"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--log-level / IADEEP_DEVICEPLUGIN_LOG_LEVEL: not a log level" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_kubeconfig_that_is_not_yaml_is_a_one_line_error(socket_dir, tmp_path) -> None:
    bad = tmp_path / "badkube"
    bad.write_text("apiVersion: [\n")
    r = subprocess.run([IADEEP, "deviceplugin", "serve", "--node", "n", "--socket-dir", str(socket_dir), "--backend", "emulated",
                        "--kubeconfig", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]  # after the emulated backend's warning
    assert last.startswith(f"iadeep deviceplugin: cannot load the Kubernetes configuration (kubeconfig {bad}): while parsing")
    assert last.endswith("set --kubeconfig (IADEEP_DEVICEPLUGIN_KUBE__KUBECONFIG) or --in-cluster")
