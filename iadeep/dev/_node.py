"""A real node for the local control plane: containerd + runc + a kubelet, on loopback.

The kubelet (built from the control plane's ``k8s.io/kubernetes`` pins by ``make node``) joins
the cluster next to the kwok nodes, as ``system:node:<name>``, with ``--node-ip 127.0.0.1`` so
that the apiserver's calls to it (logs, exec) stay on loopback. containerd and runc are Debian's
(containerd 1.6 speaks CRI v1; kubelet 1.36 uses its own ``cgroupDriver`` since containerd 1.x
has no RuntimeConfig call). Pods must use ``hostNetwork: true``: the only CNI network is the
loopback plugin (see :mod:`iadeep.dev._nodeconfig`). Images are never pulled: the pod-sandbox
image and the test image are written here (:mod:`iadeep.dev._oci`), the services' images come
from ``make images`` and are imported with :meth:`Node.import_images`.

Everything is below one directory (by default ``<cluster>/node-<name>``), logs in the cluster's
``logs/`` (``kubelet-<name>.log``, ``containerd-<name>.log``). Teardown (:meth:`Node.stop`, the
control plane's stop, ``atexit``, or the reaper when the starting process is SIGKILLed) leaves no
process, mount or cgroup behind (:mod:`iadeep.dev._nodeclean`). Root is required.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iadeep.dev._binaries import NodeBinaries, find_node_binaries
from iadeep.dev._errors import ControlPlaneError
from iadeep.dev._nodeclean import cgroup_hierarchies, cgroup_v2, make_cgroup, teardown
from iadeep.dev._nodeconfig import (KUBELET_DIR_PREFIX, KUBELET_LINK, UNIX_SOCKET_PATH_MAX, NodePaths, cni_conflist,
                                    containerd_config, kubelet_config)
from iadeep.dev._oci import ImageFile, write_image_archive
from iadeep._host import Proc, spawn

if TYPE_CHECKING:
    from iadeep.dev._cluster import ControlPlane

__all__ = ["REAL_NODE_LABEL", "Node", "NodeError"]

log = logging.getLogger(__name__)

REAL_NODE_LABEL = "iadeep.io/real-node"
# Where every kubelet looks for device plugins (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1
# DevicePluginPath; not configurable): bound to each node's own folder in its mount namespace.
KUBELET_DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
BUSYBOX_APPLETS = ("sh", "echo", "cat", "env", "sleep", "ls", "true", "false", "wget", "nc", "hostname", "id")


# The kubelet sets these host-wide sysctls once at start-up (its container manager, unless
# protectKernelDefaults, which would refuse to start instead). On a shared development machine
# the node puts the previous values back as soon as the kubelet is up, and logs it.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops")


def _read_sysctls() -> dict[str, str]:
    out = {}
    for key in KUBELET_SYSCTLS:
        with contextlib.suppress(OSError):
            out[key] = Path("/proc/sys", key).read_text().strip()
    return out


def _restore_sysctls(saved: Mapping[str, str]) -> list[str]:
    changed = []
    for key, value in saved.items():
        path = Path("/proc/sys", key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value)
                changed.append(f"{key.replace('/', '.')}={value}")
    return changed


class NodeError(ControlPlaneError):
    """The real node could not start, or a step of it failed (the message says which)."""


def _digest8(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


# The kubelet's root directory may be at most this long: the sockets below it
# (``device-plugins/<plugin>.sock`` and others) then have 66 bytes of UNIX_SOCKET_PATH_MAX left.
# /var/lib/kubelet, the kubelet's default, has 16.
KUBELET_ROOT_MAX = 40


def _short_kubelet_dir(workdir: Path, node_id: str) -> Path | None:
    """``None`` when ``<workdir>/kubelet`` is short enough for the kubelet's sockets
    (``KUBELET_ROOT_MAX``), else a short directory in the temporary folder for this node.

    Raises:
        NodeError: even the temporary folder's path is too long (set ``TMPDIR`` to a short one).
    """
    if len(str(workdir.absolute() / KUBELET_LINK)) <= KUBELET_ROOT_MAX:
        return None
    short = Path(tempfile.gettempdir()) / f"{KUBELET_DIR_PREFIX}{node_id}"
    if len(str(short)) > KUBELET_ROOT_MAX:
        raise NodeError(f"the kubelet's root directory {short} is over {KUBELET_ROOT_MAX} characters: the unix sockets "
                        f"below it would not fit {UNIX_SOCKET_PATH_MAX} bytes; set TMPDIR to a shorter folder")
    return short


class Node:
    """containerd + kubelet registered with a running control plane.

    Parameters:
        server: the apiserver URL (``https://127.0.0.1:<port>``).
        pki_dir: the control plane's certificate directory (``ca.crt``, ``ca.key``).
        admin_kubeconfig: used to wait for the node and to delete it on stop.
        workdir: the node's directory (created).
        log_dir: where ``kubelet-<name>.log`` and ``containerd-<name>.log`` go.
        name: the Node object's name.
        labels: extra node labels (``iadeep.io/real-node=true`` is always set).
        die_with_parent: tie containerd and the kubelet to the calling thread and start the
            reaper; False only for ``iadeep dev node up`` (detached; ``node down`` tears down).
        ready_timeout: seconds to wait for the runtime and for the node to be Ready.
    """

    def __init__(
        self,
        *,
        server: str,
        pki_dir: Path,
        admin_kubeconfig: Path,
        workdir: Path,
        log_dir: Path,
        name: str = "iadeep-node",
        labels: Mapping[str, str] | None = None,
        die_with_parent: bool = True,
        ready_timeout: float = 120.0,
        binaries: NodeBinaries | None = None,
    ) -> None:
        self.server = server
        self.pki_dir = Path(pki_dir)
        self.admin_kubeconfig = Path(admin_kubeconfig)
        node_id = uuid.uuid4().hex[:8]
        self.cgroup = f"/iadeep-node-{node_id}"
        self.paths = NodePaths(Path(workdir), kubelet_dir=_short_kubelet_dir(Path(workdir), node_id))
        self.log_dir = Path(log_dir)
        self.name = name
        self.labels = {REAL_NODE_LABEL: "true", **dict(labels or {})}
        self.die_with_parent = die_with_parent
        self.ready_timeout = ready_timeout
        self.binaries = binaries
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.pause_image = ""
        self.timings: dict[str, float] = {}
        self._reaper: subprocess.Popen[bytes] | None = None
        self._reaper_pipe: int | None = None
        self._atexit: Callable[[], None] | None = None
        self._started = False
        self._api: Any = None
        self._programs: dict[str, str] = {}
        self._kubelet_launch: tuple[list[str], dict[str, str], Callable[[], None]] | None = None

    @classmethod
    def for_control_plane(cls, cp: ControlPlane, name: str = "iadeep-node", **kwargs: Any) -> Node:
        """A node of ``cp`` in ``<cp.workdir>/node-<name>``, stopped by ``cp.stop()`` first."""
        if cp.pki is None or cp.workdir is None:
            raise NodeError("the control plane is not started")
        node = cls(
            server=cp.server,
            pki_dir=cp.pki.dir,
            admin_kubeconfig=cp.kubeconfig,
            workdir=cp.workdir / f"node-{name}",
            log_dir=cp.log_dir,
            name=name,
            die_with_parent=kwargs.pop("die_with_parent", cp.die_with_parent),
            **kwargs,
        )
        cp.stop_hooks.append(node.stop)
        return node

    # -- public API ---------------------------------------------------------------------------

    @property
    def device_plugin_dir(self) -> Path:
        """The kubelet's device-plugin directory (``kubelet.sock`` is created here)."""
        return self.paths.device_plugins

    def start(self) -> Node:
        if self._started:
            raise NodeError("already started")
        if sys.platform != "linux" or os.geteuid() != 0:
            raise NodeError("a real node needs Linux and root (containerd, runc and the kubelet's cgroups)")
        t0 = time.monotonic()
        self.binaries = self.binaries or find_node_binaries()
        self._started = True
        self._atexit = self.stop
        atexit.register(self._atexit)
        try:
            self._start(t0)
        except BaseException:
            self.stop()
            raise
        self.timings["ready"] = round(time.monotonic() - t0, 3)
        return self

    def stop(self) -> dict[str, int]:
        """Stop the kubelet and containerd, kill every container, unmount, remove the cgroups,
        delete the Node object. Idempotent. Returns what :func:`teardown` counted."""
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        if not self._started:
            return {}
        self._started = False
        for name in ("kubelet", "containerd"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop(timeout=10)
        result = teardown(self.paths.root, self.cgroup)
        self._stop_reaper()
        with contextlib.suppress(Exception):
            self._core().delete_node(self.name)
        log.info("node %s stopped: %s", self.name, result)
        return result

    def detach(self) -> dict[str, Any]:
        """Leave the node running; returns what ``node down`` needs (:func:`teardown_detached`)."""
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        self._stop_reaper()
        return self.state()

    def state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workdir": str(self.paths.root),
            "cgroup": self.cgroup,
            "ports": dict(self.ports),
            "containerd_socket": str(self.paths.containerd_socket),
            "device_plugin_dir": str(self.paths.device_plugins),
            "processes": {n: {"pid": p.pid, "exe": self._programs.get(n, p.argv[0])} for n, p in self.procs.items()},
            "timings": dict(self.timings),
        }

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ctr(self, *args: str, timeout: float = 300.0) -> str:
        """Run ``ctr`` against this node's containerd in the ``k8s.io`` namespace; returns stdout.

        Raises:
            NodeError: ctr failed (its stderr is in the message).
        """
        argv = [str(self._bins.ctr), "--address", str(self.paths.containerd_socket), "--namespace", "k8s.io", *args]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if res.returncode != 0:
            raise NodeError(f"{' '.join(argv[3:])} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    def import_images(self, archives: Iterable[str | os.PathLike[str]]) -> list[str]:
        """Import image archives (OCI layout or docker-archive tars) into the node's containerd,
        unpacked for the CRI; pods then use them with ``imagePullPolicy: Never``. Returns the
        image names containerd now holds."""
        for archive in archives:
            self.ctr("images", "import", str(archive))
        return self.image_names()

    def image_names(self) -> list[str]:
        return sorted(line.split()[0] for line in self.ctr("images", "list", "--quiet").splitlines() if line.strip())

    def busybox_image(self) -> str:
        """Write and import a one-layer image of Debian's static busybox (``/bin/sh`` and a few
        applets); returns its name. For tests of the node itself, independent of ``make images``."""
        busybox = self._bins.busybox
        if busybox is None:
            raise NodeError("busybox not found (Debian: busybox-static; `make node` installs it)")
        name = f"localhost/iadeep/busybox:{_digest8(busybox)}"
        files = {"bin/busybox": ImageFile(busybox)}
        files.update({f"bin/{a}": ImageFile(link="busybox") for a in BUSYBOX_APPLETS})
        archive = self.paths.images / "busybox.tar"
        write_image_archive(archive, name, files, entrypoint=["/bin/sh"])
        self.import_images([archive])
        return name

    # -- start-up -------------------------------------------------------------------------------

    @property
    def _bins(self) -> NodeBinaries:
        if self.binaries is None:
            self.binaries = find_node_binaries()
        return self.binaries

    def _mark(self, what: str, t0: float) -> None:
        self.timings[what] = round(time.monotonic() - t0, 3)

    def _core(self) -> Any:
        from kubernetes import client
        from kubernetes import config as k8s_config

        if self._api is None:
            self._api = client.CoreV1Api(k8s_config.new_client_from_config(config_file=str(self.admin_kubeconfig)))
        return self._api

    def _start(self, t0: float) -> None:
        from iadeep._host import free_port

        p = self.paths
        for d in (p.root, p.containerd_state, p.cni_conf_dir, p.kubelet_root, p.pod_logs, p.images):
            d.mkdir(parents=True, exist_ok=True)
        if p.kubelet_dir is not None:  # <root>/kubelet leads to it (and teardown follows the link)
            link = p.root / KUBELET_LINK
            if link.is_symlink():
                link.unlink()
            if not link.exists():
                link.symlink_to(p.kubelet_dir, target_is_directory=True)
        self.ports = {"kubelet": free_port(), "kubelet-healthz": free_port()}
        v1 = not cgroup_v2()
        if v1:
            note = (
                f"node {self.name}: /sys/fs/cgroup is not cgroup2 (cgroup v1 or hybrid host): the kubelet "
                "runs with failCgroupV1: false (Kubernetes 1.35+ refuses cgroup v1 otherwise)"
            )
            log.warning("%s", note)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with (self.log_dir / f"kubelet-{self.name}.log").open("a") as f:
                f.write(f"iadeep: {note}\n")
        make_cgroup(f"{self.cgroup}/runtime")
        self._start_reaper()
        self._write_configs(v1)
        self._mark("config", t0)

        procs_files = [h / self.cgroup.strip("/") / "runtime" / "cgroup.procs" for h in cgroup_hierarchies()]

        def join() -> None:  # in the child, before exec: only writes, nothing that could lock
            pid = str(os.getpid()).encode()
            for f in procs_files:
                fd = os.open(f, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)

        b = self._bins
        env = dict(os.environ, PATH=f"{b.containerd_shim.parent}:{b.runc.parent}:{os.environ.get('PATH', '')}")
        # The kubelet's device manager has no setting for its folder: kubelet.sock and the
        # plugins' sockets are always in /var/lib/kubelet/device-plugins. So that several nodes
        # (and other users of that folder) can share the machine, containerd and the kubelet run
        # in a mount namespace of their own in which the node's folder is bound there; a
        # device-plugin pod's hostPath /var/lib/kubelet/device-plugins (resolved by runc in that
        # namespace) is the node's folder too. The namespace and its mounts go with its last process.
        KUBELET_DEVICE_PLUGINS.mkdir(parents=True, exist_ok=True)  # the mount point; stays empty
        p.device_plugins.mkdir(parents=True, exist_ok=True)
        wrap = [str(b.unshare), "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(p.device_plugins), str(KUBELET_DEVICE_PLUGINS)]
        self._programs = {"containerd": str(b.containerd), "kubelet": str(b.kubelet)}
        self._spawn("containerd", [*wrap, str(b.containerd), "--config", str(p.containerd_config)], env, join)
        self._wait(lambda: self.ctr("version", timeout=5) != "", self.ready_timeout, "containerd", "containerd")
        self._mark("containerd", t0)

        archive = p.images / "pause.tar"
        self.pause_image = f"localhost/iadeep/pause:{_digest8(b.pause)}"
        write_image_archive(archive, self.pause_image, {"pause": ImageFile(b.pause)}, entrypoint=["/pause"])
        self.import_images([archive])
        self._mark("pause-image", t0)

        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        argv = [
            str(b.nsenter),
            f"--mount=/proc/{self.procs['containerd'].pid}/ns/mnt",
            "--",
            str(b.kubelet),
            f"--config={p.kubelet_config}",
            f"--kubeconfig={p.kubelet_kubeconfig}",
            f"--root-dir={p.kubelet_root}",
            f"--cert-dir={p.root / 'pki'}",
            "--node-ip=127.0.0.1",
            f"--hostname-override={self.name}",
            f"--node-labels={labels}",
            "--v=1",
        ]
        self._kubelet_launch = (argv, env, join)
        self._run_kubelet()
        self._mark("node-ready", t0)

    def restart_kubelet(self) -> None:
        """Stop the kubelet and start it again with the same configuration (containerd and the
        containers keep running), as an upgrade or a crash-loop would; returns once the node is
        Ready again. The kubelet's device manager removes the plugins' sockets on start, so the
        device plugins must register again (they watch ``kubelet.sock``).

        Raises:
            NodeError: the node is not started, or the kubelet did not come back Ready.
        """
        if not self._started or self._kubelet_launch is None:
            raise NodeError(f"node {self.name} is not started")
        proc = self.procs.pop("kubelet", None)
        if proc is not None:
            proc.stop(timeout=10)
        self._run_kubelet()

    def _run_kubelet(self) -> None:
        assert self._kubelet_launch is not None
        argv, env, join = self._kubelet_launch
        saved = _read_sysctls()
        self._spawn("kubelet", argv, env, join)
        try:
            self._wait(self._healthz, self.ready_timeout, "kubelet /healthz", "kubelet")
            self._wait(self._set_loopback_address, self.ready_timeout, f"node {self.name} registered", "kubelet")
            # Ready implies the kubelet's container manager has started (and set its sysctls).
            self._wait(self._ready, self.ready_timeout, f"node {self.name} Ready", "kubelet")
        finally:
            restored = _restore_sysctls(saved)
            if restored:
                log.warning("node %s: restored the host sysctls the kubelet changed: %s", self.name, ", ".join(restored))

    def _write_configs(self, cgroup_v1: bool) -> None:
        import yaml

        from iadeep.dev._cluster import _kubeconfig
        from iadeep.dev._pki import issue_from_ca

        p, b = self.paths, self._bins
        ca, ca_key = self.pki_dir / "ca.crt", self.pki_dir / "ca.key"
        client = issue_from_ca(ca, ca_key, p.root / "pki" / "kubelet-client", f"system:node:{self.name}", orgs=("system:nodes",))
        serving = issue_from_ca(
            ca, ca_key, p.root / "pki" / "kubelet-serving", f"system:node:{self.name}",
            server=True, dns=(self.name,), ips=("127.0.0.1",),
        )  # fmt: skip
        kc = _kubeconfig(self.server, ca, client.cert, client.key, embed=False, user=f"system:node:{self.name}")
        p.kubelet_kubeconfig.write_text(yaml.safe_dump(kc, sort_keys=False))
        self.pause_image = f"localhost/iadeep/pause:{_digest8(b.pause)}"
        p.containerd_config.write_text(
            containerd_config(p, runc=b.runc, cni_bin_dir=b.cni_bin_dir, sandbox_image=self.pause_image)
        )
        (p.cni_conf_dir / "10-iadeep-loopback.conflist").write_text(cni_conflist())
        cfg = kubelet_config(
            p,
            port=self.ports["kubelet"],
            healthz_port=self.ports["kubelet-healthz"],
            ca_cert=ca,
            serving_cert=serving.cert,
            serving_key=serving.key,
            cgroup_root=self.cgroup,
            cgroup_v1=cgroup_v1,
        )
        p.kubelet_config.write_text(yaml.safe_dump(cfg, sort_keys=False))

    def _spawn(self, comp: str, argv: list[str], env: dict[str, str], preexec: Callable[[], None]) -> None:
        self.procs[comp] = spawn(
            f"{comp}-{self.name}", argv, self.log_dir, env=env, cwd=self.paths.root,
            die_with_parent=self.die_with_parent, preexec=preexec,
        )  # fmt: skip

    def _start_reaper(self) -> None:
        if not self.die_with_parent:
            return
        r, w = os.pipe()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"reaper-{self.name}.log").open("ab") as out:
            self._reaper = subprocess.Popen(
                [sys.executable, "-m", "iadeep.dev._nodereaper", str(r), str(self.paths.root), self.cgroup],
                pass_fds=(r,),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        os.close(r)
        self._reaper_pipe = w

    def _stop_reaper(self) -> None:
        if self._reaper_pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._reaper_pipe, b"x")
            os.close(self._reaper_pipe)
            self._reaper_pipe = None
        if self._reaper is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(10)
            self._reaper = None

    # -- waiting --------------------------------------------------------------------------------

    def _healthz(self) -> bool:
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{self.ports['kubelet-healthz']}/healthz", timeout=2) as resp:
            return resp.status == 200

    def _set_loopback_address(self) -> bool:
        """Publish 127.0.0.1 as the node's only address.

        The kubelet refuses a loopback ``--node-ip`` ("nodeIP can't be loopback address", its
        node-address status setter) and then publishes no address at all; without ``--node-ip``
        it would publish the machine's interface address, which must not be used here. So the
        node keeps ``--node-ip 127.0.0.1`` and its status gets the address through the API: the
        kubelet's later status patches leave ``addresses`` alone, since that setter keeps
        failing before it sets anything.
        """
        core = self._core()
        core.read_node(self.name)  # 404 until the kubelet has registered
        core.patch_node_status(self.name, {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
        return True

    def _ready(self) -> bool:
        node = self._core().read_node(self.name)
        conds = {c.type: c for c in (node.status.conditions or [])}
        ready = conds.get("Ready")
        self._last_ready = f"{ready.reason}: {ready.message}" if ready is not None else "no Ready condition yet"
        return ready is not None and ready.status == "True"

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str, component: str) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        delay = 0.1
        while True:
            for name, proc in self.procs.items():
                if not proc.alive():
                    raise NodeError(f"{name} exited with code {proc.popen.returncode} (log {proc.log}):\n{proc.tail()}")
            try:
                if cond():
                    return
            except Exception as exc:  # noqa: BLE001 - not ready yet until the deadline
                last = exc
            if time.monotonic() >= deadline:
                proc = self.procs.get(component)
                detail = getattr(self, "_last_ready", "") if "Ready" in what else ""
                raise NodeError(
                    f"timed out after {timeout:.0f}s waiting for {what}"
                    + (f" ({detail})" if detail else "")
                    + (f" (last error: {last})" if last else "")
                    + (f"\n--- {proc.log} ---\n{proc.tail()}" if proc else "")
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)


def teardown_detached(state: Mapping[str, Any]) -> dict[str, int]:
    """Stop a node that ``iadeep dev node up`` left running (its :meth:`Node.state`)."""
    from iadeep._host import stop_detached

    for comp in ("kubelet", "containerd"):
        proc = state.get("processes", {}).get(comp)
        if proc:
            stop_detached(int(proc["pid"]), proc["exe"])
    return teardown(Path(state["workdir"]), state["cgroup"])


def node_summary(state: Mapping[str, Any]) -> str:
    return json.dumps({k: state[k] for k in ("name", "cgroup", "ports") if k in state})
