"""Each node's GPU reservations written on its Node object (annotation ``iadeep.io/gpu-reservations``).

**Why.** kube-scheduler retries a pod the extender refused only when a cluster event could make
it schedulable. A refused pod (kube-scheduler records the fake plugin ``Extender`` as its
rejector) is moved back to the active or backoff queue by *any* event of the kinds kube-scheduler
watches (pods, nodes, volumes, DRA objects): the default enqueue extension kube-scheduler registers
for extenders (kubernetes ``pkg/scheduler/framework/runtime/framework.go`` and
``schedule_one.go``, v1.36; kubernetes issue #122019). Otherwise it waits in the unschedulable
pool until the periodic flush, after ``--pod-max-in-unschedulable-pods-duration`` (5 minutes).

The extender frees GPU memory in its own store (etcd), which kube-scheduler does not watch. When a
pod ends, kube-scheduler retries the waiting pods on that very pod event, and the extender's pod
follower (:mod:`iadeep.extender._podwatch`) sees the same event at about the same time: if
kube-scheduler's retry comes first, the extender still counts the ended pod's reservation and
refuses, and nothing wakes the pod again until the flush (measured in CI: a replacement pod of the
live undo test waited the 5 minutes). Writing the node's new GPU state on the Node, after the copy
that ``filter`` reads reflects the release, is such an event: a Node update with a changed
annotation (``UpdateNodeAnnotation``), on which kube-scheduler moves every pod the extender refused
back to its queue. The annotation also shows operators iadeep's view of each node
(``kubectl get node -o yaml``).

**Content** (:func:`reservations_annotation`): compact JSON, one object per GPU of the node's inventory,
in index order: ``{"gpu": index, "mem_gib": total, "used_gib": reserved, "pods": reservations}``
(GiB). It is written after every change of the node's GPU states that the state store's watch
delivers (reservations and releases, by any extender process), coalesced per node, never on the
request path: :class:`NodeStatePublisher` is a thread of its own.

**Rights.** ``patch`` on ``nodes`` (``k8s/extender/rbac.yaml``), narrowed by the
ValidatingAdmissionPolicy in ``k8s/extender/admission.yaml`` to this one annotation. (Not
``iadeep.io/gpus``: that one is the node agents' list of a node's GPUs, which the GPU emulator reads.)
A node the API does not know (404: an inventory published without a Node) is skipped; a refusal
(403: the right is missing) is logged once, and the pods refused in the race above then wait for
kube-scheduler's flush as before. Other errors are retried after waits of ``retry_s`` doubling up
to ``retry_max_s`` (with jitter, :class:`iadeep._kube.Backoff`), the outage logged once at
WARNING for all nodes, not once a node a try.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable

from iadeep._kube import Backoff
from iadeep.extender._bind import KubeError
from iadeep.extender._view import Snapshot

__all__ = ["ANNOTATION_NODE_RESERVATIONS", "NodeStatePublisher", "reservations_annotation"]

log = logging.getLogger("iadeep.extender")

#: The Node annotation holding the node's GPU reservations as the extender sees them.
ANNOTATION_NODE_RESERVATIONS = "iadeep.io/gpu-reservations"


def reservations_annotation(snap: Snapshot, node: str) -> str | None:
    """The ``iadeep.io/gpu-reservations`` value of ``node`` in ``snap`` (``None``: no inventory published).

    Returns:
        JSON text, e.g. ``[{"gpu":0,"mem_gib":32.0,"used_gib":12.0,"pods":2}]``: per GPU its
        total and reserved memory (GiB) and how many pods hold a reservation on it.
    """
    inv = snap.inventories.get(node)
    if inv is None:
        return None
    rows = []
    for g in sorted(inv.gpus, key=lambda g: g.index):
        st = snap.gpu_states.get((node, g.index))
        rows.append({"gpu": g.index, "mem_gib": g.mem_gib, "used_gib": round(st.mem_used_gib, 3) if st else 0.0,
                     "pods": len(st.pods) if st else 0})
    return json.dumps(rows, separators=(",", ":"))


class NodeStatePublisher:
    """A daemon thread that writes the ``iadeep.io/gpu-reservations`` annotation of the nodes marked changed.

    Args:
        annotate: ``annotate(node, {key: value})`` merges annotations into the Node (raises
            :class:`KubeError`; status 404 and 403 are handled as the module docstring says).
        value_of: the annotation's current value for a node (``None``: nothing to write; it may
            raise, e.g. :class:`~iadeep.state.StoreUnavailable`, and the node is retried).
        retry_s: the first wait before failed writes are tried again (s); it doubles while rounds
            keep failing, up to ``retry_max_s``, and starts again from ``retry_s`` after a round
            without a failure.
        retry_max_s: the longest wait between tries (s).
        rand: a uniform draw in ``[0, 1)`` for the waits' jitter (tests pass a constant).
        on_outcome: called with ``"written"``, ``"unchanged"``, ``"no_node"``, ``"forbidden"`` or
            ``"failed"`` per node handled (metrics).

    Thread-safe: :meth:`mark` may be called from any thread; it never blocks on the API.
    """

    def __init__(self, annotate: Callable[[str, dict[str, str]], object], value_of: Callable[[str], str | None], *,
                 retry_s: float = 1.0, retry_max_s: float = 30.0, on_outcome: Callable[[str], object] | None = None,
                 rand: Callable[[], float] | None = None):
        self.annotate = annotate
        self.value_of = value_of
        self.retry_s = retry_s
        self.backoff = Backoff(f"writing the {ANNOTATION_NODE_RESERVATIONS} annotation", log, first_s=retry_s,
                               max_s=retry_max_s, **({"rand": rand} if rand is not None else {}))
        self.on_outcome = on_outcome
        self._dirty: set[str] = set()
        self._written: dict[str, str] = {}  # node -> the value last written
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._forbidden_logged = False

    def mark(self, nodes: Iterable[str]) -> None:
        """The GPU states of ``nodes`` changed: write their annotations soon."""
        with self._cond:
            before = len(self._dirty)
            self._dirty.update(nodes)
            if len(self._dirty) != before:
                self._cond.notify()

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="iadeep-node-state", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def publish(self, node: str) -> str:
        """Write ``node``'s annotation now if its value changed; returns the outcome (see ``on_outcome``).

        Raises:
            Exception: what ``value_of`` raised, or a :class:`KubeError` other than 404 and 403.
        """
        value = self.value_of(node)
        if value is None or self._written.get(node) == value:
            return "unchanged"
        try:
            self.annotate(node, {ANNOTATION_NODE_RESERVATIONS: value})
        except KubeError as exc:
            if exc.status == 404:
                return "no_node"
            if exc.status == 403:
                if not self._forbidden_logged:
                    self._forbidden_logged = True
                    log.error("cannot write the %s annotation of node %s (%s): the extender needs the right to "
                              "patch nodes (k8s/extender/rbac.yaml); until then a pod refused while a release "
                              "was in flight waits for kube-scheduler's periodic retry (5 min)",
                              ANNOTATION_NODE_RESERVATIONS, node, exc)
                return "forbidden"
            raise
        self._written[node] = value
        return "written"

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._dirty and not self._stop.is_set():
                    self._cond.wait()
                nodes, self._dirty = sorted(self._dirty), set()
            failed: list[str] = []
            error: Exception | None = None
            for node in nodes:
                try:
                    outcome = self.publish(node)
                except Exception as exc:  # noqa: BLE001 - the thread never dies; the node is retried
                    failed.append(node)
                    error = error or exc
                    outcome = "failed"
                if self.on_outcome is not None:
                    self.on_outcome(outcome)
            if not failed:
                if nodes:
                    self.backoff.succeeded()
                continue
            shown = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
            if not self._stop.wait(self.backoff.failed(f"node(s) {shown}: {error}")):
                self.mark(failed)
