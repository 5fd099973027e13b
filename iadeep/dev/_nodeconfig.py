"""Configuration files of the local real node: containerd's, the kubelet's and the CNI network.

Everything listens on 127.0.0.1 or on unix sockets below the node's directory; nothing uses a
fixed port or a global path that a second node on the same machine would share (except the
kubelet's hard-coded ``/var/log/containers`` links, removed at teardown).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CNI_NETWORK",
    "KUBELET_DIR_PREFIX",
    "KUBELET_LINK",
    "UNIX_SOCKET_PATH_MAX",
    "NodePaths",
    "cni_conflist",
    "containerd_config",
    "kubelet_config",
]

# Pods use hostNetwork. The CRI plugin still reports NetworkReady=false (and the kubelet keeps
# the node NotReady) until it has loaded a CNI network, so the node gets one network made of
# the loopback plugin alone: nothing outside 127.0.0.0/8 is ever configured. A pod without
# hostNetwork would only get "lo", and no pod address.
CNI_NETWORK = "iadeep-loopback"


# A unix socket's path holds at most 107 bytes (``sun_path`` of ``struct sockaddr_un``, Linux
# unix(7)). The kubelet dials and creates sockets below its root directory (device plugins'
# ``device-plugins/<name>.sock``, ``pod-resources/<10 digits>``, ``plugins_registry/...``), so that
# directory must stay short whatever the node's own directory is (pytest's temporary folders,
# a user's ``--workdir``): see ``NodePaths.kubelet_dir``.
UNIX_SOCKET_PATH_MAX = 107
KUBELET_LINK = "kubelet"
# the name of such a short folder starts with this; teardown removes only a folder so named
KUBELET_DIR_PREFIX = "iadeep-kubelet-"


@dataclass(frozen=True)
class NodePaths:
    """Every file and directory of one node, below ``root``, except the kubelet's root directory
    when ``kubelet_dir`` is given: then ``<root>/kubelet`` is a symbolic link to it (made at start,
    followed by teardown) and the kubelet runs in the short ``kubelet_dir``, so that the sockets
    below it fit ``UNIX_SOCKET_PATH_MAX`` (the device plugins' sockets are dialled there)."""

    root: Path
    kubelet_dir: Path | None = None

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def runc_root(self) -> Path:
        return self.containerd_state / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def kubelet_root(self) -> Path:
        return self.kubelet_dir if self.kubelet_dir is not None else self.root / KUBELET_LINK

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def device_plugins(self) -> Path:
        """The kubelet's device-plugin directory (``kubelet.sock`` is created here)."""
        return self.kubelet_root / "device-plugins"

    @property
    def images(self) -> Path:
        return self.root / "images"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _toml(tables: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, body in tables.items():
        if name:
            lines.append(f"\n[{name}]")
        lines += [f"  {k} = {_toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def containerd_config(paths: NodePaths, *, runc: Path, cni_bin_dir: Path, sandbox_image: str) -> str:
    """containerd 1.6 configuration (format version 2) for one node.

    The CRI plugin: ``sandbox_image`` (imported locally, never pulled), stream server on
    127.0.0.1 with a kernel-chosen port, runc through the v2 shim with the cgroupfs driver (the
    kubelet's ``cgroupDriver: cgroupfs``), the loopback-only CNI network. The TCP debug and
    metrics endpoints are off.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return _toml(
        {
            "": {
                "version": 2,
                "root": str(paths.containerd_root),
                "state": str(paths.containerd_state),
                "disabled_plugins": [
                    "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp",
                ],
            },
            "grpc": {"address": str(paths.containerd_socket)},
            "ttrpc": {"address": ""},
            "debug": {"address": "", "level": "info"},
            "metrics": {"address": ""},
            'plugins."io.containerd.internal.v1.opt"': {"path": str(paths.root / "opt")},
            cri: {
                "sandbox_image": sandbox_image,
                "stream_server_address": "127.0.0.1",
                "stream_server_port": "0",
                "enable_selinux": False,
                "restrict_oom_score_adj": True,  # this VM forbids lowering oom_score_adj (runc init would fail)
                "max_container_log_line_size": 16384,
            },
            f"{cri}.containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc"},
            f"{cri}.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
            f"{cri}.containerd.runtimes.runc.options": {
                "BinaryName": str(runc),
                "Root": str(paths.runc_root),
                "SystemdCgroup": False,
            },
            f"{cri}.cni": {"bin_dir": str(cni_bin_dir), "conf_dir": str(paths.cni_conf_dir), "max_conf_num": 1},
            f"{cri}.registry": {"config_path": ""},
        }
    )


def cni_conflist() -> str:
    """The one CNI network: the ``loopback`` plugin only (CNI spec 0.4.0 conflist)."""
    return json.dumps(
        {"cniVersion": "0.4.0", "name": CNI_NETWORK, "plugins": [{"type": "loopback"}]}, indent=2
    )


def kubelet_config(
    paths: NodePaths,
    *,
    port: int,
    healthz_port: int,
    ca_cert: Path,
    serving_cert: Path,
    serving_key: Path,
    cgroup_root: str,
    cgroup_v1: bool,
    max_pods: int = 32,
) -> dict[str, Any]:
    """KubeletConfiguration (``kubelet.config.k8s.io/v1beta1``) for one node.

    - serving on 127.0.0.1 only (``port``, ``healthzPort``; read-only port off), a serving
      certificate from the cluster CA, clients authenticated by that CA (the apiserver's
      kubelet-client certificate) and then allowed (a private, loopback-only CA);
    - ``cgroupDriver: cgroupfs`` with pods under ``cgroupRoot`` (the node's own cgroup);
    - ``failCgroupV1: false`` on a cgroup v1 host: Kubernetes 1.35+ refuses v1 otherwise;
    - pod logs and container runtime on paths below the node directory;
    - eviction thresholds low and image GC only near a full disk: a development node on a
      shared disk should neither evict its pods nor delete the locally imported images.
    """
    cfg: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "podLogsDir": str(paths.pod_logs),
        "volumePluginDir": str(paths.root / "volume-plugins"),
        "failSwapOn": False,
        "maxPods": max_pods,
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "registerNode": True,
    }
    if cgroup_v1:
        cfg["failCgroupV1"] = False
    return cfg
