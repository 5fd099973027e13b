"""Applying a placement: reserve in the store, then one Binding that also writes the annotations.

Order (so the device plugin never sees a bound pod without its GPU annotations, and nothing is
left half-made):

1. :meth:`StateStore.reserve` — one etcd transaction takes the GPU memory and stores the job;
2. create the ``pods/binding`` subresource carrying the bind annotations
   (:func:`bind_annotations`) and the pod's UID as precondition. The API server sets
   ``spec.nodeName`` and merges the Binding's annotations into the pod in one write
   (``BindingREST.setPodNodeAndMetadata`` in ``pkg/registry/core/pod/storage/storage.go`` of
   Kubernetes): a pod is bound with its annotations or not at all, and a pod re-created under the
   same name is never touched.

If 2 fails, the reservation is released (retried with backoff; if the store stays unreachable the
pod's UID is queued and released by the next sweep). A Binding refused because the pod is already
on the same node counts as success (kube-scheduler retried a bind that had in fact gone through).

One API call instead of an annotation patch followed by the Binding halves the bind's Kubernetes
time (each call is a round trip and a write, with its fsync, in the API server's etcd): measured
with ``benchmarks/extender.py`` (see the README's extender benchmark).

The Kubernetes side is behind the :class:`PodApi` protocol; :class:`KubernetesPodApi` implements
it with the official client (responses are read raw: the client's model deserialisation is the
slowest part of a call, and the binding call cannot deserialise its own answer).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iadeep._kube import KubeConfigError, api_error_status, load_configuration, watch_events
from iadeep.extender._pods import (
    ANNOTATION_ASSUME_TIME,
    ANNOTATION_BIND_PHASE,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEM,
    ANNOTATION_GPU_UUID,
    ANNOTATION_NODE,
    ANNOTATION_REASON,
    BIND_PHASE_ALLOCATING,
    api_time_s,
)
from iadeep.extender._settings import KubeSettings
from iadeep.extender._wire import Pod
from iadeep.podspec import GANG_LABEL
from iadeep.state import Assignment, StateStore, StoreUnavailable

__all__ = [
    "BindFailed",
    "KubeError",
    "KubernetesPodApi",
    "PodApi",
    "PodStatus",
    "bind_annotations",
    "bind_with_annotations",
    "call_deadline",
    "release_reservation",
    "time_left",
]

log = logging.getLogger("iadeep.extender")

_budget = threading.local()


@contextlib.contextmanager
def call_deadline(seconds: float) -> Iterator[None]:
    """Bound the Kubernetes calls this thread makes inside the block (:class:`KubernetesPodApi`)
    to end within ``seconds`` from now: each call's timeout is cut to the time left, and a call
    with none left fails at once with :class:`KubeError` (nested blocks keep the earlier end)."""
    previous = getattr(_budget, "end", None)
    end = time.monotonic() + seconds
    _budget.end = end if previous is None else min(previous, end)
    try:
        yield
    finally:
        _budget.end = previous


def time_left() -> float | None:
    """Seconds left of this thread's :func:`call_deadline` (None outside one)."""
    end = getattr(_budget, "end", None)
    return None if end is None else end - time.monotonic()


class KubeError(RuntimeError):
    """A Kubernetes API call failed.

    Attributes:
        status: HTTP status (0 when the API server could not be reached).
    """

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class PodStatus:
    """What the sweep and the pod follower need to know of a pod.

    Attributes:
        uid / namespace / name: the pod.
        phase: ``status.phase``.
        node: ``spec.nodeName`` (empty when unbound).
        created_s: ``metadata.creationTimestamp`` (Unix seconds; 0 when absent).
        priority: ``spec.priority`` (0 when absent).
        pod: the pod as the wire model, only for a pod waiting to be scheduled (``Pending``,
            unbound and without scheduling gates: kube-scheduler does not queue a gated pod):
            what :class:`~iadeep.extender.PendingPods` reads its GPU demand from.
        bind_phase: its ``iadeep.io/bind-phase`` annotation (empty when absent): ``allocating``
            from our bind until the node's device plugin served it, then ``allocated``.
        gang: its :data:`~iadeep.podspec.GANG_LABEL` label (empty when absent).
        gang_pod: the pod as the wire model, only for a live gang member (``gang`` set, neither
            being deleted nor ended; bound or not, gated or not): what
            :class:`~iadeep.extender.GangMembers` keeps of a gang.
    """

    uid: str
    namespace: str
    name: str
    phase: str
    node: str
    created_s: float = 0.0
    priority: int = 0
    pod: Pod | None = field(default=None, compare=False, repr=False)
    bind_phase: str = ""
    gang: str = ""
    gang_pod: Pod | None = field(default=None, compare=False, repr=False)


class PodApi(Protocol):
    """The Kubernetes calls of the extender (all raise :class:`KubeError`)."""

    def read_pod(self, namespace: str, name: str) -> Pod:
        """The pod as the wire model."""

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        """Create the pod's Binding to ``node`` (UID precondition); ``annotations`` are merged into
        the pod in the same write."""

    def pods(self) -> list[PodStatus]:
        """Every pod of the cluster (for the sweep of stale reservations)."""

    def event(self, namespace: str, name: str, uid: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event on the pod (best effort)."""

    def evict(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod with this UID through the Eviction API (``policy/v1``)."""

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the Node's (JSON merge patch; status 404: no such node)."""

    def gang_pods(self, namespace: str, gang: str) -> list[tuple[PodStatus, Pod]]:
        """The live members of a gang: the namespace's pods labelled ``iadeep.io/gang=<gang>``
        that are neither being deleted nor ended, each as its status and its wire model (one
        list request; the extender reads its pod follower's copy instead while that is synced:
        :class:`~iadeep.extender.GangMembers`)."""


def bind_annotations(assignments: Sequence[Assignment], *, node: str, uuids: Mapping[int, str], reason: str,
                     now_s: float) -> dict[str, str]:
    """The annotations written on a pod at bind (keys documented in :mod:`iadeep.extender._pods`).

    Args:
        assignments: the reservation, one per GPU, in gang order.
        node: the node.
        uuids: GPU index -> UUID from the node inventory (missing: empty).
        reason: the policy's justification.
        now_s: the assume time (Unix seconds).
    """
    gpus = [a.gpu for a in assignments]
    mem = assignments[0].mem_gib if assignments else 0.0
    return {
        ANNOTATION_GPU_INDEX: ",".join(str(g) for g in gpus),
        ANNOTATION_GPU_UUID: ",".join(uuids.get(g, "") for g in gpus),
        ANNOTATION_GPU_MEM: f"{mem:g}",
        ANNOTATION_ASSUME_TIME: str(int(now_s * 1e9)),
        ANNOTATION_BIND_PHASE: BIND_PHASE_ALLOCATING,
        ANNOTATION_NODE: node,
        ANNOTATION_REASON: reason[:256],
    }


class KubernetesPodApi:
    """:class:`PodApi` over the official ``kubernetes`` client.

    Args:
        settings: in-cluster or kubeconfig, and the per-call timeout.
        api_client: an existing ``kubernetes.client.ApiClient`` (tests); built from ``settings`` otherwise.

    Raises:
        KubeError: the configuration cannot be loaded (the message says which and how to set it).
    """

    COMPONENT = "iadeep-extender"

    def __init__(self, settings: KubeSettings, api_client: Any | None = None):
        from kubernetes import client

        if api_client is None:
            try:
                cfg = load_configuration(in_cluster=settings.in_cluster, kubeconfig=settings.kubeconfig,
                                         context=settings.context)
            except KubeConfigError as exc:
                raise KubeError(f"{exc}; set --kubeconfig (IADEEP_EXTENDER_KUBE__KUBECONFIG) or --in-cluster") from None
            cfg.connection_pool_maxsize = settings.max_connections
            api_client = client.ApiClient(cfg)
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.timeout_s = settings.request_timeout_s

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        left = time_left()
        if left is not None and left <= 0:
            raise KubeError(f"{what}: no time left in the extender's call budget")
        timeout = self.timeout_s if left is None else min(self.timeout_s, left)
        try:
            # raw response (no model objects); reading it whole hands the connection back to the
            # pool; an unread one is dropped and the next call pays a new TLS handshake
            resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            resp.data  # noqa: B018 - read and keep the body
            resp.release_conn()
            return resp
        except ApiException as exc:
            status, message = api_error_status(exc)
            raise KubeError(f"{what}: {status} {message}", status) from None
        except (HTTPError, OSError) as exc:
            raise KubeError(f"{what}: Kubernetes API unreachable: {exc}") from None

    def read_pod(self, namespace: str, name: str) -> Pod:
        resp = self._call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
        return Pod.model_validate_json(resp.data)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        # a plain dict: the client's model classes deep-copy its whole Configuration per object
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        # POST pods/<name>/binding (RBAC: pods/binding create), as kube-scheduler does; the client's
        # create_namespaced_binding would need the separate `bindings` resource.
        self._call(f"bind pod {namespace}/{name} to {node}", self.core.create_namespaced_pod_binding, name, namespace, body)

    def pods(self) -> list[PodStatus]:
        return self.list_pods()[0]

    def evict(self, namespace: str, name: str, uid: str) -> None:
        # POST pods/<name>/eviction (RBAC: pods/eviction create): PodDisruptionBudgets apply (429
        # when one forbids it) and the API server marks the pod DisruptionTarget before deleting it
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        self._call(f"evict pod {namespace}/{name}", self.core.create_namespaced_pod_eviction, name, namespace, body)

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> None:
        # PATCH nodes/<name> (RBAC: nodes patch; k8s/extender/admission.yaml lets the extender's
        # service account change only iadeep.io/ annotations); an unchanged value writes nothing
        body = {"metadata": {"annotations": dict(annotations)}}
        self._call(f"annotate node {name}", self.core.patch_node, name, body,
                   _content_type="application/merge-patch+json")

    def gang_pods(self, namespace: str, gang: str) -> list[tuple[PodStatus, Pod]]:
        resp = self._call(f"list the pods of gang {namespace}/{gang}", self.core.list_namespaced_pod, namespace,
                          label_selector=f"{GANG_LABEL}={gang}")
        out = []
        for p in json.loads(resp.data).get("items") or []:
            status = _pod_status(p)
            if status.gang_pod is not None:
                out.append((status, status.gang_pod))
            elif status.gang and not (p.get("metadata") or {}).get("deletionTimestamp") \
                    and status.phase not in ("Succeeded", "Failed"):
                try:  # a member the wire model cannot read: the gang waits, named in the log with why
                    Pod.model_validate(p)
                except ValueError as exc:
                    log.warning("pod %s/%s of gang %s is unreadable, left out: %s", namespace, status.name, gang, exc)
        return out

    def list_pods(self) -> tuple[list[PodStatus], str]:
        """Every pod of the cluster and the list's ``resourceVersion`` (from the API server's watch
        cache, ``resourceVersion=0``, as informers list)."""
        resp = self._call("list pods", self.core.list_pod_for_all_namespaces, resource_version="0")
        doc = json.loads(resp.data)
        items = doc.get("items") or []
        return [_pod_status(p) for p in items], str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def watch_pods(self, resource_version: str, *, timeout_s: float) -> Iterator[tuple[str, PodStatus | None, str]]:
        """Watch every pod from ``resource_version`` (``GET /api/v1/pods?watch=1``, bookmarks on);
        yields ``(type, pod, resourceVersion)``; ends when the server closes the watch after
        ``timeout_s``.

        Raises:
            KubeError: the watch could not be opened or broke; status 410 when ``resource_version``
                is too old (list again).
        """
        what = f"watch pods from {resource_version}"
        stream = watch_events(lambda: self.core.list_pod_for_all_namespaces(
            watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
            timeout_seconds=max(int(timeout_s), 1), _preload_content=False,
            _request_timeout=(self.timeout_s, timeout_s + self.timeout_s)), what, KubeError)
        for kind, obj in stream:
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            yield kind, (None if kind == "BOOKMARK" else _pod_status(obj)), rv

    def event(self, namespace: str, name: str, uid: str, reason: str, message: str, *, warning: bool = False) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace, "uid": uid},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.COMPONENT},
            "reportingComponent": self.COMPONENT,
            "reportingInstance": self.COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._call(f"event on {namespace}/{name}", self.core.create_namespaced_event, namespace, body)
        except KubeError as exc:
            log.warning("could not record event: %s", exc)

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001 - closing a pool at shutdown
            pass


def _timestamp(value: object) -> float:
    """``metadata.creationTimestamp`` as Unix seconds (0 when absent or unreadable)."""
    try:
        return api_time_s(value) if isinstance(value, str) and value else 0.0
    except ValueError:
        return 0.0


def _pod_status(p: Mapping[str, Any]) -> PodStatus:
    meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
    phase, node = status.get("phase", ""), spec.get("nodeName") or ""
    gang = (meta.get("labels") or {}).get(GANG_LABEL)
    gang = gang if isinstance(gang, str) else ""
    live = not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")
    parsed: Pod | None = None
    if live and (gang or (phase == "Pending" and not node)):
        try:
            parsed = Pod.model_validate(p)
        except ValueError:
            parsed = None  # not a pod we could read: it asks for nothing we know of
    # a gated pod (spec.schedulingGates) is not in kube-scheduler's queue yet: not pending
    pending = phase == "Pending" and not node and not spec.get("schedulingGates")
    priority = spec.get("priority")
    bind_phase = (meta.get("annotations") or {}).get(ANNOTATION_BIND_PHASE)
    return PodStatus(meta.get("uid", ""), meta.get("namespace", ""), meta.get("name", ""), phase, node,
                     _timestamp(meta.get("creationTimestamp")),
                     priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
                     parsed if pending else None, bind_phase if isinstance(bind_phase, str) else "",
                     gang, parsed if gang else None)


class BindFailed(RuntimeError):
    """Binding the pod failed; its reservation was released (or queued for release)."""


def release_reservation(store: StateStore, pod_uid: str, *, now_s: float, attempts: int = 3,
                        backoff_s: float = 0.1) -> bool:
    """Release ``pod_uid``'s reservation, retrying when the store is unreachable; True when done."""
    for attempt in range(attempts):
        try:
            store.release(pod_uid, now_s=now_s)
            return True
        except StoreUnavailable as exc:
            log.warning("release of %s failed (attempt %d/%d): %s", pod_uid, attempt + 1, attempts, exc)
            time.sleep(backoff_s * 2**attempt)
    return False


def bind_with_annotations(store: StateStore, api: PodApi, *, namespace: str, name: str, uid: str, node: str,
                          annotations: Mapping[str, str], now_s: float) -> None:
    """Step 2 of the module docstring for a pod whose reservation is already made.

    Raises:
        BindFailed: the pod could not be bound; the reservation has been released (``released``
            attribute False when the store was unreachable: the sweep retries).
    """
    try:
        api.bind(namespace, name, uid, node, annotations)
    except KubeError as exc:
        if exc.status == 409 and _bound_to(api, namespace, name, uid) == node:
            return  # an earlier attempt of this very bind went through (with its annotations)
        released = release_reservation(store, uid, now_s=now_s)
        err = BindFailed(f"{exc}; reservation {'released' if released else 'queued for release'}")
        err.released = released  # type: ignore[attr-defined]
        raise err from None


def _bound_to(api: PodApi, namespace: str, name: str, uid: str) -> str | None:
    try:
        pod = api.read_pod(namespace, name)
    except KubeError:
        return None
    return pod.spec.nodeName if pod.metadata.uid == uid else None
