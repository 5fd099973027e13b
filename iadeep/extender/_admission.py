"""One GPU pod at a time between our bind and the device plugin's ``Allocate``, per node.

**Why.** The kubelet's ``GetPreferredAllocation`` and ``Allocate`` (device plugin API v1beta1)
name device IDs, never the pod. The device plugin therefore matches a request to the pods the
extender bound to its node that still wait in bind phase ``allocating``
(:mod:`iadeep.deviceplugin._allocate`: oldest assume time first, the request's size, the GPU
holding the device IDs). With two such pods of the same size on one node nothing tells them
apart: the kubelet admits pods in its own order (by creation time, which has one-second
resolution, ties in any order), the preferred allocation follows the older pod's GPU, and the
two pods can swap GPUs (seen in a full run of
``tests/node/test_node_gpus.py::test_two_gpu_pods_created_at_once_each_get_the_gpu_the_extender_chose``
on a loaded machine).

**Rule.** On a node whose inventory says its device plugin serves ``Allocate``
(:attr:`iadeep.state.NodeInventory.allocates`), the extender binds a GPU pod only while no other
pod there is ``allocating``: the plugin then has exactly one candidate for every request. Binds
to one such node are serialised (:meth:`AdmissionGate.turn`); a bind waits at most
``admission_wait_s`` (:class:`~iadeep.extender.ExtenderSettings`) for the pod ahead to be served
and otherwise fails naming that pod, and kube-scheduler retries it after its back-off. Nodes
without a device plugin behind them (the GPU emulator's kwok nodes, where pods never leave
``allocating``) are not gated.

A pod stops holding its node's turn when the pod follower (:class:`~iadeep.extender.PodFollower`)
sees it ``allocated``, ``Running`` (the kubelet allocates devices at admission, before any
container starts), ended or deleted. A waiting bind also reads the pods ahead of it every
``poll_s`` (a watch event may come before the bind that made the pod was recorded here, and the
follower may be off or reconnecting).

Cost: on such a node, binds follow each other at the pace of the kubelet's admission (the pod's
watch event reaching the kubelet, its admission, the plugin's annotation reaching the extender):
a fraction of a second per pod. The simulator does not model bind latency at all (seconds against
jobs of hours). The turn is kept per extender process: with ``workers`` > 1 two processes may
still bind to one node in the window before each sees the other's pod through its follower
(milliseconds); the default is one worker.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from iadeep.extender._bind import KubeError, PodStatus
from iadeep.extender._pods import ANNOTATION_BIND_PHASE, BIND_PHASE_ALLOCATING
from iadeep.extender._podwatch import ENDED_PHASES

__all__ = ["AdmissionBusy", "AdmissionGate", "AdmissionTurn"]

log = logging.getLogger("iadeep.extender")

#: Pod phases in which the kubelet has admitted the pod (its devices were allocated), or never will.
_PAST_ADMISSION = ENDED_PHASES | {"Running"}


class AdmissionBusy(RuntimeError):
    """Another pod on the node still waits for its ``Allocate`` after the bind's wait (message
    names the node, the pod(s) and how long they have waited)."""


@dataclass
class _Waiting:
    namespace: str
    name: str
    since: float  # monotonic s


#: ``read(namespace, name, uid)``: whether that pod is still ``allocating`` (False when gone or
#: replaced by a pod of another UID). Raises :class:`KubeError` when the API cannot tell.
StillAllocating = Callable[[str, str, str], bool]


class AdmissionTurn:
    """The bind's turn on one node (from :meth:`AdmissionGate.turn`); :meth:`bound` records the
    pod as ``allocating`` there once its Binding succeeded."""

    def __init__(self, gate: AdmissionGate, node: str):
        self._gate, self.node = gate, node

    def bound(self, uid: str, namespace: str, name: str) -> None:
        """The pod was bound to the node in phase ``allocating``: later binds wait for it."""
        self._gate._add(self.node, uid, namespace, name)


class AdmissionGate:
    """Which pods wait for their device plugin's ``Allocate``, per node, and the turns to bind there.

    Args:
        still_allocating: reads one pod (see :data:`StillAllocating`); None: rely on the follower only.
        poll_s: how often a waiting bind reads the pods ahead of it (s).
        clock: monotonic seconds.

    Thread-safe: the pod follower feeds :meth:`observe`/:meth:`reset`, binds take turns.
    """

    def __init__(self, still_allocating: StillAllocating | None = None, *, poll_s: float = 0.25,
                 clock: Callable[[], float] = time.monotonic):
        self.still_allocating = still_allocating
        self.poll_s = poll_s
        self.clock = clock
        self._waiting: dict[str, dict[str, _Waiting]] = {}  # node -> uid -> pod
        self._node_of: dict[str, str] = {}  # uid -> node
        self._changed = threading.Condition(threading.Lock())
        self._turns: dict[str, threading.Lock] = {}
        self._turns_guard = threading.Lock()

    # -- what the pods show ---------------------------------------------------------------------
    def _add(self, node: str, uid: str, namespace: str, name: str) -> None:
        with self._changed:
            if uid not in self._node_of:
                self._waiting.setdefault(node, {})[uid] = _Waiting(namespace, name, self.clock())
                self._node_of[uid] = node

    def _drop(self, uids: Sequence[str]) -> None:
        with self._changed:
            for uid in uids:
                node = self._node_of.pop(uid, None)
                if node is not None:
                    self._waiting[node].pop(uid, None)
                    if not self._waiting[node]:
                        del self._waiting[node]
            self._changed.notify_all()

    @staticmethod
    def _allocating(event_type: str, pod: PodStatus) -> bool:
        return (event_type != "DELETED" and bool(pod.node) and pod.bind_phase == BIND_PHASE_ALLOCATING
                and pod.phase not in _PAST_ADMISSION)

    def observe(self, event_type: str, pod: PodStatus | None) -> None:
        """Apply one pod watch event (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``)."""
        if pod is None:
            return
        if self._allocating(event_type, pod):
            self._add(pod.node, pod.uid, pod.namespace, pod.name)
        else:
            self._drop([pod.uid])

    def reset(self, pods: Sequence[PodStatus]) -> None:
        """Replace what is known with a full listing (the follower's list, e.g. after a restart)."""
        now = self.clock()
        waiting: dict[str, dict[str, _Waiting]] = {}
        for p in pods:
            if self._allocating("ADDED", p):
                waiting.setdefault(p.node, {})[p.uid] = _Waiting(p.namespace, p.name, now)
        with self._changed:
            self._waiting = waiting
            self._node_of = {uid: node for node, ps in waiting.items() for uid in ps}
            self._changed.notify_all()

    def waiting(self, node: str) -> dict[str, tuple[str, float]]:
        """Pods of ``node`` waiting for their ``Allocate``: UID -> (``namespace/name``, seconds waited)."""
        now = self.clock()
        with self._changed:
            return {u: (f"{w.namespace}/{w.name}", now - w.since) for u, w in self._waiting.get(node, {}).items()}

    # -- turns ----------------------------------------------------------------------------------
    def _turn_lock(self, node: str) -> threading.Lock:
        with self._turns_guard:
            lock = self._turns.get(node)
            if lock is None:
                lock = self._turns[node] = threading.Lock()
            return lock

    def _poll(self, node: str, uid: str) -> None:
        """Read the pods ahead of ``uid`` on ``node``; drop those no longer allocating."""
        if self.still_allocating is None:
            return
        with self._changed:
            ahead = [(u, w) for u, w in self._waiting.get(node, {}).items() if u != uid]
        gone = []
        for u, w in ahead:
            try:
                if not self.still_allocating(w.namespace, w.name, u):
                    gone.append(u)
            except KubeError as exc:  # the follower or the next poll tells
                log.debug("could not read pod %s/%s: %s", w.namespace, w.name, exc)
        if gone:
            self._drop(gone)

    @contextlib.contextmanager
    def turn(self, node: str, uid: str, wait_s: float) -> Iterator[AdmissionTurn]:
        """Hold ``node``'s turn for the bind of pod ``uid``: wait (at most ``wait_s`` in all, s)
        for the binds ahead on this node and for every other pod there to be served.

        Raises:
            AdmissionBusy: the wait ran out; nothing was held.
        """
        end = self.clock() + max(wait_s, 0.0)
        lock = self._turn_lock(node)
        if not lock.acquire(timeout=max(wait_s, 0.0)):
            raise AdmissionBusy(f"{node}: another bind to this node waits for the kubelet's admission "
                                f"(binds there take turns, {wait_s:g} s waited)")
        try:
            next_poll = self.clock()
            while True:
                now = self.clock()
                if now >= next_poll:
                    self._poll(node, uid)
                    next_poll = now + self.poll_s
                with self._changed:
                    ahead = {u: w for u, w in self._waiting.get(node, {}).items() if u != uid}
                    if not ahead:
                        break
                    left = end - self.clock()
                    if left <= 0:
                        now = self.clock()
                        names = ", ".join(f"{w.namespace}/{w.name} ({now - w.since:.1f} s)" for w in ahead.values())
                        raise AdmissionBusy(
                            f"{node}: pod(s) {names} bound there still wait for the device plugin's Allocate "
                            f"({ANNOTATION_BIND_PHASE}: {BIND_PHASE_ALLOCATING}); another GPU pod bound now could "
                            f"be given their GPU (the kubelet's Allocate does not name the pod), so binds to this "
                            f"node take turns")
                    self._changed.wait(min(left, max(next_poll - self.clock(), 0.0)))
            yield AdmissionTurn(self, node)
        finally:
            lock.release()
