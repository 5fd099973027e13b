"""The emulator's Kubernetes calls: list and watch nodes and pods, patch a pod's annotations and status.

Objects travel as plain JSON dicts (raw responses of the official client: its model classes are
the slowest part of a call and the emulator reads a handful of fields). How a pod is completed:
kwok plays the kubelet of fake nodes and moves pods through its *stages*; a stage acts only on
pods its selector matches, so any other controller may write a pod's status through the
``pods/status`` subresource (RBAC: ``pods/status`` patch), as a kubelet does. The emulator
merge-patches ``status.phase: Succeeded`` with a terminated container state; the project's kwok
stage ``iadeep-pod-succeeded`` skips pods annotated ``iadeep.io/emulated``
(:mod:`iadeep.dev._kwok`), so kwok never completes them on its own timer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from iadeep._kube import KubeConfigError, load_configuration, watch_events

__all__ = ["KubeApi", "KubeCallError", "rfc3339"]


class KubeCallError(RuntimeError):
    """A Kubernetes API call failed (``status``: HTTP status, 0 when unreachable, 410 when a watch's
    resource version is too old)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


def rfc3339(t: float) -> str:
    """Unix seconds as the API's ``metav1.Time`` (second resolution, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class KubeApi:
    """Nodes and pods over the official client (kubeconfig or in-cluster).

    Args:
        kubeconfig: kubeconfig path (``None``: ``$KUBECONFIG`` or ``~/.kube/config``) unless ``in_cluster``.
        in_cluster: use the pod's service account.
        timeout_s: per call.
        api_client: an existing ``kubernetes.client.ApiClient`` (tests).

    Raises:
        KubeCallError: the configuration cannot be loaded.
    """

    def __init__(self, *, kubeconfig: str | None = None, in_cluster: bool = False, timeout_s: float = 10.0,
                 api_client: Any | None = None):
        from kubernetes import client

        if api_client is None:
            try:
                cfg = load_configuration(in_cluster=in_cluster, kubeconfig=kubeconfig)
            except KubeConfigError as exc:
                raise KubeCallError(str(exc)) from None
            cfg.connection_pool_maxsize = 16
            api_client = client.ApiClient(cfg)
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.timeout_s = timeout_s

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
            data = resp.data
            resp.release_conn()
            return json.loads(data) if data else {}
        except ApiException as exc:
            raise KubeCallError(f"{what}: {exc.status} {exc.reason}", int(exc.status or 0)) from None
        except (HTTPError, OSError, ValueError) as exc:
            raise KubeCallError(f"{what}: {exc}") from None

    def list(self, kind: str, **selectors: str) -> tuple[list[dict[str, Any]], str]:
        """Every node or pod (``kind``: ``nodes``/``pods``) and the list's resourceVersion."""
        fn = self.core.list_node if kind == "nodes" else self.core.list_pod_for_all_namespaces
        doc = self._call(f"list {kind}", fn, resource_version="0", **selectors)
        return doc.get("items") or [], str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, kind: str, resource_version: str, *, timeout_s: float, **selectors: str
              ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, object)`` changes after ``resource_version`` until the server closes the watch.

        Raises:
            KubeCallError: the watch failed; status 410 when ``resource_version`` is too old.
        """
        fn = self.core.list_node if kind == "nodes" else self.core.list_pod_for_all_namespaces
        return watch_events(lambda: fn(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                                       timeout_seconds=max(int(timeout_s), 1), _preload_content=False,
                                       _request_timeout=(self.timeout_s, timeout_s + self.timeout_s), **selectors),
                            f"watch {kind}", KubeCallError)

    def annotate_pod(self, namespace: str, name: str, uid: str, annotations: Mapping[str, str]) -> None:
        """Merge-patch annotations of the pod with this UID."""
        body = {"metadata": {"uid": uid, "annotations": dict(annotations)}}
        self._call(f"annotate pod {namespace}/{name}", self.core.patch_namespaced_pod, name, namespace, body,
                   _content_type="application/merge-patch+json")

    def complete_pod(self, pod: Mapping[str, Any], *, started_s: float, finished_s: float, exit_code: int = 0) -> None:
        """Set the pod's status to ``Succeeded`` (``Failed`` for a non-zero ``exit_code``) with every
        container terminated, through the ``pods/status`` subresource, as a kubelet reports it."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ok = exit_code == 0
        now = rfc3339(finished_s)
        containers = [{
            "name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if ok else "Error",
                                     "startedAt": rfc3339(started_s), "finishedAt": now}},
        } for c in spec.get("containers") or []]
        conditions = [{"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
                      for t in ("Ready", "ContainersReady")]
        body = {"metadata": {"uid": meta.get("uid")},
                "status": {"phase": "Succeeded" if ok else "Failed", "conditions": conditions,
                           "containerStatuses": containers}}
        self._call(f"complete pod {meta.get('namespace')}/{meta.get('name')}", self.core.patch_namespaced_pod_status,
                   meta.get("name"), meta.get("namespace"), body, _content_type="application/strategic-merge-patch+json")

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001 - closing a pool at shutdown
            pass
