"""Helpers for the extender tests: Kubernetes objects as kube-scheduler sends them, a uvicorn server
in a thread or a subprocess, and polling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from iadeep.testing import free_port  # noqa: F401  (re-exported for the tests)
from iadeep.state import GpuInfo, NodeInventory
from iadeep.testing import wait_for  # noqa: F401  (re-exported for the tests)

T = TypeVar("T")

GPU_MEM = "iadeep.io/gpu-mem"
GPU_COUNT = "iadeep.io/gpu-count"
SCHEDULER = "iadeep-scheduler"
_SERIALISER = ApiClient()


def wire(obj: Any) -> Any:
    """``obj`` as JSON-ready data, the way a Kubernetes object travels on the wire."""
    return _SERIALISER.sanitize_for_serialization(obj)


def gpu_pod(name: str, *, mem: int | str | None, gpus: int | None = None, namespace: str = "default",
            uid: str | None = None, annotations: Mapping[str, str] | None = None,
            scheduler: str | None = SCHEDULER) -> client.V1Pod:
    """A ``V1Pod`` asking for ``mem`` GiB of GPU memory (extended resources: limits == requests)."""
    res: dict[str, str] = {}
    if mem is not None:
        res[GPU_MEM] = str(mem)
    if gpus is not None:
        res[GPU_COUNT] = str(gpus)
    container = client.V1Container(
        name="main", image="registry.invalid/iadeep/trainer:fake",
        resources=client.V1ResourceRequirements(limits=dict(res), requests=dict(res, cpu="100m")))
    return client.V1Pod(
        api_version="v1", kind="Pod",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=dict(annotations or {}) or None),
        spec=client.V1PodSpec(containers=[container], restart_policy="Never", scheduler_name=scheduler))


def node(name: str, *, gpus: int = 2, gpu_mem_gib: int = 16) -> client.V1Node:
    """A ``V1Node`` advertising ``gpus * gpu_mem_gib`` units of GPU memory."""
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_MEM: str(gpus * gpu_mem_gib), GPU_COUNT: str(gpus)}
    return client.V1Node(
        api_version="v1", kind="Node",
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity))


def extender_args(pod: client.V1Pod, nodes: list[client.V1Node] | list[str], *, cache_capable: bool = True) -> dict:
    """An ``ExtenderArgs`` body as kube-scheduler builds it."""
    names = [n if isinstance(n, str) else n.metadata.name for n in nodes]
    if cache_capable:
        return {"Pod": wire(pod), "Nodes": None, "NodeNames": names}
    objs = [n if not isinstance(n, str) else node(n) for n in nodes]
    return {"Pod": wire(pod), "Nodes": wire(client.V1NodeList(items=objs)), "NodeNames": None}




class ThreadServer:
    """uvicorn serving ``app`` on 127.0.0.1:``port`` in a daemon thread (lifespan included)."""

    def __init__(self, app: Any, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on", access_log=False))
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


class ProcessServer:
    """``python -m iadeep.extender serve`` in a subprocess (its own process group), configured by env."""

    def __init__(self, env: Mapping[str, str], port: int, log: Path):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **env, "IADEEP_EXTENDER_PORT": str(port), "IADEEP_EXTENDER_HOST": "127.0.0.1"}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> ProcessServer:  # two workers import slowly on a loaded 2-core machine
        fh = self.log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "iadeep.extender", "serve"], env=self.env, stdout=fh,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"extender exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"extender not ready after {timeout}s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM to the server process (not its group: it stops its own workers); its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL, no shutdown handlers (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def rss_bytes(self) -> int:
        import psutil

        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def __enter__(self) -> ProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


REPO = Path(__file__).resolve().parents[2]
SCHEDULER_CONFIG = REPO / "k8s" / "extender" / "kube-scheduler-config.control-plane.yaml"


def closed_port_kubeconfig(path: Path, scheme: str = "https") -> Path:
    """Write a kubeconfig at ``path`` whose API server is a closed port on 127.0.0.1 (loading it
    calls nothing; every request fails to connect); returns ``path``."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"{scheme}://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    return path


def publish(store: Any, names: list[str], *, gpus: int = 2, gpu_mem_gib: float = 16.0) -> None:
    """Publish a GPU inventory per node, as the device plugin would."""
    for n in names:
        store.put_inventory(NodeInventory(n, tuple(GpuInfo(i, float(gpu_mem_gib), f"GPU-{n}-{i}") for i in range(gpus))))


def scheduler_config(port: int) -> dict[str, Any]:
    """The shipped control-plane KubeSchedulerConfiguration, pointed at ``127.0.0.1:port``."""
    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    for ext in config["extenders"]:
        ext["urlPrefix"] = f"http://127.0.0.1:{port}/iadeep"
    return config


def view_meaning(base: Any) -> tuple:
    """What a :class:`~iadeep.extender.ViewBase` means, independent of handle numbering, slot
    width and dead job rows: per GPU its node, index, used memory, pods and their job rows."""
    gpus = []
    for g in range(base.n_gpus):
        pods = tuple(base.pods[h] for h in base.slots[g] if h >= 0)
        rows = tuple((int(base.job_type[base.handles[p]]), int(base.job_num_gpus[base.handles[p]]),
                      float(base.job_work_left_s[base.handles[p]])) for p in pods)
        gpus.append((base.node_names[base.gpu_node[g]], int(base.gpu_local_index[g]),
                     float(base.gpu_mem_used_gib[g]), pods, rows))
    return tuple(gpus)
