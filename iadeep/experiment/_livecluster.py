"""The clusters live runs replay on: the local one this package starts, or a user's.

The cluster around it (:class:`LocalCluster`, the default): the local control plane
(:class:`iadeep.dev.ControlPlane`, real kube-apiserver, kube-scheduler with the
``iadeep-scheduler`` profile, kube-controller-manager, kwok), a local etcd, and per policy a
fresh set of kwok GPU nodes, the extender (``iadeep extender serve``) and the GPU emulator
(``iadeep emulator serve``) as processes. With tuning, for the policies in
:data:`TUNED_POLICIES` (iadeep's batch-size tuning, gandiva's profile of a packing), also the
tuner (``iadeep tuner serve``, SQLite in the work folder) and one coordinator for the set of kwok
nodes (``iadeep coordinator serve --all-nodes``): the extender's bind writes a tuning request per
GPU whose co-located set changed, the coordinator runs the session the extender's policy publishes
(a tuning session with the tuner, or gandiva's one profile round without it), and the emulator
applies the batch sizes it writes and reports the jobs' throughput as the SDK would.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iadeep.experiment._live import RUN_LABEL
from iadeep.sim import ClusterSpec

__all__ = ["LocalCluster", "UserCluster", "scheduler_config"]

log = logging.getLogger("iadeep.experiment")

REPO = Path(__file__).resolve().parents[2]
SCHEDULER_CONFIG = REPO / "k8s" / "extender" / "kube-scheduler-config.control-plane.yaml"


def _free_port() -> int:
    from iadeep._host import free_port

    return free_port()


class _Process:
    """A service of ours as a child process (its own session), log to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path):
        self.url = ""  # its HTTP endpoint, when it has one
        self.log_path = log_path
        self._fh = log_path.open("ab")
        self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def check(self, what: str) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._fh.close()


def _wait_http(proc: _Process, path: str, timeout_s: float = 120.0) -> None:
    """Until ``proc`` answers 200 on ``path``.

    Raises:
        RuntimeError: it exited, or did not answer within ``timeout_s`` (with its log's tail).
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        proc.check(proc.log_path.stem)
        try:
            if httpx.get(proc.url + path, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.log_path.stem} did not answer {path} within {timeout_s:.0f} s:\n"
                               f"{proc.log_path.read_text()[-3000:]}")
        time.sleep(0.2)


@dataclass
class LocalCluster:
    """The local control plane, etcd and our services for live runs (see the module docstring).

    Args:
        cluster: the cluster shape (one kwok node per node, its GPUs and memory).
        throughputs: Gavel ``simulation_throughputs.json`` (extender and emulator).
        workdir: where logs and data go (a temporary folder when ``None``; kept when given).
    """

    cluster: ClusterSpec
    throughputs: Path
    workdir: Path | None = None
    extender_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    #: record the services' series with Prometheus when its binary is there (:mod:`._prometheus`)
    prometheus: bool = True
    #: the current run's clock (:meth:`prepare` with ``held_clock``), else ``None``
    clock_file: Path | None = None

    def __enter__(self) -> LocalCluster:
        from iadeep.dev import ControlPlane, LocalEtcd

        t0 = time.monotonic()
        self._tmp = None
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="iadeep-live-")
            self.workdir = Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.extender_port = self.extender_port or _free_port()
        self.etcd = LocalEtcd(self.workdir / "etcd")
        self.etcd.start()
        self.control_plane = ControlPlane(nodes=0, gpus_per_node=self.cluster.gpus_per_node,
                                          gpu_mem_gib=int(self.cluster.gpu_mem_gib),
                                          scheduler_config=scheduler_config(self.extender_port),
                                          workdir=self.workdir / "controlplane", ready_timeout=120)
        try:
            self.control_plane.start()
        except BaseException:
            self.etcd.stop()
            raise
        self.api = self.control_plane.api_client()
        self._procs: list[_Process] = []
        self._prom = self._start_prometheus() if self.prometheus else None
        self._run_started = time.time()
        self.timings["cluster_start_s"] = time.monotonic() - t0
        return self

    def _start_prometheus(self) -> Any:
        from iadeep.experiment._prometheus import LocalPrometheus, prometheus_binary

        binary = prometheus_binary()
        if binary is None:
            log.info("no prometheus binary (Debian: apt-get install prometheus): the report has no services' series")
            return None
        try:
            return LocalPrometheus(self.workdir / "prometheus", binary).start()  # type: ignore[operator]
        except (OSError, RuntimeError) as exc:  # the run goes on without the series
            log.warning("prometheus did not start: %s", exc)
            return None

    def service_series(self) -> dict[str, Any] | None:
        """The services' series since the current run's services were ready
        (:func:`iadeep.experiment._prometheus.collect_series`); ``None`` without Prometheus."""
        if self._prom is None:
            return None
        from iadeep.experiment._prometheus import collect_series

        try:
            return collect_series(self._prom, self._run_started, time.time())
        except (OSError, RuntimeError, ValueError) as exc:
            log.warning("prometheus series: %s", exc)
            return None

    def __exit__(self, *exc: object) -> None:
        self.stop_services()
        if self._prom is not None:
            self._prom.stop()
        self.api.close()
        self.control_plane.stop()
        self.etcd.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def prepare(self, run: str, policy: str, *, seed: int, speedup: float, tuning: bool = False,
                trial_s: float = 20.0, preemption: bool = False, held_clock: bool = False) -> str:
        """Fresh nodes labelled ``run``, a fresh etcd prefix, and the extender and emulator for
        ``policy`` (with ``tuning``, also the tuner and the coordinator; the emulator then reports
        a job in a session every ``trial_s / 2`` emulated seconds, at least every 50 ms; with
        ``preemption``, the extender carries out the policy's preemptions; with ``held_clock``, a
        fresh run clock, :attr:`clock_file`, that the emulator measures time with); returns the
        etcd prefix. Nodes and services of an earlier run are removed."""
        from kubernetes import client

        self.stop_services()
        core = client.CoreV1Api(self.api)
        old = [n.metadata.name for n in core.list_node(label_selector=RUN_LABEL).items]
        for name in old:
            core.delete_node(name)
        from iadeep.dev import NodeSpec

        specs = [NodeSpec(f"{run}-{name}", gpus=self.cluster.gpus_per_node, gpu_mem_gib=int(self.cluster.gpu_mem_gib),
                          labels={RUN_LABEL: run}) for name in self.cluster.node_names()]
        t0 = time.monotonic()
        # a bounded wait, generous: 1,000 kwok nodes took over 200 s to turn Ready at load 15-18
        self.control_plane.add_nodes(specs, timeout=max(60.0, len(specs) * 0.6))
        self.timings["nodes_ready_s"] = time.monotonic() - t0
        prefix = f"/iadeep-live/{run}"
        env = {
            "IADEEP_ETCD_ENDPOINTS": self.etcd.endpoint,
            "IADEEP_ETCD_PREFIX": prefix,
            "KUBECONFIG": str(self.kubeconfig),
        }
        logs = self.workdir / "logs"  # type: ignore[operator]
        logs.mkdir(exist_ok=True)
        self.clock_file = self.workdir / f"clock-{run}" if held_clock else None  # type: ignore[operator]
        clock_env, coordinator_clock = {}, {}
        if self.clock_file is not None:
            from iadeep._host import HeldClock

            self.clock_file.unlink(missing_ok=True)
            HeldClock(self.clock_file).close()  # created before the emulator opens it
            clock_env = {"IADEEP_EMULATOR_CLOCK_FILE": str(self.clock_file)}
            coordinator_clock = {"IADEEP_COORDINATOR_CLOCK_FILE": str(self.clock_file)}
        ext = _Process([sys.executable, "-m", "iadeep.extender", "serve"], {
            **env, "IADEEP_EXTENDER_PORT": str(self.extender_port), "IADEEP_EXTENDER_HOST": "127.0.0.1",
            "IADEEP_EXTENDER_POLICY": policy, "IADEEP_EXTENDER_THROUGHPUTS_FILE": str(self.throughputs),
            "IADEEP_EXTENDER_KUBE__KUBECONFIG": str(self.kubeconfig), "IADEEP_EXTENDER_LOG_LEVEL": "warning",
            "IADEEP_EXTENDER_PREEMPTION": "true" if preemption else "false",
        }, logs / f"extender-{run}.log")
        emu_port = _free_port()
        emu = _Process([sys.executable, "-m", "iadeep.emulator", "serve"], {
            **env, "IADEEP_EMULATOR_PORT": str(emu_port), "IADEEP_EMULATOR_HOST": "127.0.0.1",
            "IADEEP_EMULATOR_THROUGHPUTS_FILE": str(self.throughputs), "IADEEP_EMULATOR_SPEEDUP": f"{speedup:g}",
            "IADEEP_EMULATOR_SEED": str(seed), "IADEEP_EMULATOR_NODE_SELECTOR": f"{RUN_LABEL}={run}",
            # job records current to a minute of emulated time (at most 5 writes per job per second)
            "IADEEP_EMULATOR_PROGRESS_INTERVAL_S": f"{max(60.0 / speedup, 0.2):g}",
            "IADEEP_EMULATOR_KUBE__KUBECONFIG": str(self.kubeconfig), "IADEEP_EMULATOR_LOG_LEVEL": "warning",
            "IADEEP_EMULATOR_FOLLOW_BATCH_SIZES": "true" if tuning else "false",
            "IADEEP_EMULATOR_REPORT_INTERVAL_S": f"{max(trial_s / 2 / speedup, 0.05):g}", **clock_env,
        }, logs / f"emulator-{run}.log")
        emu.url = f"http://127.0.0.1:{emu_port}"
        self._procs = [ext, emu]
        if tuning:
            self._procs += self._start_tuning(run, {**env, **coordinator_clock}, logs)
        self._wait_ready(prefix, len(specs), ext, emu)
        for p in self._procs[2:]:
            _wait_http(p, "/readyz")
        if self._prom is not None:
            def hosts(service: str) -> list[str]:
                return [p.url.removeprefix("http://") for p in self._procs if p.log_path.stem.startswith(service)]

            self._prom.set_targets({"iadeep-extender": [f"127.0.0.1:{self.extender_port}"],
                                    "iadeep-emulator": hosts("emulator"), "iadeep-tuner": hosts("tuner"),
                                    "iadeep-coordinator": hosts("coordinator")},
                                   labels={"run": run, "policy": policy})
        self._run_started = time.time()
        return prefix

    def _start_tuning(self, run: str, env: dict[str, str], logs: Path) -> list[_Process]:
        """The tuner and one coordinator for every node (``--all-nodes``; ``env`` is the
        coordinator's: etcd, kubeconfig, the run's clock)."""
        tuner_port, coord_port = _free_port(), _free_port()
        tuner = _Process([sys.executable, "-m", "iadeep.tuner", "serve"], {
            "IADEEP_TUNER_PORT": str(tuner_port), "IADEEP_TUNER_HOST": "127.0.0.1",
            "IADEEP_TUNER_STORAGE_URL": f"sqlite:///{self.workdir}/tuner-{run}.db",
            "IADEEP_TUNER_THROUGHPUTS_FILE": str(self.throughputs), "IADEEP_TUNER_LOG_LEVEL": "WARNING",
        }, logs / f"tuner-{run}.log")
        tuner.url = f"http://127.0.0.1:{tuner_port}"
        coord = _Process([sys.executable, "-m", "iadeep.coordinator", "serve", "--all-nodes"], {
            **env, "IADEEP_COORDINATOR_TUNER_URL": tuner.url, "IADEEP_COORDINATOR_PORT": str(coord_port),
            "IADEEP_COORDINATOR_THROUGHPUTS_FILE": str(self.throughputs), "IADEEP_COORDINATOR_LOG_LEVEL": "INFO",
            "IADEEP_COORDINATOR_IDLE_S": "1", "IADEEP_COORDINATOR_ROUND__DEADLINE_S": "5",
        }, logs / f"coordinator-{run}.log")
        coord.url = f"http://127.0.0.1:{coord_port}"
        return [tuner, coord]

    def _wait_ready(self, prefix: str, n_nodes: int, ext: _Process, emu: _Process, timeout_s: float = 120.0) -> None:
        """Until every node's inventory is in etcd (the emulator) and the extender answers /readyz
        and has followed those inventories."""
        import httpx

        from iadeep.state import EtcdStateStore, StateSettings

        store = EtcdStateStore(StateSettings(endpoints=[self.etcd.endpoint], prefix=prefix))
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                ext.check("the extender")
                emu.check("the emulator")
                ok = len(store.inventories()) >= n_nodes
                if ok:
                    try:
                        doc = httpx.get(f"http://127.0.0.1:{self.extender_port}/inspect", timeout=5).json()
                        ok = len(doc.get("nodes") or {}) >= n_nodes
                    except (httpx.HTTPError, ValueError):
                        ok = False
                if ok:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"extender/emulator not ready after {timeout_s:.0f}s (logs in {self.workdir}/logs)")
                time.sleep(0.2)
        finally:
            store.close()

    def tuning_rounds(self) -> dict[str, Any]:
        """What the coordinator of the current run measured (its ``/metrics``): ``rounds``,
        ``round_s_mean`` (wall s per round: one trial's measurement window, as long as the
        machine makes it), ``sessions`` by outcome; ``{}`` without a coordinator."""
        import httpx

        from iadeep._prometheus import samples as read_samples

        coord = [p for p in getattr(self, "_procs", []) if "coordinator" in p.log_path.stem]
        if not coord:
            return {}
        try:
            text = httpx.get(coord[0].url + "/metrics", timeout=10).text
        except httpx.HTTPError as exc:
            log.warning("coordinator metrics: %s", exc)
            return {}
        samples = read_samples(text)
        n = samples.get(("iadeep_coordinator_round_seconds_count", ()), 0.0)
        total = samples.get(("iadeep_coordinator_round_seconds_sum", ()), 0.0)
        sessions = {dict(k).get("outcome", ""): int(v) for (name, k), v in samples.items()
                    if name == "iadeep_coordinator_sessions_total"}
        return {"rounds": int(n), "round_s_mean": total / n if n else None, "sessions": sessions}

    def stop_services(self) -> None:
        for p in getattr(self, "_procs", []):
            p.stop()
        self._procs = []


@dataclass
class UserCluster:
    """A user's cluster from a kubeconfig: the extender (``iadeep-scheduler`` profile) and, for
    nodes without real GPUs, the emulator are deployed there already; nothing is started or
    removed. The Jobs go to whatever nodes the scheduler picks (no node pinning).

    Args:
        kubeconfig: the kubeconfig file (its current context).

    Raises:
        FileNotFoundError: (on enter) the file does not exist.
        RuntimeError: (on enter) the API server does not answer (the message names the server).
    """

    kubeconfig: Path

    def __enter__(self) -> UserCluster:
        from kubernetes import client, config

        if not self.kubeconfig.is_file():
            raise FileNotFoundError(f"kubeconfig {self.kubeconfig} does not exist")
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            client.VersionApi(self.api).get_code(_request_timeout=10)
        except Exception as exc:  # noqa: BLE001 - any failure to reach it: one clear message
            self.api.close()
            raise RuntimeError(f"the cluster of {self.kubeconfig} ({self.api.configuration.host}) does not answer: "
                               f"{type(exc).__name__}: {exc}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.close()


def scheduler_config(port: int) -> dict[str, Any]:
    """The shipped control-plane KubeSchedulerConfiguration, its extender at ``127.0.0.1:port``."""
    import yaml

    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    for ext in config["extenders"]:
        ext["urlPrefix"] = f"http://127.0.0.1:{port}/iadeep"
    return config


# -- one policy's run ------------------------------------------------------------------------
