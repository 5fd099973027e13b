"""The experiment on a live cluster: Jobs submitted at their arrival times, results read back.

:func:`run_live_policy` replays a job table against one policy on a Kubernetes cluster and
returns a :class:`~iadeep.sim.SimResult` with the simulator's columns, so that the report, the
plots and ``summary.json`` are the simulator backend's. Per trace job it creates one
``batch/v1`` Job (:func:`job_manifest`): scheduler ``iadeep-scheduler``, the GPU-memory request
(``iadeep.io/gpu-mem``, whole GiB: extended resources are integers), ``iadeep.io/gpu-count``, and
the annotations the extender and the emulator read (model, batch size, duration,
``iadeep.io/emulated``, speedup). The Job is created ``LiveSettings.ahead_s`` before its arrival
with its pod gated (those of the first ``ahead_s`` before the clock starts at ``t0``), and the
gate removed at ``t0 + (submit - first submit) / speedup`` wall seconds (:class:`~iadeep.experiment._replay.GatedSubmitter`: Job creation and the Job
controller's latency are off the arrival path). It waits for every Job to finish (a success or
failure condition, :func:`~iadeep.experiment.job_outcome`) through a watch (reopened until a
deadline), then reads the times back:

- submit: the wall time the pod's gate was removed (pod annotation ``iadeep.io/submit-time``,
  written with the removal; the API's timestamps have 1 s resolution, 1,000 emulated s at 1000x);
- start: the emulator's ``iadeep.io/emulated-start`` (when the GPUs started the work; the
  extender's ``iadeep.io/assume-time`` is the bind);
- end: the emulator's ``iadeep.io/emulated-end``;

and converts them to emulated seconds, ``submit_0 + (wall - t0) x speedup`` (:mod:`._readback`). Placement and
co-location partners come from the pods' ``iadeep.io/gpu-index`` and nodes (two jobs are
partners when their runs overlap on a GPU). At the end the reservations left in etcd are counted
(the extender releases each when its pod ends). The per-job overhead breakdown (submission lag,
bind latency, start lag, completion lag) goes to ``metrics-<policy>.json``.

The cluster around it (:class:`LocalCluster`, the default): the local control plane
(:class:`iadeep.dev.ControlPlane`, real kube-apiserver, kube-scheduler with the
``iadeep-scheduler`` profile, kube-controller-manager, kwok), a local etcd, and per policy a
fresh set of kwok GPU nodes, the extender (``iadeep extender serve``) and the GPU emulator
(``iadeep emulator serve``) as processes. With tuning, for the policies in
:data:`TUNED_POLICIES` (those whose tuning is IADeep's batch-size tuning), also the tuner
(``iadeep tuner serve``, SQLite in the work folder) and one coordinator for the set of kwok nodes
(``iadeep coordinator serve --all-nodes``): the extender's bind writes a tuning request per GPU
whose co-located set changed, the coordinator runs the session with the tuner, and the emulator
applies the batch sizes it writes and reports the jobs' throughput as the SDK would.
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iadeep.experiment._readback import JOB_ID_ANNOTATION, live_result
from iadeep.experiment._replay import ARRIVAL_GATE, SUBMIT_ANNOTATION, GatedSubmitter, api_json, watch_jobs
from iadeep.interference import InterferenceModel
from iadeep.sim import ClusterSpec, SimResult

__all__ = ["LiveSettings", "LocalCluster", "UserCluster", "TUNED_POLICIES", "job_manifest", "run_live_policy", "live_result"]

log = logging.getLogger("iadeep.experiment")

SCHEDULER = "iadeep-scheduler"
RUN_LABEL = "iadeep.io/run"
REPO = Path(__file__).resolve().parents[2]
SCHEDULER_CONFIG = REPO / "k8s" / "extender" / "kube-scheduler-config.control-plane.yaml"
TUNED_POLICIES = frozenset({"iadeep"})
"""Policies whose tuning the live system runs (coordinator and tuner: batch-size sessions). The
others' tuning in the simulator is either the default no-op or, for gandiva, undoing a packing
by eviction, which no live component does."""


@dataclass(frozen=True)
class LiveSettings:
    """How a live run goes.

    Attributes:
        speedup: emulated seconds per wall second (1000: an hour of trace in 3.6 s).
        timeout_s: wall-clock bound of one policy's run (submission and completion); ``None``:
            the trace span plus the total work over the cluster's GPUs plus the longest job, at
            ``speedup``, x 3 + 120 s.
        namespace: namespace of the Jobs (created; a fresh one per policy when ``None``).
        reservations_wait_s: how long to wait at the end for the extender to release every reservation.
        ahead_s: how long (wall s) before its arrival a Job is created, its pod gated until the
            arrival (:class:`~iadeep.experiment._replay.GatedSubmitter`); the Jobs arriving in
            the first ``ahead_s`` are created, and their pods seen, before the arrival clock
            starts (``prefill_s`` in the metrics).
    """

    speedup: float = 1000.0
    timeout_s: float | None = None
    namespace: str | None = None
    reservations_wait_s: float = 10.0
    ahead_s: float = 10.0


def job_name(index: int, job_id: str) -> str:
    """A DNS-1123 Job name for trace job ``job_id`` (``j-<index>-<id>``, at most 63 characters)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", str(job_id).lower()).strip("-")
    return f"j-{index:05d}-{clean}"[:63].rstrip("-")


def job_manifest(row: Any, index: int, *, namespace: str, run: str, mem_gib: float, speedup: float,
                 submit_time_s: float | None = None, pin_nodes: bool = True, gated: bool = False) -> dict[str, Any]:
    """The ``batch/v1`` Job for one trace job (a pure function; see the module docstring). A pod
    the extender evicts (to preempt the job, or to undo a co-location) is replaced, not counted as a failure (the Job's
    ``podFailurePolicy`` ignores the ``DisruptionTarget`` condition that the Eviction API sets).

    Args:
        row: the job's row of the job table (job_id, duration, num_gpus, model, batch_size).
        index: its position in the table (makes the name unique).
        namespace / run: the namespace and the run's label value (nodes carry the same label).
        mem_gib: GPU memory per GPU (GiB); requested for the pod as ``ceil(mem_gib) x num_gpus``.
        speedup: emulated seconds per wall second.
        submit_time_s: wall time of creation (Unix s), for the Job's submit annotation (a Job
            created at its arrival); ``None``: no annotation (the arrival is written on the pod).
        pin_nodes: select the nodes labelled with ``run`` (the local cluster's per-run nodes).
        gated: the pod carries the scheduling gate :data:`~iadeep.experiment._replay.ARRIVAL_GATE`
            (the Job is created ahead of its arrival and the gate removed at the arrival:
            :class:`~iadeep.experiment._replay.GatedSubmitter`).
    """
    gpus = int(row.num_gpus)
    res = {"iadeep.io/gpu-mem": str(int(math.ceil(mem_gib - 1e-9)) * gpus), "iadeep.io/gpu-count": str(gpus)}
    annotations = {
        "iadeep.io/model": str(row.model),
        "iadeep.io/batch-size": str(int(row.batch_size)),
        "iadeep.io/duration-s": f"{float(row.duration):.3f}",
        "iadeep.io/emulated": "true",
        "iadeep.io/emulation-speedup": f"{speedup:g}",
        JOB_ID_ANNOTATION: str(row.job_id),
    }
    labels = {RUN_LABEL: run}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(index, row.job_id), "namespace": namespace, "labels": labels,
                     "annotations": {JOB_ID_ANNOTATION: str(row.job_id),
                                     **({SUBMIT_ANNOTATION: f"{submit_time_s:.6f}"} if submit_time_s is not None else {})}},
        "spec": {
            "backoffLimit": 0,
            # a pod evicted for a preemption or an undo (the Eviction API marks it DisruptionTarget) is replaced
            # without counting as a failure; the replacement resumes from the job's checkpoint
            # (Job API, batch/v1 podFailurePolicy: needs restartPolicy Never; the replacement is made
            # once the evicted pod has failed, podReplacementPolicy Failed)
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "completions": 1,
            "parallelism": 1,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "schedulerName": SCHEDULER,
                    **({"schedulingGates": [{"name": ARRIVAL_GATE}]} if gated else {}),
                    "restartPolicy": "Never",
                    **({"nodeSelector": {RUN_LABEL: run}} if pin_nodes else {}),
                    "containers": [{"name": "train", "image": "registry.invalid/iadeep/emulated-trainer:0",
                                    "resources": {"limits": dict(res), "requests": dict(res)}}],
                },
            },
        },
    }


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

    def __enter__(self) -> LocalCluster:
        from iadeep.dev import ControlPlane
        from iadeep.state import LocalEtcd

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
                trial_s: float = 20.0, preemption: bool = False) -> str:
        """Fresh nodes labelled ``run``, a fresh etcd prefix, and the extender and emulator for
        ``policy`` (with ``tuning``, also the tuner and the coordinator; the emulator then reports
        a job in a session every ``trial_s / 2`` emulated seconds, at least every 50 ms; with
        ``preemption``, the extender carries out the policy's preemptions); returns the etcd
        prefix. Nodes and services of an earlier run are removed."""
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
            "IADEEP_EMULATOR_REPORT_INTERVAL_S": f"{max(trial_s / 2 / speedup, 0.05):g}",
        }, logs / f"emulator-{run}.log")
        emu.url = f"http://127.0.0.1:{emu_port}"
        self._procs = [ext, emu]
        if tuning:
            self._procs += self._start_tuning(run, env, logs)
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
        """The tuner and one coordinator for every node (``--all-nodes``)."""
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

def run_live_policy(api_client: Any, workload: pd.DataFrame, model: InterferenceModel, cluster: ClusterSpec, *,
                    policy: str, run: str, settings: LiveSettings, store: Any | None = None,
                    progress: Callable[[int], None] | None = None,
                    pin_nodes: bool = True) -> tuple[SimResult, dict[str, Any]]:
    """Submit ``workload`` as Jobs at their (compressed) arrival times and wait for all of them.

    Args:
        api_client: a ``kubernetes.client.ApiClient`` for the cluster.
        workload: the job table (job_id, submit_time, duration, num_gpus, model, batch_size).
        model: the interference model (memory estimates of the job types).
        cluster: the cluster shape (for the result's GPU count and node names).
        policy / run: the policy's name (for the result) and the run label of the nodes.
        settings: speedup, deadline, namespace.
        store: the state store the extender uses (reservations are counted at the end), or ``None``.
        progress: called with the number of finished Jobs.
        pin_nodes: select the nodes labelled ``run`` (the local cluster's); off on a user's cluster.

    Returns:
        ``(result, metrics)``: the simulator-shaped result and the live metrics (overhead
        breakdown, reservations left, wall time).

    Raises:
        TimeoutError: not every Job finished before the deadline (the message says how many).
    """
    from kubernetes import client

    from iadeep.jobtypes import JobType

    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    ns = settings.namespace or f"live-{run}"
    try:
        core.create_namespace({"metadata": {"name": ns}})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    _wait_service_account(core, ns)
    speedup = settings.speedup
    jobs = workload.reset_index(drop=True)
    submit0 = float(jobs["submit_time"].min()) if len(jobs) else 0.0
    span = float(jobs["submit_time"].max() - submit0) if len(jobs) else 0.0
    work = float((jobs["duration"] * jobs["num_gpus"]).sum()) / cluster.total_gpus
    longest = float(jobs["duration"].max()) if len(jobs) else 0.0  # a makespan is at least span + the longest job
    timeout = settings.timeout_s or 3.0 * (span + work + longest) / speedup + 120.0
    order = np.argsort(jobs["submit_time"].to_numpy(), kind="stable")
    finished = {"n": 0}
    done_at: dict[str, tuple[str, float]] = {}

    def on_done(name: str, kind: str, at: float) -> None:
        done_at[name] = (kind, at)
        finished["n"] += 1
        if progress is not None:
            progress(finished["n"])

    import threading

    selector = f"{RUN_LABEL}={run}"
    named = []
    for i in order:
        row = jobs.iloc[i]
        mem = float(model.mem_gib[model.type_id(JobType(str(row.model), int(row.batch_size)))])
        named.append(((float(row.submit_time) - submit0) / speedup,
                      job_manifest(row, int(i), namespace=ns, run=run, mem_gib=mem, speedup=speedup, pin_nodes=pin_nodes,
                                   gated=True)))
    submitter = GatedSubmitter(api_client, ns, selector, ahead_s=settings.ahead_s)
    errors: list[BaseException] = []
    try:
        p0 = time.time()
        # the first window's Jobs, before the clock starts (the pod watch outlives the run's deadline)
        created = submitter.prefill(named, p0 + timeout, watch_until=p0 + 2 * timeout + 60.0)
        prefill_s = time.time() - p0
        t0 = time.time() + 0.5  # the first arrival
        deadline = t0 + timeout
        waiter = threading.Thread(target=lambda: _guard(errors, watch_jobs, api_client, ns, selector, len(jobs), deadline,
                                                        on_done), name="iadeep-live-wait", daemon=True)
        waiter.start()
        lags = submitter.run([(t0 + offset, body) for offset, body in named], deadline, created=created)
        waiter.join(timeout=max(deadline - time.time(), 0) + 30)
    finally:
        submitter.close()
    errors += submitter.errors
    if errors:
        raise errors[0]
    if waiter.is_alive():
        raise TimeoutError(f"Jobs of run {run} not finished by the deadline")
    wall = time.time() - t0
    pods = api_json(core.list_namespaced_pod, ns, label_selector=selector).get("items") or []
    jobs_doc = api_json(batch.list_namespaced_job, ns, label_selector=selector).get("items") or []
    left = _reservations_left(store, settings.reservations_wait_s)
    result, breakdown = live_result(jobs, jobs_doc, pods, done_at, cluster=cluster, policy=policy, run=run, t0=t0,
                                    submit0=submit0, speedup=speedup, model=model)
    metrics = {"backend": "kubernetes", "speedup": speedup, "wall_s": wall, "jobs_per_wall_s": len(jobs) / wall if wall else 0.0,
               "reservations_left": left, "failed_jobs": sum(k == "Failed" for k, _ in done_at.values()),
               "replacement_pods": submitter.replacements,
               "submit_lag_s_median": float(np.median(lags)) if lags else 0.0,
               "submit_lag_s_p90": float(np.percentile(lags, 90)) if lags else 0.0, "create_ahead_s": settings.ahead_s,
               "prefilled_jobs": created, "prefill_s": prefill_s, "breakdown_s": breakdown, "namespace": ns}
    return result, metrics


def _guard(errors: list[BaseException], fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread
        errors.append(exc)


def _wait_service_account(core: Any, ns: str, timeout_s: float = 30.0) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", ns)
            return
        except ApiException:
            time.sleep(0.1)
    raise TimeoutError(f"namespace {ns}: no default service account after {timeout_s:.0f}s")


def _reservations_left(store: Any | None, wait_s: float) -> int | None:
    if store is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        n = len(store.assignments())
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def iter_runs(policies: list[str]) -> Iterator[tuple[str, str]]:
    """``(policy, run label)`` for each policy, labels unique per call."""
    tag = uuid.uuid4().hex[:5]
    for k, p in enumerate(policies):
        yield p, f"r{tag}{k}"
