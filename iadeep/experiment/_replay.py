"""Submitting a trace's Jobs at their arrival times, and following them until they finish.

Wall-clock latency is the live backend's error: every wall second is ``speedup`` emulated
seconds. Creating a Job at its arrival time puts the API write, the Job controller's sync and
the pod's creation between the arrival and kube-scheduler's first attempt (measured on the
100-job parity slice at load 16: the submitter fell a median 2.6 s, 530 emulated s, behind its
clock). :class:`GatedSubmitter` takes all of that off the arrival path:

1. a creator creates each Job ``ahead_s`` wall seconds before its arrival (``creators`` requests
   at once), its pod template carrying the scheduling gate :data:`ARRIVAL_GATE`
   (``spec.schedulingGates``, Kubernetes >= 1.30, GA: kube-scheduler does not try a gated pod,
   the extender does not count it as pending); the Job controller creates the pod meanwhile.
   The Jobs that arrive within ``ahead_s`` of the first arrival are created, and their pods
   seen, before the arrival clock starts (:meth:`GatedSubmitter.prefill`): a slice whose
   arrivals are denser than the API server takes Jobs (the 1,000-job benchmark: 1,000 arrivals
   in 0.9 wall seconds at 1000x, one Job created every 0.5 s on the loaded 2-core machine,
   created one at a time) would otherwise arrive as fast as Jobs can be created;
2. at the arrival time the submitting thread removes the gate and writes the arrival's wall
   time (:data:`SUBMIT_ANNOTATION`) in one merge patch of the pod (a burst of simultaneous
   arrivals is patched by a few threads at once; a patch that fails in transit or with a 5xx is
   sent again): the pod enters kube-scheduler's active queue then.

The pods' names (the Job controller generates them) come from a pod watch. :func:`follow` is the
list-then-watch loop both watches use (reopened on a server timeout, re-listed on ``410 Gone``
and errors), bounded by a deadline: nothing sleeps a worker for the whole run where a watch can
wait.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from iadeep._host import HeldClock
from iadeep.experiment._jobstatus import job_outcome

__all__ = ["ARRIVAL_GATE", "SUBMIT_ANNOTATION", "SUBMIT_WALL_ANNOTATION", "GatedSubmitter", "follow", "watch_jobs"]

log = logging.getLogger("iadeep.experiment")

ARRIVAL_GATE = "iadeep.io/arrival"
"""The scheduling gate a replayed Job's pod carries until its arrival time."""
SUBMIT_ANNOTATION = "iadeep.io/submit-time"
"""Pod annotation: when the pod arrived (its gate was removed), on the run's clock (Unix s, microseconds)."""
SUBMIT_WALL_ANNOTATION = "iadeep.io/submit-wall"
"""Pod annotation: the wall time of that arrival (Unix s; differs from the clock's when it was held)."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
OPEN_ATTEMPTS = 3


def api_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a ``kubernetes`` client method and return its body as JSON (no model decoding)."""
    resp = fn(*args, _preload_content=False, **kwargs)
    data = resp.data
    resp.release_conn()
    return json.loads(data) if data else {}


def follow(list_fn: Callable[..., Any], namespace: str, selector: str, deadline: float,
           handle: Callable[[dict[str, Any]], None], finished: Callable[[], bool]) -> None:
    """List, then watch the objects of ``list_fn`` (a namespaced ``list_*`` method of the
    ``kubernetes`` client) matching ``selector``, calling ``handle(object)`` for each listed or
    changed object, until ``finished()`` is true.

    Raises:
        TimeoutError: ``deadline`` (Unix s) passed first.
    """
    from kubernetes.client.exceptions import ApiException

    version = ""
    while not finished():
        left = deadline - time.time()
        if left <= 0:
            raise TimeoutError("deadline passed")
        try:
            if not version:
                doc = api_json(list_fn, namespace, label_selector=selector)
                for item in doc.get("items") or []:
                    handle(item)
                version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
                continue
            resp = list_fn(namespace, label_selector=selector, watch=True, resource_version=version,
                           allow_watch_bookmarks=True, timeout_seconds=max(1, int(min(left, 30))),
                           _preload_content=False, _request_timeout=(10, min(left, 30) + 10))
            try:
                buf = b""
                for chunk in resp.stream(None, decode_content=False):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":  # e.g. 410 Gone: list again
                            version = ""
                            break
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if ev.get("type") != "BOOKMARK":
                            handle(obj)
                    if finished() or not version:
                        break
            finally:
                resp.release_conn()
        except (ApiException, OSError, ValueError) as exc:
            log.warning("watch: %s", exc)
            version = ""
            time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - urllib3's own errors: list again
            log.warning("watch: %s", exc)
            version = ""
            time.sleep(0.5)


def watch_jobs(api_client: Any, namespace: str, selector: str, total: int, deadline: float,
               on_done: Callable[[str, str, float], None]) -> None:
    """Follow the Jobs until ``total`` have finished (:func:`~iadeep.experiment.job_outcome`:
    ``SuccessCriteriaMet`` or ``Complete``, ``FailureTarget`` or ``Failed``);
    ``on_done(name, "Complete" | "Failed", wall time seen)`` once per Job, at the first of them.

    Raises:
        TimeoutError: not all finished by ``deadline`` (the message says how many did not).
    """
    from kubernetes import client

    done: set[str] = set()

    def handle(job: dict[str, Any]) -> None:
        name = (job.get("metadata") or {}).get("name", "")
        if name in done:
            return
        outcome = job_outcome(job.get("status"))
        if outcome is not None:
            done.add(name)
            on_done(name, outcome, time.time())

    try:
        follow(client.BatchV1Api(api_client).list_namespaced_job, namespace, selector, deadline, handle,
               lambda: len(done) >= total)
    except TimeoutError:
        raise TimeoutError(f"{total - len(done)} of {total} Jobs not finished by the deadline") from None


class GatedSubmitter:
    """Creates the Jobs ahead of time, gated, and opens each at its arrival (module docstring).

    Args:
        api_client: a ``kubernetes.client.ApiClient``.
        namespace / selector: where the Jobs go and the label selector of their pods.
        ahead_s: how far ahead of its arrival (wall s) a Job is created.
        workers: threads patching the pods of simultaneous arrivals.
        creators: Job creations in flight at once.
        clock: the run's shared clock (:class:`iadeep.emulator.HeldClock`), or ``None``: wall time.
            With it, arrivals come at its time, and it is held from the moment a pod is opened until
            kube-scheduler decided it (the pod is bound, or marked unschedulable, or gone), at most
            ``hold_max_s`` wall seconds a pod (a gang's members wait at Permit, neither bound nor
            unschedulable), and for ``settle_s`` after each pod that ends (the extender releases its
            GPUs and kube-scheduler tries the pending pods again).
    """

    def __init__(self, api_client: Any, namespace: str, selector: str, *, ahead_s: float = 10.0, workers: int = 16,
                 creators: int = 8, clock: HeldClock | None = None, hold_max_s: float = 2.0, settle_s: float = 0.3):
        from kubernetes import client

        self.core, self.batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
        self.namespace, self.selector, self.ahead_s = namespace, selector, ahead_s
        self._pods: dict[str, list[str]] = {}  # Job name -> its first pods' names (a gang's: n_pods)
        self._want: dict[str, int] = {}  # Job name -> its pods (parallelism; 1 unless a gang)
        self._opened: dict[str, float] = {}  # Job -> when its arrival came (wall s)
        self._replaced: set[str] = set()  # replacement pods opened
        self._seen = threading.Condition()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="iadeep-live-arrive")
        self._reopen = ThreadPoolExecutor(1, thread_name_prefix="iadeep-live-reopen")
        self._creators = ThreadPoolExecutor(max(1, creators), thread_name_prefix="iadeep-live-create")
        self._watcher: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self.replacements = 0
        self.now: Callable[[], float] = clock.now if clock is not None else time.time
        self._holds = _Holds(clock, hold_max_s=hold_max_s, settle_s=settle_s) if clock is not None else None

    def _on_pod(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL) or (meta.get("labels") or {}).get("job-name")
        name = meta.get("name", "")
        if self._holds is not None:
            self._holds.seen(name, pod)
        reopen = False
        if job and not meta.get("deletionTimestamp"):
            with self._seen:
                first = self._pods.setdefault(job, [])
                if name in first:
                    pass
                elif job not in self._opened and len(first) < self._want.get(job, 1):
                    first.append(name)
                    self._seen.notify_all()
                elif (job in self._opened and name not in self._replaced
                      and (pod.get("spec") or {}).get("schedulingGates")):
                    # the Job replaced its pod (e.g. evicted for a preemption): the template's gate is
                    # on the new pod too, and the job's arrival has come already
                    self._replaced.add(name)
                    reopen = True
        if reopen:
            self._reopen.submit(self._guard, self._ungate, name, self._opened[job])

    def _ungate(self, pod: str, arrived: float) -> None:
        # the job's arrival stays the first pod's (that pod is gone once its Job replaced it)
        if self._holds is not None:
            self._holds.opened(pod)
        patch = {"metadata": {"annotations": {SUBMIT_ANNOTATION: f"{arrived:.6f}", SUBMIT_WALL_ANNOTATION: f"{time.time():.6f}"}},
                 "spec": {"schedulingGates": None}}
        api_json(self.core.patch_namespaced_pod, pod, self.namespace, patch, _content_type="application/merge-patch+json")
        self.replacements += 1

    def close(self) -> None:
        """Stop opening replacement pods (after the last Job finished)."""
        self._closed.set()
        self._reopen.shutdown(wait=False, cancel_futures=True)
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        if self._holds is not None:
            self._holds.close()

    def held_s(self) -> float:
        """Wall seconds the clock was held by this submitter's pods (0 without a clock)."""
        return self._holds.held_s if self._holds is not None else 0.0

    def _sleep_until(self, target: float) -> bool:
        """Wait until the clock reads ``target``; True when stopped first."""
        while (pause := target - self.now()) > 0:
            if self._stop.wait(min(pause, 0.05) if self._holds is not None else pause):
                return True
        return self._stop.is_set()

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread
            self.errors.append(exc)
            self._stop.set()
            self._closed.set()
            with self._seen:
                self._seen.notify_all()

    def _complete(self, job: str) -> bool:
        """Whether all of the Job's first pods were seen (call with ``_seen`` held)."""
        return len(self._pods.get(job, ())) >= self._want.get(job, 1)

    def _create(self, body: dict[str, Any]) -> None:
        with self._seen:
            self._want[body["metadata"]["name"]] = int((body.get("spec") or {}).get("parallelism") or 1)
        if not self._stop.is_set():
            api_json(self.batch.create_namespaced_job, self.namespace, body)

    def _create_all(self, bodies: Sequence[tuple[float, dict[str, Any]]]) -> None:
        pending = []
        for target, body in bodies:
            if self._sleep_until(target - self.ahead_s):
                return
            for f in pending:
                if f.done():
                    f.result()  # a failed creation's error ends the replay
            pending = [f for f in pending if not f.done()]
            pending.append(self._creators.submit(self._create, body))
        for f in pending:
            f.result()

    def _watch_pods(self, deadline: float) -> None:
        """Start the pod watch (once): it runs until :meth:`close` and also opens the Jobs'
        replacement pods."""
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._guard, name="iadeep-live-pods", daemon=True, args=(
                follow, self.core.list_namespaced_pod, self.namespace, self.selector, deadline, self._on_pod,
                self._closed.is_set))
            self._watcher.start()

    def prefill(self, bodies: Sequence[tuple[float, dict[str, Any]]], deadline: float, *, watch_until: float) -> int:
        """Before the arrival clock starts: create the Jobs arriving within ``ahead_s`` of the
        first arrival (``(arrival offset in wall s, Job body)``, in arrival order) and wait until
        the Job controller made their pods. The pod watch started here runs until
        ``watch_until`` (Unix s; at least the replay's deadline) or :meth:`close`.

        Returns:
            How many Jobs were created (pass it to :meth:`run` as ``created``).

        Raises:
            TimeoutError: the pods were not all there by ``deadline`` (Unix s); a creation's error.
        """
        first = bodies[0][0] if bodies else 0.0
        head = [body for offset, body in bodies if offset - first < self.ahead_s]
        self._watch_pods(watch_until)
        for f in [self._creators.submit(self._create, body) for body in head]:
            f.result()
        names = [b["metadata"]["name"] for b in head]
        with self._seen:
            while not all(self._complete(n) for n in names):
                if self.errors:
                    raise self.errors[0]
                if time.time() > deadline:
                    raise TimeoutError(f"{sum(not self._complete(n) for n in names)} of the {len(names)} Jobs' pods created "
                                       f"ahead of the replay were not there by the deadline")
                self._seen.wait(0.5)
        return len(head)

    def _open(self, job: str, target: float, deadline: float) -> float:
        """Wait for the Job's pods (a gang's: all of them), remove their gates at ``target``;
        returns the lag (s)."""
        with self._seen:
            while not self._complete(job):
                if self._stop.is_set() or time.time() > deadline:
                    raise TimeoutError(f"the pod(s) of Job {job} were not created by the deadline")
                self._seen.wait(0.5)
            pods = list(self._pods[job])
        if self._holds is not None:  # before the gates go: kube-scheduler may decide at once
            for pod in pods:
                self._holds.opened(pod)
        now = self.now()
        for pod in pods:
            self._open_pod(job, pod, now)
        return now - target

    def _open_pod(self, job: str, pod: str, now: float) -> None:
        # a merge patch (null deletes the gates): the same answer when sent twice, so a request
        # that failed in transit is simply sent again
        patch = {"metadata": {"annotations": {SUBMIT_ANNOTATION: f"{now:.6f}", SUBMIT_WALL_ANNOTATION: f"{time.time():.6f}"}},
                 "spec": {"schedulingGates": None}}
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                api_json(self.core.patch_namespaced_pod, pod, self.namespace, patch,
                         _content_type="application/merge-patch+json")
                with self._seen:
                    self._opened[job] = now
                break
            except Exception as exc:  # noqa: BLE001 - connection errors and 5xx: again, a few times
                status = getattr(exc, "status", None)
                if attempt == OPEN_ATTEMPTS or (status is not None and status < 500 and status != 429):
                    raise
                log.warning("opening the pod of Job %s: %s (attempt %d)", job, exc, attempt)
                time.sleep(0.1 * attempt)

    def run(self, bodies: Sequence[tuple[float, dict[str, Any]]], deadline: float, *, created: int = 0) -> list[float]:
        """Create every Job (``(arrival time on the clock, Job body)``, in arrival order; the first
        ``created`` exist already: :meth:`prefill`) ahead of its arrival and open each at its arrival.

        Returns:
            Per Job (in the given order), how late its gate was removed (s of the clock).

        Raises:
            TimeoutError: a pod was not there by ``deadline``; the first error of the creator or
                the pod watch.
        """
        self._watch_pods(deadline)
        creator = threading.Thread(target=self._guard, args=(self._create_all, bodies[created:]), name="iadeep-live-create",
                                   daemon=True)
        creator.start()
        futures = []
        try:
            for target, body in bodies:
                if self._sleep_until(target):
                    break
                futures.append(self._pool.submit(self._open, body["metadata"]["name"], target, deadline))
            lags = [f.result() for f in futures]
        finally:
            self._stop.set()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._creators.shutdown(wait=False, cancel_futures=True)
            creator.join(timeout=30)
        if self.errors:
            raise self.errors[0]
        return lags


class _Holds:
    """The submitter's holds of the run's clock, one per pod being decided (``GatedSubmitter``'s
    ``clock``): a pod's hold ends when the pod watch shows it bound, unschedulable, ended or gone,
    or after ``hold_max_s`` wall seconds; a pod seen ended holds it ``settle_s`` more, once.

    A thread calls :meth:`expire` every 20 ms; ``wall`` is the wall clock both read (Unix s;
    ``time.time``, a test's own to step time by hand)."""

    def __init__(self, clock: HeldClock, *, hold_max_s: float, settle_s: float,
                 wall: Callable[[], float] = time.time) -> None:
        self.clock, self.hold_max_s, self.settle_s, self._wall = clock, hold_max_s, settle_s, wall
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # pod -> wall time its hold began
        self._ended: set[str] = set()
        self._timers: list[tuple[float, str]] = []  # (wall time to release, pod) of settles
        self._done = threading.Event()
        self.held_s = 0.0  # wall seconds at least one of these holds was outstanding
        self._first: float | None = None
        self._sweeper = threading.Thread(target=self._sweep, name="iadeep-live-clock", daemon=True)
        self._sweeper.start()

    def _take(self, key: str) -> None:  # with _lock
        if key not in self._since:
            if not self._since:
                self._first = self._wall()
            self._since[key] = self._wall()
            self.clock.hold()

    def _drop(self, key: str) -> None:  # with _lock
        if self._since.pop(key, None) is not None:
            # the figure first: whoever sees the clock released (another thread) reads it complete
            if not self._since and self._first is not None:
                self.held_s += self._wall() - self._first
                self._first = None
            self.clock.release()

    def opened(self, pod: str) -> None:
        with self._lock:
            self._take(pod)

    def seen(self, pod: str, obj: dict[str, Any]) -> None:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        ended = status.get("phase") in ("Succeeded", "Failed") or bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        # a gated pod's condition is PodScheduled=False too, with the reason SchedulingGated
        unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                            and c.get("reason") in ("Unschedulable", "SchedulerError")
                            for c in status.get("conditions") or [])
        with self._lock:
            if pod in self._since and (spec.get("nodeName") or unschedulable or ended):
                self._drop(pod)
            if ended and pod not in self._ended and self.settle_s > 0:
                self._ended.add(pod)
                key = f"{pod}/settle"
                self._take(key)
                self._timers.append((self._wall() + self.settle_s, key))

    def _sweep(self) -> None:
        while not self._done.wait(0.02):
            self.expire()

    def expire(self) -> None:
        """End the holds due now: a pod undecided ``hold_max_s`` after its hold began, a settle
        ``settle_s`` after its pod was seen ended."""
        now = self._wall()
        with self._lock:
            for key, since in list(self._since.items()):
                if not key.endswith("/settle") and now - since > self.hold_max_s:
                    log.debug("clock: pod %s undecided after %.1f s wall, released", key, now - since)
                    self._drop(key)
            due = [k for t, k in self._timers if t <= now]
            self._timers = [(t, k) for t, k in self._timers if t > now]
            for key in due:
                self._drop(key)

    def close(self) -> None:
        """Release every hold left (the run is over)."""
        self._done.set()
        self._sweeper.join(timeout=2)
        with self._lock:
            for key in list(self._since):
                self._drop(key)
            self._timers = []
