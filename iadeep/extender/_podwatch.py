"""Following the cluster's pods: a reservation is released as soon as its pod ends.

A pod that succeeded, failed or was deleted holds GPU memory in etcd until something releases
it; kube-scheduler meanwhile refuses pods that would fit. :class:`PodFollower` follows the pods
the way a Kubernetes informer does: one list (its ``resourceVersion``), then a watch from there,
reopened when the server closes it (``timeout_s``) and re-listed when the server answers
``410 Gone`` (the version is older than the API server's watch cache). For every pod that is
``Succeeded``/``Failed`` or deleted it calls ``on_ended(uids)``, which releases the reservations
(:meth:`ExtenderService.release_pods`, the one release path, also used by the periodic sweep).
The watch delivers such a change within milliseconds of the API server storing it; the sweep
(``CacheSettings.sweep_interval_s``) remains as a safety net for what a watch can miss: a
reservation whose pod never existed, a bind that was never completed, an outage of the follower.

The same stream keeps :class:`GangMembers`: the live members of every gang (the pods labelled
:data:`~iadeep.podspec.GANG_LABEL`), from which the gang's decision reads them
(:mod:`iadeep.extender._gang`) while the follower is :attr:`~PodFollower.synced` (listed, and no
list or watch failed since), with no request of its own to the API server.

The pods are read through :class:`PodWatchApi` (:class:`~iadeep.extender.KubernetesPodApi`
implements it); the thread never raises: while the API fails it retries after waits of
``retry_s`` doubling up to ``retry_max_s`` (with jitter, :class:`iadeep._kube.Backoff`), logging
the outage once at WARNING, and lists again (resyncs) once the API answers.

The same stream keeps :class:`PendingPods`: the pods waiting for GPUs, which is what the extender
can see of kube-scheduler's queue. The policy's ``gpus_ahead`` for a pod is the GPUs that the
pending pods ahead of it need (higher priority, or the same priority and created earlier: the
order of kube-scheduler's ``PrioritySort`` queue, which tries the older pods first when a pod end
wakes them all). The simulator's ``kube`` queue computes the same figure
(:meth:`iadeep.sim.KubeQueue.gpus_ahead`), so the policy decides on the same input in both drivers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Protocol

from iadeep._kube import Backoff
from iadeep.extender._bind import KubeError, PodStatus
from iadeep.extender._wire import Pod

__all__ = ["GangMembers", "PodFollower", "PodWatchApi", "PendingPods", "ENDED_PHASES"]

log = logging.getLogger("iadeep.extender")

#: Pod phases after which a pod's containers never run again (Kubernetes API, ``PodPhase``).
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


class PodWatchApi(Protocol):
    """Listing and watching every pod of the cluster (raise :class:`KubeError`; status 410 when the
    resource version is too old)."""

    def list_pods(self) -> tuple[list[PodStatus], str]:
        """Every pod and the list's ``resourceVersion``."""

    def watch_pods(self, resource_version: str, *, timeout_s: float) -> Iterator[tuple[str, PodStatus | None, str]]:
        """Changes after ``resource_version`` as ``(type, pod, resourceVersion)``: type ``ADDED``,
        ``MODIFIED``, ``DELETED`` or ``BOOKMARK`` (pod ``None``); ends after about ``timeout_s``."""


class PodObserver(Protocol):
    """What else follows the pods' stream (:class:`~iadeep.extender._admission.AdmissionGate`)."""

    def reset(self, pods: Sequence[PodStatus]) -> None:
        """A full listing."""

    def observe(self, event_type: str, pod: PodStatus | None) -> None:
        """One watch event."""


def ended(event_type: str, pod: PodStatus | None) -> bool:
    """Whether a watch event says the pod is done with its GPUs (deleted, or in an ended phase)."""
    return pod is not None and (event_type == "DELETED" or pod.phase in ENDED_PHASES)


class PendingPods:
    """The pods that wait to be scheduled and ask for GPU memory, with their place in the queue.

    Args:
        gpus_of: a pod's GPU count, or ``None`` for a pod that asks for no GPU memory of ours
            (the extender's own demand rule, :func:`~iadeep.extender.pod_demand`); it may raise
            ``ValueError`` for a malformed pod, which is then left out.

    Thread-safe: the follower updates it, the verbs read it.
    """

    def __init__(self, gpus_of: Callable[[Pod], int | None]):
        self.gpus_of = gpus_of
        self._pods: dict[str, tuple[tuple[int, float, str], int]] = {}  # uid -> ((-priority, created, name), GPUs)
        self._lock = threading.Lock()

    @staticmethod
    def key(pod: PodStatus) -> tuple[int, float, str]:
        """Queue order: higher priority first, then earlier creation, then name (creation times
        have one-second resolution)."""
        return -pod.priority, pod.created_s, f"{pod.namespace}/{pod.name}"

    def _entry(self, pod: PodStatus) -> tuple[tuple[int, float, str], int] | None:
        if pod.pod is None or pod.node or pod.phase != "Pending":
            return None
        try:
            gpus = self.gpus_of(pod.pod)
        except ValueError:
            return None
        return None if not gpus else (self.key(pod), int(gpus))

    def reset(self, pods: Sequence[PodStatus]) -> None:
        """Replace the index with a full listing."""
        entries = {p.uid: e for p in pods if (e := self._entry(p)) is not None}
        with self._lock:
            self._pods = entries

    def update(self, event_type: str, pod: PodStatus | None) -> None:
        """Apply one watch event (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``)."""
        if pod is None:
            return
        entry = None if event_type == "DELETED" else self._entry(pod)
        with self._lock:
            if entry is None:
                self._pods.pop(pod.uid, None)
            else:
                self._pods[pod.uid] = entry

    def gpus_ahead(self, uid: str, priority: int, created_s: float, namespace: str, name: str,
                   exclude: Collection[str] = ()) -> int:
        """GPUs needed by the pending pods ahead of this one (itself and ``exclude`` left out: the
        extender's nominated pods, which it counts as placed on the GPUs held for them)."""
        key = (-priority, created_s, f"{namespace}/{name}")
        with self._lock:
            return sum(g for u, (k, g) in self._pods.items() if k < key and u != uid and u not in exclude)

    def others(self, uid: str, exclude: Collection[str] = ()) -> int:
        """Pending pods other than this one and ``exclude`` (the policy's ``jobs_queued``)."""
        with self._lock:
            return sum(1 for u in self._pods if u != uid and u not in exclude)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)


GangKey = tuple[str, str]  # (namespace, gang)


class GangMembers:
    """The live members of every gang as the pod follower last saw them: ``(namespace, gang)`` ->
    pod UID -> (status, wire model); a member leaves when it is deleted, being deleted or ended
    (:attr:`PodStatus.gang_pod` is then ``None``).

    Thread-safe: the follower updates it, the gang's decision reads it.
    """

    def __init__(self) -> None:
        self._gangs: dict[GangKey, dict[str, PodStatus]] = {}
        self._key_of: dict[str, GangKey] = {}  # uid -> its gang (a label may change)
        self._lock = threading.Lock()

    def _drop(self, uid: str) -> None:
        key = self._key_of.pop(uid, None)
        if key is not None:
            members = self._gangs.get(key, {})
            members.pop(uid, None)
            if not members:
                self._gangs.pop(key, None)

    def _put(self, pod: PodStatus) -> None:
        self._drop(pod.uid)
        if pod.gang_pod is not None and pod.gang:
            key = (pod.namespace, pod.gang)
            self._gangs.setdefault(key, {})[pod.uid] = pod
            self._key_of[pod.uid] = key

    def reset(self, pods: Sequence[PodStatus]) -> None:
        """Replace what is known with a full listing."""
        with self._lock:
            self._gangs, self._key_of = {}, {}
            for p in pods:
                self._put(p)

    def update(self, event_type: str, pod: PodStatus | None) -> None:
        """Apply one watch event (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``)."""
        if pod is None:
            return
        with self._lock:
            if event_type == "DELETED":
                self._drop(pod.uid)
            else:
                self._put(pod)

    def members(self, namespace: str, gang: str) -> list[tuple[PodStatus, Pod]]:
        """The gang's live members, as :meth:`~iadeep.extender.PodApi.gang_pods` returns them."""
        with self._lock:
            pods = list(self._gangs.get((namespace, gang), {}).values())
        return [(p, p.gang_pod) for p in pods if p.gang_pod is not None]

    def __len__(self) -> int:
        with self._lock:
            return len(self._key_of)


class PodFollower:
    """A daemon thread that lists, then watches the pods and reports those that ended.

    Args:
        api: the pod listing and watch.
        on_ended: called with the UIDs of pods that ended (possibly again for the same pod: it
            must be idempotent); exceptions are logged, the follower goes on.
        timeout_s: how long one watch request stays open before it is reopened (s).
        retry_s: the first wait after a failed list or watch (s); it doubles while they keep
            failing, up to ``retry_max_s``, and starts again from ``retry_s`` after a listing.
        retry_max_s: the longest wait between tries (s).
        rand: a uniform draw in ``[0, 1)`` for the waits' jitter (tests pass a constant).
        pending: the index of waiting pods to keep (optional).
        admissions: the pods waiting for their device plugin's ``Allocate`` to keep (optional,
            :class:`~iadeep.extender._admission.AdmissionGate`).
        gangs: the gangs' live members to keep (optional).
    """

    def __init__(self, api: PodWatchApi, on_ended: Callable[[Sequence[str]], object], *, timeout_s: float = 30.0,
                 retry_s: float = 1.0, retry_max_s: float = 30.0, pending: PendingPods | None = None,
                 admissions: PodObserver | None = None, gangs: GangMembers | None = None,
                 rand: Callable[[], float] | None = None):
        self.api = api
        self.gangs = gangs
        self.on_ended = on_ended
        self.pending = pending
        self.admissions = admissions
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.backoff = Backoff("pod watch", log, first_s=retry_s, max_s=retry_max_s,
                               **({"rand": rand} if rand is not None else {}))
        self.listings = 0
        self.events = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listed = threading.Event()
        self._synced = False

    @property
    def synced(self) -> bool:
        """True while what the follower keeps is the cluster's as of its last event: after a
        listing was handled and until a list or watch fails (or the watch's version is too old);
        a watch the server closed after ``timeout_s`` and reopened from its version misses nothing."""
        return self._synced and self._thread is not None

    def start(self) -> None:
        """Start following (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="iadeep-pod-follow", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Ask the thread to stop; a watch blocked in a read ends with its request (daemon thread)."""
        self._stop.set()
        self._synced = False
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def wait_listed(self, timeout_s: float) -> bool:
        """True once the first listing has been handled (tests, readiness)."""
        return self._listed.wait(timeout_s)

    def _report(self, uids: list[str]) -> None:
        if not uids:
            return
        try:
            self.on_ended(uids)
        except Exception:  # noqa: BLE001 - a failed release is retried by the sweep
            log.exception("releasing the reservations of ended pods failed")

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    pods, version = self.api.list_pods()
                    self.listings += 1
                    if self.pending is not None:
                        self.pending.reset(pods)
                    if self.admissions is not None:
                        self.admissions.reset(pods)
                    if self.gangs is not None:
                        self.gangs.reset(pods)
                    self._synced = True
                    self.backoff.succeeded()
                    self._report([p.uid for p in pods if p.phase in ENDED_PHASES])
                    self._listed.set()
                for kind, pod, rv in self.api.watch_pods(version, timeout_s=self.timeout_s):
                    self.events += 1
                    if rv:
                        version = rv
                    if self.pending is not None:
                        self.pending.update(kind, pod)
                    if self.admissions is not None:
                        self.admissions.observe(kind, pod)
                    if self.gangs is not None:
                        self.gangs.update(kind, pod)
                    if ended(kind, pod):
                        self._report([pod.uid])  # type: ignore[union-attr]
                    if self._stop.is_set():
                        return
            except KubeError as exc:
                self._synced = False
                if exc.status == 410:  # too old for the watch cache: list again
                    version = ""
                    continue
                version = ""
                self._stop.wait(self.backoff.failed(exc))
            except Exception as exc:  # noqa: BLE001 - never let the follower die
                self._synced = False
                if not self.backoff.failures:  # the first in a row with its traceback; the repeats as Backoff logs them
                    log.exception("pod watch failed")
                version = ""
                self._stop.wait(self.backoff.failed(exc))
