"""A real, throw-away Kubernetes control plane on loopback, with kwok GPU nodes.

etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok, each a child process in
its own process group, every port a random free one on 127.0.0.1, every file under one working
directory (a temporary one by default)::

    with ControlPlane(nodes=2, gpus_per_node=4, gpu_mem_gib=32) as cp:
        core = kubernetes.client.CoreV1Api(cp.api_client())
        ...

Teardown stops the components in reverse order (SIGTERM to the group, then SIGKILL), from
``__exit__``, from ``atexit`` if the caller never got there, and — through ``PR_SET_PDEATHSIG`` —
when the Python process dies without running either.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iadeep.dev._binaries import Binaries, find_binaries
from iadeep.dev._errors import ControlPlaneError
from iadeep.dev._kwok import KWOK_NODE_SELECTOR, NodeSpec, gpu_nodes, kwok_config_yaml
from iadeep._host import etcd_argv, free_port
from iadeep._host import Proc, spawn

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from iadeep.dev._pki import Pki

# Address ranges the control plane must be configured with; nothing connects to them. The API
# server runs with ``--endpoint-reconciler-type=none`` (the ``kubernetes`` Service has no
# endpoints), nothing routes the service range, and every pod on the real node is a hostNetwork pod
# given ``KUBERNETES_SERVICE_HOST=127.0.0.1`` (k8s/local; tests/node/test_node_units.py checks that
# the rendered rollout names no address outside loopback). SERVICE_IP is only a SAN of the API
# server's certificate (kube-apiserver's default for the first address of the range).
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
SCHEDULER_CONFIG_API = "kubescheduler.config.k8s.io/v1"
GANG_FEATURE_GATES: Mapping[str, bool] = {"GenericWorkload": True, "GangScheduling": True, "WorkloadWithJob": True}
"""Kubernetes 1.36's alpha gang scheduling, on by default on the local control plane: the
``scheduling.k8s.io/v1alpha2`` Workload and PodGroup API (``GenericWorkload``), the Job
controller's PodGroup for an Indexed Job of ``completions == parallelism > 1``
(``WorkloadWithJob``), and kube-scheduler's ``GangScheduling`` plugin (PreEnqueue until the
group's members exist, Permit until all are assumed), in front of the extender's own gangs
(docs/design/2026-12-04-live-gangs.md)."""
_GATED = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

SchedulerConfig = str | os.PathLike[str] | Mapping[str, Any] | None


def _kubeconfig(server: str, ca: Path, cert: Path, key: Path, *, embed: bool, user: str) -> dict[str, Any]:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cluster: dict[str, Any] = {"server": server}
    auth: dict[str, Any] = {}
    if embed:
        cluster["certificate-authority-data"] = b64(ca)
        auth = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    else:
        cluster["certificate-authority"] = str(ca)
        auth = {"client-certificate": str(cert), "client-key": str(key)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "iadeep-dev", "cluster": cluster}],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": "iadeep-dev", "context": {"cluster": "iadeep-dev", "user": user}}],
        "current-context": "iadeep-dev",
        "preferences": {},
    }


def load_scheduler_config(config: SchedulerConfig) -> dict[str, Any]:
    """A KubeSchedulerConfiguration as a dict, from a path, YAML text or a mapping (``None``: defaults)."""
    import yaml

    if config is None:
        data: dict[str, Any] = {}
    elif isinstance(config, Mapping):
        data = json.loads(json.dumps(dict(config)))  # deep copy
    else:
        text = str(config)
        path = Path(text)
        if isinstance(config, os.PathLike) or ("\n" not in text and path.exists()):
            text = path.read_text()
        data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ControlPlaneError("the scheduler configuration must be a YAML mapping")
    data.setdefault("apiVersion", SCHEDULER_CONFIG_API)
    data.setdefault("kind", "KubeSchedulerConfiguration")
    return data


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback.

    Parameters:
        nodes, gpus_per_node, gpu_mem_gib: fake GPU nodes created at start (see :meth:`add_nodes`).
        scheduler_config: a KubeSchedulerConfiguration (path, YAML text or mapping); its
            ``clientConnection.kubeconfig`` is set to the cluster's, and leader election is off
            unless the file says otherwise.
        workdir: where certificates, data, logs and kubeconfigs go; a temporary directory by
            default, deleted on stop unless ``keep_workdir``.
        extra_args: extra command-line flags per component, e.g.
            ``{"kube-apiserver": ["--v=2"]}``.
        die_with_parent: the kernel kills the components when the thread that started them
            exits (Linux ``PR_SET_PDEATHSIG``): call :meth:`start` from the main thread or one
            that outlives the cluster. False only for ``iadeep dev cluster up`` (detached).
        ready_timeout: seconds to wait for every component and node to be ready.
        feature_gates: ``--feature-gates`` of kube-apiserver, kube-controller-manager and
            kube-scheduler (default :data:`GANG_FEATURE_GATES`; ``{}``: none); with
            ``GenericWorkload`` on, kube-apiserver also serves ``scheduling.k8s.io/v1alpha2``.
    """

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

    def __init__(
        self,
        *,
        nodes: int = 2,
        gpus_per_node: int = 4,
        gpu_mem_gib: int = 32,
        scheduler_config: SchedulerConfig = None,
        workdir: str | os.PathLike[str] | None = None,
        keep_workdir: bool = False,
        extra_args: Mapping[str, Iterable[str]] | None = None,
        die_with_parent: bool = True,
        ready_timeout: float = 60.0,
        binaries: Binaries | None = None,
        feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        self.feature_gates = dict(GANG_FEATURE_GATES if feature_gates is None else feature_gates)
        self.initial_nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.gpu_mem_gib = gpu_mem_gib
        self._scheduler_config = load_scheduler_config(scheduler_config)
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self.keep_workdir = keep_workdir or workdir is not None
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.die_with_parent = die_with_parent
        self.ready_timeout = ready_timeout
        self._binaries = binaries
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.workdir: Path | None = None
        self.pki: Pki | None = None
        self.timings: dict[str, float] = {}
        self._api_client: ApiClient | None = None
        self._atexit: Callable[[], None] | None = None
        self._node_seq = 0
        # Called first by stop(), last registered first: real nodes (iadeep.dev.Node) stop here,
        # before the apiserver goes and before the working directory is deleted.
        self.stop_hooks: list[Callable[[], None]] = []

    # -- public API ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (credentials embedded), usable by kubectl and the Python client."""
        return self._dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def scheduler_config_path(self) -> Path:
        return self._dir / "kube-scheduler.yaml"

    @property
    def log_dir(self) -> Path:
        return self._dir / "logs"

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        from kubernetes import config as k8s_config

        return k8s_config.new_client_from_config(config_file=str(self.kubeconfig))

    def start(self) -> ControlPlane:
        if self.procs:
            raise ControlPlaneError("already started")
        t0 = time.monotonic()
        binaries = self._binaries or find_binaries()
        self._binaries = binaries
        if self._workdir_arg is not None:
            self._workdir_arg.mkdir(parents=True, exist_ok=True)
            self.workdir = self._workdir_arg
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="iadeep-cp-"))
        self._atexit = self.stop
        atexit.register(self._atexit)
        try:
            self._start(binaries, t0)
        except BaseException:
            self.stop()
            raise
        self.timings["ready"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every component (reverse start order) and delete a temporary workdir. Idempotent."""
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
        while self.stop_hooks:
            with contextlib.suppress(Exception):
                self.stop_hooks.pop()()
        for name in reversed(list(self.procs)):
            with contextlib.suppress(Exception):
                self.procs[name].stop()
        self.procs.clear()
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def detach(self) -> dict[str, Any]:
        """Leave the components running after this object is gone; returns what ``cluster down``
        needs to stop them later (pids are process-group ids)."""
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        self.keep_workdir = True
        return self.state()

    def state(self) -> dict[str, Any]:
        return {
            "workdir": str(self._dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ports": dict(self.ports),
            "processes": {n: {"pid": p.pid, "exe": p.argv[0]} for n, p in self.procs.items()},
            "scheduler_config": str(self.scheduler_config_path),
            "timings": dict(self.timings),
        }

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_nodes(
        self,
        count: int | Iterable[NodeSpec] = 1,
        *,
        gpus: int | None = None,
        gpu_mem_gib: int | None = None,
        prefix: str = "gpu-node-",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 30.0,
    ) -> list[str]:
        """Create fake GPU nodes (a count of identical ones, or explicit :class:`NodeSpec`s) that
        kwok manages; with ``wait``, return once they are Ready. Returns the node names."""
        from kubernetes import client

        if isinstance(count, int):
            specs = gpu_nodes(
                count,
                prefix=prefix,
                start=self._node_seq,
                gpus=self.gpus_per_node if gpus is None else gpus,
                gpu_mem_gib=self.gpu_mem_gib if gpu_mem_gib is None else gpu_mem_gib,
                labels=labels,
                annotations=annotations,
            )
            self._node_seq += count
        else:
            specs = list(count)
        core = client.CoreV1Api(self._client())
        for spec in specs:
            core.create_node(body=spec.manifest())
        names = [s.name for s in specs]
        if wait:
            self.wait_nodes_ready(names, timeout=timeout)
        return names

    def wait_nodes_ready(self, names: Iterable[str], timeout: float = 30.0) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self._client())
        pending = set(names)

        def ready() -> bool:
            for node in core.list_node(label_selector="type=kwok").items:
                conds = {c.type: c.status for c in (node.status.conditions or [])}
                if conds.get("Ready") == "True":
                    pending.discard(node.metadata.name)
            return not pending

        self._wait(ready, timeout, f"nodes Ready (still waiting for {sorted(pending)})", "kwok")

    def restart_scheduler(self, scheduler_config: SchedulerConfig = None) -> None:
        """Restart kube-scheduler, optionally with a new KubeSchedulerConfiguration."""
        if scheduler_config is not None:
            self._scheduler_config = load_scheduler_config(scheduler_config)
        proc = self.procs.pop("kube-scheduler", None)
        if proc is not None:
            proc.stop()
        assert self._binaries is not None
        self._start_scheduler(self._binaries)
        self._wait_healthz("kube-scheduler", self.ready_timeout)

    def create_namespace(self, name: str, timeout: float = 30.0) -> None:
        """Create a namespace and wait for its ``default`` service account (pods need it)."""
        from kubernetes import client

        core = client.CoreV1Api(self._client())
        core.create_namespace(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self._wait_service_account(name, timeout)

    # -- start-up -------------------------------------------------------------------------------

    @property
    def _dir(self) -> Path:
        if self.workdir is None:
            raise ControlPlaneError("the control plane is not started")
        return self.workdir

    def _client(self) -> ApiClient:
        if self._api_client is None:
            self._api_client = self.api_client()
        return self._api_client

    def _mark(self, what: str, t0: float) -> None:
        self.timings[what] = round(time.monotonic() - t0, 3)

    def _start(self, binaries: Binaries, t0: float) -> None:
        from iadeep.dev._pki import generate

        d = self._dir
        for name in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            self.ports[name] = free_port()
        self.pki = generate(d / "pki", service_ip=SERVICE_IP)
        self._write_kubeconfigs()
        self._mark("pki", t0)

        self._start_etcd(binaries)
        self._wait_http(
            f"http://127.0.0.1:{self.ports['etcd']}/health", "etcd", lambda body: b'"health":"true"' in body
        )
        self._mark("etcd", t0)

        self._start_apiserver(binaries)
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", lambda body: body.strip() == b"ok")
        self._mark("kube-apiserver", t0)

        self._start_controller_manager(binaries)
        self._start_scheduler(binaries)
        self._start_kwok(binaries)
        self._wait_healthz("kube-controller-manager", self.ready_timeout)
        self._wait_healthz("kube-scheduler", self.ready_timeout)
        self._mark("controllers", t0)
        self._wait_service_account("default", self.ready_timeout)
        self._mark("service-account", t0)
        if self.initial_nodes:
            self.add_nodes(self.initial_nodes, timeout=self.ready_timeout)
        self._mark("nodes", t0)

    def _write_kubeconfigs(self) -> None:
        import yaml

        assert self.pki is not None
        server = self.server
        admin = self.pki.clients["admin"]
        kc = _kubeconfig(server, self.pki.ca_cert, admin.cert, admin.key, embed=True, user="admin")
        self.kubeconfig.write_text(yaml.safe_dump(kc, sort_keys=False))
        self.kubeconfig.chmod(0o600)
        for ident, creds in self.pki.clients.items():
            if ident == "admin":
                continue
            kc = _kubeconfig(server, self.pki.ca_cert, creds.cert, creds.key, embed=False, user=ident)
            (self._dir / f"{ident}.kubeconfig").write_text(yaml.safe_dump(kc, sort_keys=False))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        gates = self.feature_gates if name in _GATED else {}
        if gates:
            argv = argv + ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))]
        if name == "kube-apiserver" and gates.get("GenericWorkload"):
            argv = argv + ["--runtime-config=scheduling.k8s.io/v1alpha2=true"]
        argv = argv + self.extra_args.get(name, [])
        self.procs[name] = spawn(
            name, argv, self.log_dir, env=env, cwd=self._dir, die_with_parent=self.die_with_parent
        )

    def _start_etcd(self, b: Binaries) -> None:
        self._spawn(
            "etcd",
            etcd_argv(b.etcd, self._dir / "etcd", client_port=self.ports["etcd"], peer_port=self.ports["etcd-peer"]),
        )

    def _start_apiserver(self, b: Binaries) -> None:
        assert self.pki is not None
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(b.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['kube-apiserver']}",
                f"--tls-cert-file={p.serving_cert}",
                f"--tls-private-key-file={p.serving_key}",
                f"--client-ca-file={p.ca_cert}",
                f"--service-account-key-file={p.sa_pub}",
                f"--service-account-signing-key-file={p.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # The 'kubernetes' service's Endpoints may not point at a loopback address.
                "--endpoint-reconciler-type=none",
                # Real nodes (iadeep.dev.Node): reach kubelets at their InternalIP (127.0.0.1,
                # never a hostname that could resolve to the machine's interface), verify them
                # against the cluster CA and authenticate with a certificate of it.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={p.ca_cert}",
                f"--kubelet-client-certificate={p.clients['kube-apiserver-kubelet-client'].cert}",
                f"--kubelet-client-key={p.clients['kube-apiserver-kubelet-client'].key}",
                "--profiling=false",
                f"--cert-dir={self._dir / 'pki'}",
                "--v=1",
            ],
        )

    def _start_controller_manager(self, b: Binaries) -> None:
        assert self.pki is not None
        kc = str(self._dir / "kube-controller-manager.kubeconfig")
        self._spawn(
            "kube-controller-manager",
            [
                str(b.kube_controller_manager),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-controller-manager']}",
                f"--cert-dir={self._dir / 'pki' / 'kube-controller-manager'}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cluster-cidr={POD_CIDR}",
                "--leader-elect=false",
                "--profiling=false",
                # no client-side rate limit (kwokctl's ``disableQPSLimits`` values): at the default
                # 20 requests/s the Job controller created the 1,000-job benchmark's pods over 8 min
                "--kube-api-qps=5000",
                "--kube-api-burst=10000",
                "--v=1",
            ],
        )

    def _start_scheduler(self, b: Binaries) -> None:
        import yaml

        kc = str(self._dir / "kube-scheduler.kubeconfig")
        config = json.loads(json.dumps(self._scheduler_config))
        config.setdefault("clientConnection", {})["kubeconfig"] = kc
        config.setdefault("leaderElection", {}).setdefault("leaderElect", False)
        self.scheduler_config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn(
            "kube-scheduler",
            [
                str(b.kube_scheduler),
                f"--config={self.scheduler_config_path}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-scheduler']}",
                f"--cert-dir={self._dir / 'pki' / 'kube-scheduler'}",
                "--v=1",
            ],
        )

    def _start_kwok(self, b: Binaries) -> None:
        config = self._dir / "kwok.yaml"
        config.write_text(kwok_config_yaml())
        kwok_home = self._dir / "kwok-home"  # kwok also reads ~/.kwok/kwok.yaml: keep it private
        kwok_home.mkdir(exist_ok=True)
        env = dict(os.environ, HOME=str(kwok_home))
        env.pop("KUBECONFIG", None)
        self._spawn(
            "kwok",
            [
                str(b.kwok),
                f"--config={config}",
                f"--kubeconfig={self._dir / 'kwok.kubeconfig'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",  # the fake nodes' pods report it as their hostIP: loopback, as everything here
                "--node-lease-duration-seconds=40",
            ],
            env=env,
        )

    # -- waiting --------------------------------------------------------------------------------

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if not proc.alive():
                raise ControlPlaneError(
                    f"{name} exited with code {proc.popen.returncode} (log {proc.log}):\n{proc.tail()}"
                )

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str, component: str) -> None:
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        delay = 0.05
        while True:
            self._check_alive()
            try:
                if cond():
                    return
            except Exception as exc:  # noqa: BLE001 - anything is "not ready yet" until the deadline
                last_err = exc
            if time.monotonic() >= deadline:
                proc = self.procs.get(component)
                tail = proc.tail() if proc else ""
                raise ControlPlaneError(
                    f"timed out after {timeout:.0f}s waiting for {what}"
                    + (f" (last error: {last_err})" if last_err else "")
                    + (f"\n--- {proc.log} ---\n{tail}" if proc else "")
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _ssl_context(self, verify: bool) -> ssl.SSLContext:
        assert self.pki is not None
        if not verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        return ssl.create_default_context(cafile=str(self.pki.ca_cert))

    def _wait_http(
        self, url: str, component: str, ok: Callable[[bytes], bool], *, verify: bool = True
    ) -> None:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=self._ssl_context(verify)),
        )

        def check() -> bool:
            try:
                with opener.open(url, timeout=2) as resp:
                    return resp.status == 200 and ok(resp.read())
            except urllib.error.HTTPError:
                return False

        self._wait(check, self.ready_timeout, f"{component} at {url}", component)

    def _wait_healthz(self, component: str, timeout: float) -> None:
        # These serve a self-signed certificate of their own; /healthz is open to anonymous users.
        url = f"https://127.0.0.1:{self.ports[component]}/healthz"
        self._wait_http(url, component, lambda body: body.strip() == b"ok", verify=False)

    def _wait_service_account(self, namespace: str, timeout: float) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self._client())

        def exists() -> bool:
            core.read_namespaced_service_account("default", namespace)
            return True

        self._wait(exists, timeout, f"service account {namespace}/default", "kube-controller-manager")

