"""The GPU emulator service: emulated GPUs on nodes without real ones (kwok, or a real node with
emulated GPUs), driven by the interference model.

Three followers and a completer, each a daemon thread:

- **nodes**: lists, then watches the nodes matching ``node_selector``; publishes each node's GPU
  inventory in the state store (on a lease, renewed) as the device plugin does for real GPUs. The
  GPUs are read from the node annotation ``iadeep.io/gpus`` (JSON list of ``index``, ``uuid``,
  ``memGiB``; the local control plane's kwok nodes carry it), else from the labels
  ``iadeep.io/gpu-count`` and ``iadeep.io/gpu-mem-gib``.
- **pods**: lists, then watches every pod. A pod bound to an emulated node that carries the
  extender's GPU annotations (``iadeep.io/gpu-index``) starts running on those GPUs at once; one
  that succeeds, fails or is deleted leaves them. Every change of a GPU's co-located set changes
  the rates of the jobs on it (:mod:`._gpus`) and, with ``report_measurements``, each affected job's
  measured throughput is written to the state store (:class:`iadeep.state.Measurement`: the
  records the node coordinator reads; a training job reports the same through the SDK), and with
  ``update_job_records`` its job record's ``remaining_s`` is brought up to date (the work the
  placement policy weighs).
- **batch sizes** (``follow_batch_sizes``): watches ``batchsizes/`` in the state store, where the
  node coordinator writes each trial's and each session's final batch sizes, and changes the job's
  type as a training job's SDK would (:meth:`EmulatedGpus.set_type`: the rates of its GPU's jobs
  change, with the goodput gain of the new size). A job in a session (latest assignment a trial)
  reports its throughput every ``report_interval_s``, as the SDK's reporter thread does, so that
  the coordinator's rounds get their measurements; an assignment that arrives before the pod is
  seen applies when it starts (:class:`iadeep.emulator._batchsizes.BatchSizeFollower`).
- **completer**: sleeps until the next job's work is done (or a change), then completes pods
  annotated ``iadeep.io/emulated``: it writes the exact start and end times as annotations
  (``iadeep.io/emulated-start`` / ``-end``, Unix seconds with sub-second digits: the API's own
  timestamps have 1 s resolution, 1,000 emulated seconds at 1000x) and sets the pod's status to
  ``Succeeded`` (:meth:`KubeApi.complete_pod`). A pod whose work is done before kwok has marked it
  ``Running`` is completed when it is.

HTTP (:meth:`EmulatorService.app`, served by ``iadeep emulator serve`` on ``host:port``):
``/healthz``; ``/readyz``, 503 until nodes and pods were listed once and while etcd does not
answer; ``/metrics``, Prometheus text (``iadeep_emulator_*``: :mod:`iadeep.emulator._metrics`).

Emulated time: a pod's work (``iadeep.io/duration-s``, seconds on a dedicated GPU) advances at
``rate x speedup`` per wall second, the speedup from the pod's ``iadeep.io/emulation-speedup``
annotation or the settings.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from iadeep.emulator._batchsizes import BatchSizeFollower
from iadeep.emulator._checkpoint import (
    ANNOTATION_EMULATED_EVICTED,
    ANNOTATION_EMULATED_EVICTIONS,
    ANNOTATION_EMULATED_FIRST_START,
    end_evicted_pod,
    job_key,
    keep_checkpoint,
    read_checkpoint,
)
from iadeep._host import HeldClock
from iadeep.emulator._gpus import EmulatedGpus, RateChange
from iadeep.emulator._kube import KubeApi, KubeCallError
from iadeep.emulator._metrics import EmulatorMetrics
from iadeep.emulator._settings import EmulatorSettings
from iadeep.podspec import (
    ANNOTATION_ASSUME_TIME,
    ANNOTATION_DURATION,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM,
    PodFacts,
    PodJob,
    PodSpecError,
    TypeResolver,
    load_quantity_parser,
    pod_demand,
    pod_job,
)
from iadeep.interference import InterferenceModel
from iadeep.state import (
    BatchSizeAssignment,
    GpuInfo,
    JobCheckpoint,
    JobRecord,
    Measurement,
    NodeInventory,
    StateStore,
    StoreUnavailable,
)

__all__ = ["EmulatorService", "node_inventory", "ANNOTATION_EMULATED", "ANNOTATION_EMULATED_START", "ANNOTATION_EMULATED_END",
           "ANNOTATION_EMULATED_BATCH_SIZE", "ANNOTATION_EMULATED_TRIALS", "ANNOTATION_EMULATED_EVICTED",
           "ANNOTATION_EMULATED_EVICTIONS", "ANNOTATION_EMULATED_FIRST_START", "ANNOTATION_SPEEDUP", "NODE_ANNOTATION_GPUS", "job_key"]

log = logging.getLogger("iadeep.emulator")

ANNOTATION_EMULATED = "iadeep.io/emulated"
"""On a pod: the emulator completes it when its work is done (kwok's own completion stage skips it)."""
ANNOTATION_SPEEDUP = "iadeep.io/emulation-speedup"
"""On a pod: emulated seconds per wall second (decimal)."""
ANNOTATION_EMULATED_START = "iadeep.io/emulated-start"
"""Written by the emulator: when the pod's GPUs started its work, Unix seconds (decimal)."""
ANNOTATION_EMULATED_END = "iadeep.io/emulated-end"
"""Written by the emulator: when its work was done, Unix seconds (decimal)."""
ANNOTATION_EMULATED_BATCH_SIZE = "iadeep.io/emulated-batch-size"
"""Written by the emulator: the batch size the job ran at when its work was done."""
ANNOTATION_EMULATED_TRIALS = "iadeep.io/emulated-trials"
"""Written by the emulator: the tuning trials the job ran (batch-size assignments of trials)."""
NODE_ANNOTATION_GPUS = "iadeep.io/gpus"
"""On a node: its GPUs as JSON, ``[{"index": 0, "uuid": "...", "memGiB": 32}, ...]``."""

_ENDED = ("Succeeded", "Failed")


@dataclass
class _Pod:
    obj: dict[str, Any]
    running: bool = False  # kwok marked it Running
    done: bool = False  # its work is done (it left its emulated GPUs); complete when running
    completing: bool = False
    started_s: float = 0.0
    finished_s: float = 0.0
    batch_size: int = 0  # at the end of its work
    trials: int = 0  # tuning trials it ran (batch-size assignments with trial >= 0)
    evictions: int = 0  # the job's pods evicted before this one (from its checkpoint)
    first_started_s: float = 0.0  # when the job's first pod started (this one's start unless resumed)


def node_inventory(node: dict[str, Any]) -> NodeInventory | None:
    """The GPU inventory a node advertises (annotation, else labels); ``None`` when it has none.

    Raises:
        ValueError: the annotation is not a JSON list of GPUs (the message names the node).
    """
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    raw = (meta.get("annotations") or {}).get(NODE_ANNOTATION_GPUS)
    if raw:
        try:
            gpus = tuple(GpuInfo(int(g["index"]), float(g["memGiB"]), str(g.get("uuid", ""))) for g in json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"node {name}: annotation {NODE_ANNOTATION_GPUS} is not a list of GPUs: {exc}") from None
        return NodeInventory(name, gpus) if gpus else None
    labels = meta.get("labels") or {}
    try:
        count, mem = int(labels.get("iadeep.io/gpu-count", 0)), float(labels.get("iadeep.io/gpu-mem-gib", 0))
    except ValueError as exc:
        raise ValueError(f"node {name}: GPU labels: {exc}") from None
    if count <= 0 or mem <= 0:
        return None
    return NodeInventory(name, tuple(GpuInfo(i, mem, f"GPU-{name}-{i}") for i in range(count)))


def _log_failure(done: Future[None]) -> None:
    """A background call (a completion, a batch of writes) that failed in a way it does not handle
    itself is logged (a worker thread's exception would otherwise vanish with its future)."""
    exc = None if done.cancelled() else done.exception()
    if exc is not None:
        log.error("emulator background call failed: %r", exc)


class EmulatorService(BatchSizeFollower):
    """Emulated GPUs for the nodes matching the settings' selector (see the module docstring).

    Args:
        settings: the settings.
        store: the state store (inventories, measurements).
        kube: the Kubernetes calls.
        model: the interference model.
        clock: Unix time, injectable; ignored with ``held``.
        held: a live replay's shared clock (:mod:`iadeep.emulator._clock`): time is measured with
            it, and it is held from the moment a job's work is done until its pod's completion is
            written (the API calls that free its GPUs take no emulated time).
    """

    def __init__(self, settings: EmulatorSettings, *, store: StateStore, kube: KubeApi, model: InterferenceModel,
                 clock: Callable[[], float] = time.time, held: HeldClock | None = None):
        self.settings = settings
        self.store = store
        self.kube = kube
        self.model = model
        self.held = held
        self.clock = held.now if held is not None else clock
        self.gpus = EmulatedGpus(model, seed=settings.seed, measurement_noise=settings.measurement_noise)
        self.types = TypeResolver(model, settings.default_model, settings.default_batch_size)
        self.nodes: dict[str, NodeInventory] = {}
        self.pods: dict[str, _Pod] = {}
        self.completed = 0
        self.measurements = 0
        self.errors = 0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listed = {"nodes": threading.Event(), "pods": threading.Event()}
        self._assigned: dict[str, BatchSizeAssignment] = {}  # pod -> latest batch-size assignment
        self.resized = 0
        self._completer: ThreadPoolExecutor | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._written: dict[str, tuple[float, float]] = {}  # pod -> (remaining_s written, wall time)
        self.metrics = EmulatorMetrics(self.status)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the followers and the completer (idempotent)."""
        if self._threads:
            return
        load_quantity_parser()  # now, not inside the first pod event (under the lock)
        self._stop.clear()
        self._completer = ThreadPoolExecutor(self.settings.complete_workers, thread_name_prefix="iadeep-emulator-completer")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="iadeep-emulator-writer")
        selector = {"label_selector": self.settings.node_selector} if self.settings.node_selector else {}
        for name, target in (("nodes", lambda: self._follow("nodes", self._on_node, selector)),
                             ("pods", lambda: self._listed["nodes"].wait() and self._follow("pods", self._on_pod, {})),
                             ("complete", self._complete_loop), ("keepalive", self._keepalive_loop),
                             ("progress", self._progress_loop), ("batchsizes", self._batch_size_loop),
                             ("reports", self._session_report_loop)):
            t = threading.Thread(target=target, name=f"iadeep-emulator-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """True once nodes and pods have been listed once."""
        deadline = time.monotonic() + timeout_s
        return all(e.wait(max(deadline - time.monotonic(), 0)) for e in self._listed.values())

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        for t in self._threads:
            t.join(timeout=2)
        self._threads = []
        if self._completer is not None:
            self._completer.shutdown(wait=False, cancel_futures=True)
            self._completer = None
        if self._writer is not None:
            self._writer.shutdown(wait=False)
            self._writer = None

    def status(self) -> dict[str, Any]:
        """Counts for humans and tests: nodes, running jobs, completed pods, measurements, errors."""
        with self._lock:
            return {"nodes": len(self.nodes), "running": len(self.gpus.jobs), "completed": self.completed,
                    "measurements": self.measurements, "resized": self.resized, "errors": self.errors}

    def app(self) -> Any:
        """The HTTP side: ``/healthz``, ``/readyz``, ``/metrics`` (module docstring); a FastAPI app."""
        from iadeep._serving import probe_app

        def not_ready() -> str | None:
            if not all(e.is_set() for e in self._listed.values()):
                return "nodes and pods not listed yet"
            return None if self.store.healthy() else "etcd not reachable"

        return probe_app("iadeep emulator", self.metrics.registry, not_ready)

    # -- following ---------------------------------------------------------------------------
    def _follow(self, kind: str, handle: Callable[[str, dict[str, Any]], None], selectors: dict[str, str]) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    items, version = self.kube.list(kind, **selectors)
                    for obj in items:
                        handle("ADDED", obj)
                    self._listed[kind].set()
                for event, obj in self.kube.watch(kind, version, timeout_s=self.settings.kube.watch_timeout_s, **selectors):
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        version = str(rv)
                    if event != "BOOKMARK":
                        handle(event, obj)
                    if self._stop.is_set():
                        return
            except KubeCallError as exc:
                if exc.status != 410:
                    log.warning("%s", exc)
                    self._stop.wait(1.0)
                version = ""
            except Exception:  # noqa: BLE001 - a follower never dies
                log.exception("following %s failed", kind)
                version = ""
                self._stop.wait(1.0)

    def _on_node(self, event: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        if event == "DELETED":
            with self._lock:
                self.nodes.pop(name, None)
            return
        try:
            inv = node_inventory(node)
        except ValueError as exc:
            log.warning("%s", exc)
            return
        with self._lock:
            if inv is None or self.nodes.get(name) == inv:
                return
        try:
            self.store.put_inventory(inv, lease_ttl_s=self.settings.inventory_ttl_s)
        except StoreUnavailable as exc:
            log.warning("could not publish node %s: %s", name, exc)
            return
        with self._lock:
            self.nodes[name] = inv
            self._lock.notify_all()

    def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid, node = meta.get("uid", ""), spec.get("nodeName") or ""
        ann = meta.get("annotations") or {}
        ended = event == "DELETED" or status.get("phase") in _ENDED
        terminating = bool(meta.get("deletionTimestamp")) and not ended  # evicted or deleted: stop it as a kubelet would
        resume = None
        if not ended and not terminating and uid not in self.pods and node and ann.get(ANNOTATION_GPU_INDEX):
            resume = self._checkpoint_of(pod)  # a replacement pod resumes its job (before the lock: a store call)
        now = self.clock()
        changes: list[RateChange] = []
        kept: JobCheckpoint | None = None
        evicted: _Pod | None = None
        with self._lock:
            known = self.pods.get(uid)
            if ended or (terminating and known is not None):
                self._assigned.pop(uid, None)
                if known is not None:
                    del self.pods[uid]
                    key = job_key(known.obj)
                    if not known.done and uid in self.gpus.jobs and key is not None:
                        # left its GPUs before its work was done: the job's progress is kept for its next pod
                        kept = JobCheckpoint(key, self.gpus.progress_of(uid, now), known.evictions + 1, now,
                                             known.first_started_s or known.started_s)
                        if terminating:
                            evicted = known
                    changes = self.gpus.stop(uid, now_s=now)
            elif known is not None:
                known.obj = pod
                running = status.get("phase") == "Running"
                if running and not known.running and known.done:
                    self._lock.notify_all()  # done before kwok marked it Running: complete it now
                known.running = running
            elif node in self.nodes and ann.get(ANNOTATION_GPU_INDEX) and not terminating:
                try:
                    start = self._start_args(pod)
                except (PodSpecError, ValueError) as exc:
                    log.warning("pod %s/%s cannot be emulated: %s", meta.get("namespace"), meta.get("name"), exc)
                    self.errors += 1
                    return
                if resume is not None:  # the work left at the checkpoint, plus the restart's cost
                    start["work_s"] = resume.remaining_s + self.settings.checkpoint_cost_s
                self.pods[uid] = _Pod(pod, running=status.get("phase") == "Running", started_s=now,
                                      evictions=resume.evictions if resume is not None else 0,
                                      first_started_s=(resume.first_started_at or now) if resume is not None else now)
                base = start.pop("type_id")
                early = self._assigned.get(uid)
                current = self._type_at(base, early.batch_size) if early is not None else None
                changes = self.gpus.start(uid, node, now_s=now, type_id=base if current is None else current,
                                          base_type_id=base, **start)
            if changes:
                self._lock.notify_all()
        self._report(changes, now)
        if kept is not None:
            self._keep(kept, pod if evicted is not None else None, evicted.started_s if evicted is not None else now, now)

    def _checkpoint_of(self, pod: dict[str, Any]) -> JobCheckpoint | None:
        return read_checkpoint(self.store, pod)

    def _keep(self, checkpoint: JobCheckpoint, pod: dict[str, Any] | None, started: float, now: float) -> None:
        """Write the job's checkpoint; end an evicted pod (:func:`end_evicted_pod`)."""
        keep_checkpoint(self.store, checkpoint)
        if pod is not None and not end_evicted_pod(self.kube, pod, started, now, ANNOTATION_EMULATED_START):
            with self._lock:
                self.errors += 1

    def _job_of(self, facts: PodFacts) -> PodJob:
        """The pod's job (:func:`iadeep.podspec.pod_job`, the extender's reading, with these defaults)."""
        s = self.settings
        return pod_job(facts, default_model=s.default_model, default_batch_size=s.default_batch_size,
                       default_duration_s=s.default_duration_s)

    def _job_record(self, pod: dict[str, Any], gpus: tuple[int, ...], remaining_s: float) -> JobRecord | None:
        """The extender's job record of a bound pod, with ``remaining_s`` brought up to date and
        submitted at its assume time; ``None`` when unreadable. Its demand is
        :func:`iadeep.podspec.pod_demand`, as the extender's; a pod bound without asking for GPU
        memory (by hand) has the memory the extender reserved (``iadeep.io/gpu-mem-gib``)."""
        s = self.settings
        facts = PodFacts.from_api(pod)
        ann = facts.annotations
        try:
            demand = pod_demand(facts, default_model=s.default_model, default_batch_size=s.default_batch_size,
                                default_duration_s=s.default_duration_s)
            job = demand if demand is not None else self._job_of(facts)
            mem = demand.mem_gib if demand is not None else float(ann.get(ANNOTATION_GPU_MEM, 0.0))
            return JobRecord(facts.uid, facts.namespace, facts.name, job.model, job.batch_size, len(gpus), mem,
                             remaining_s=float(remaining_s), submitted_at=int(ann.get(ANNOTATION_ASSUME_TIME, 0)) / 1e9,
                             gpu_models=job.gpu_models, gang=job.gang)
        except (PodSpecError, ValueError, TypeError):
            return None

    def _start_args(self, pod: dict[str, Any]) -> dict[str, Any]:
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        s = self.settings
        gpus = [int(x) for x in ann[ANNOTATION_GPU_INDEX].split(",") if x.strip()]
        job = self._job_of(PodFacts.from_api(pod))
        type_id = self.types.resolve(job.model, job.batch_size)
        work = job.duration_s
        speedup = float(ann.get(ANNOTATION_SPEEDUP, s.speedup))
        if not (speedup > 0) or not (work >= 0):
            raise ValueError(f"{ANNOTATION_SPEEDUP}={speedup} / {ANNOTATION_DURATION}={work} out of range")
        return {"gpus": gpus, "type_id": type_id, "work_s": work, "speedup": speedup}

    def _report(self, changes: list[RateChange], now: float) -> None:
        s = self.settings
        if not changes or not (s.report_measurements or s.update_job_records):
            return
        measured, records = [], []
        with self._lock:
            for c in changes:
                job, pod = self.gpus.jobs.get(c.uid), self.pods.get(c.uid)
                if job is None or pod is None:
                    continue
                if s.report_measurements:
                    measured.append(Measurement(c.uid, self.gpus.measure(c.uid), self.model.types[job.type_id].batch_size, now))
                if s.update_job_records:
                    records.append(self._job_record(pod.obj, job.gpus, self.gpus.progress_of(c.uid, now)))
        writer = self._writer
        if writer is None:  # not started (a caller driving the service by hand): write now
            self._write(measured, records, now)
        else:  # off the calling thread: the pod watch must not wait for etcd
            writer.submit(self._write, measured, records, now).add_done_callback(_log_failure)

    def _write(self, measured: list[Measurement], records: list[JobRecord | None], now: float) -> None:
        """The state-store writes of :meth:`_report`, in order (one writer thread while the
        service runs): the pod watch hands each event's writes over and goes on (the 1,000-job live
        benchmark measured a median 35 s from a pod's bind to its start while the watch thread made
        them itself)."""
        try:
            for m in measured:
                self.store.add_measurement(m)
                self.measurements += 1
            self._put_records(records, now)
        except StoreUnavailable as exc:
            log.warning("could not report progress: %s", exc)

    def _put_records(self, records: list[JobRecord | None], now: float) -> None:
        for r in records:
            if r is not None:
                self.store.put_job(r)
                self._written[r.pod_uid] = (r.remaining_s, now)

    def _stale(self, uid: str, remaining_s: float, now: float) -> bool:
        """Whether the extender's projection of the job's record (work left falling at 1 per wall
        second since it was written: :mod:`iadeep.extender._view`) is further from ``remaining_s``
        than the settings' tolerance."""
        written = self._written.get(uid)
        if written is None:
            return True
        projected = max(written[0] - (now - written[1]), 0.0)
        s = self.settings
        return abs(projected - remaining_s) > max(s.progress_tolerance * remaining_s, s.progress_tolerance_s)

    # -- completing --------------------------------------------------------------------------
    def _complete_loop(self) -> None:
        while not self._stop.is_set():
            todo: list[tuple[dict[str, Any], float, float]] = []
            changes: list[RateChange] = []
            with self._lock:
                now = self.clock()
                for uid in self.gpus.due(now):
                    p = self.pods.get(uid)
                    job = self.gpus.jobs.get(uid)
                    if p is None or job is None:
                        continue
                    ann = (p.obj.get("metadata") or {}).get("annotations") or {}
                    if ANNOTATION_EMULATED not in ann:
                        continue  # not ours to complete (kwok's own timer): it runs on
                    # the work is done: the job leaves its GPUs at its finish time (partners speed
                    # up from then on), whatever the API calls below take
                    p.done, p.finished_s = True, self.gpus.finish_time(job)
                    p.batch_size = self.model.types[job.type_id].batch_size
                    changes += self.gpus.stop(uid, now_s=p.finished_s)
                for p in self.pods.values():
                    if p.done and p.running and not p.completing:
                        p.completing = True
                        if self.held is not None:  # released once the completion is written
                            self.held.hold()
                        todo.append((p.obj, p.started_s, p.finished_s, p.batch_size, p.trials, p.evictions,
                                     p.first_started_s))
                if not todo and not changes:
                    nxt = self.gpus.next_due()
                    wait = 1.0 if nxt is None else min(max(nxt - now, 0.0), 1.0)
                    self._lock.wait(wait)
                    continue
            self._report(changes, now)
            # the API calls run beside this loop, so that the next finished jobs leave their GPUs on time
            completer = self._completer
            for args in todo:
                if completer is None:
                    return
                completer.submit(self._complete, *args).add_done_callback(_log_failure)

    def _complete(self, pod: dict[str, Any], started: float, finished: float, batch: int, trials: int,
                  evictions: int = 0, first_started: float = 0.0) -> None:
        try:
            self._write_completion(pod, started, finished, batch, trials, evictions, first_started)
        finally:
            if self.held is not None:
                self.held.release()

    def _write_completion(self, pod: dict[str, Any], started: float, finished: float, batch: int, trials: int,
                          evictions: int, first_started: float) -> None:
        meta = pod.get("metadata") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        try:
            self.kube.annotate_pod(ns, name, uid, {ANNOTATION_EMULATED_START: f"{started:.6f}",
                                                   ANNOTATION_EMULATED_END: f"{finished:.6f}",
                                                   ANNOTATION_EMULATED_BATCH_SIZE: str(batch),
                                                   ANNOTATION_EMULATED_TRIALS: str(trials),
                                                   ANNOTATION_EMULATED_EVICTIONS: str(evictions),
                                                   ANNOTATION_EMULATED_FIRST_START: f"{first_started or started:.6f}"})
            self.kube.complete_pod(pod, started_s=started, finished_s=finished)
            self.metrics.completion_lag.observe(max(self.clock() - finished, 0.0))
            with self._lock:
                self.completed += 1
            key = job_key(pod)
            if evictions and key is not None:  # the job is done: its checkpoint is no longer needed
                try:
                    self.store.delete_checkpoint(key)
                except StoreUnavailable as exc:
                    log.warning("job %s: could not delete its checkpoint: %s", key, exc)
        except KubeCallError as exc:
            with self._lock:
                self.errors += 1
                p = self.pods.get(uid)
                if p is not None:
                    p.completing = False  # tried again on the next pass
            if exc.status != 404:
                log.warning("could not complete pod %s/%s: %s", ns, name, exc)
                self._stop.wait(0.2)

    def _progress_loop(self) -> None:
        """Every ``progress_interval_s``, bring the running jobs' records up to date: the
        extender's view projects a job's remaining work at rate 1 per wall second from the last
        record, which under a speedup (and under interference) falls behind at once. Only the
        records that drifted beyond the tolerance (``progress_tolerance`` of the work left, at
        least ``progress_tolerance_s``) are written: every record every 0.2 s was 2,500 etcd
        writes per second with 500 jobs running in the 1,000-job benchmark, and each a watch
        event the extender applies."""
        interval = self.settings.progress_interval_s
        if not self.settings.update_job_records or interval <= 0:
            return
        while not self._stop.wait(interval):
            self.progress_pass()

    def progress_pass(self) -> int:
        """One pass of the progress writer (:meth:`_progress_loop`); returns the records written."""
        now = self.clock()
        with self._lock:
            left = {uid: self.gpus.progress_of(uid, now) for uid in self.gpus.jobs if uid in self.pods}
            records = [self._job_record(self.pods[uid].obj, self.gpus.jobs[uid].gpus, r)
                       for uid, r in left.items() if self._stale(uid, r, now)]
            for uid in [u for u in self._written if u not in self.gpus.jobs]:
                del self._written[uid]
        try:
            self._put_records(records, now)
        except StoreUnavailable as exc:
            log.warning("could not report progress: %s", exc)
            return 0
        return sum(r is not None for r in records)

    def _keepalive_loop(self) -> None:
        while not self._stop.wait(self.settings.inventory_ttl_s / 3):
            with self._lock:
                nodes = list(self.nodes.values())
            for inv in nodes:
                try:
                    if not self.store.keepalive(inv.node):
                        self.store.put_inventory(inv, lease_ttl_s=self.settings.inventory_ttl_s)
                except StoreUnavailable as exc:
                    log.warning("inventory keepalive failed: %s", exc)
                    break
