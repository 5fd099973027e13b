"""``iadeep deviceplugin serve`` as a process against a real etcd and the kubelet peer: registers
both resources, publishes the inventory, is ready; refuses NVML-less hosts without the emulated
backend in one line."""

from __future__ import annotations

import subprocess

import yaml

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
    kubeconfig(tmp_path / "kubeconfig")
    dp = DevicePluginProcess("cli-node", socket_dir, tmp_path / "kubeconfig", etcd_settings, count=3, mem_gib=8)
    dp.start()
    try:
        names = {kubelet.registration().resource_name for _ in range(2)}
        assert names == {"iadeep.io/gpu-mem", "iadeep.io/gpu-count"}
        inv = etcd_store.inventories()["cli-node"]
        assert [(g.index, g.mem_gib) for g in inv.gpus] == [(0, 8.0), (1, 8.0), (2, 8.0)]
        assert "EMULATED GPUs" in dp.log()
    finally:
        dp.kill()


def test_nvml_missing_is_a_one_line_error(socket_dir, tmp_path) -> None:
    kubeconfig(tmp_path / "kubeconfig")
    r = subprocess.run([IADEEP, "deviceplugin", "serve", "--node", "n", "--socket-dir", str(socket_dir),
                        "--kubeconfig", str(tmp_path / "kubeconfig")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "NVML unavailable" in r.stderr and "--backend emulated" in r.stderr and "Traceback" not in r.stderr
