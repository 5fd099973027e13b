"""The kubelet-facing gRPC side: one ``DevicePlugin`` server per resource on its own unix socket,
and registration with the kubelet's ``Registration`` service (API v1beta1).

The stubs come from :mod:`iadeep.deviceplugin._proto` (generated from ``v1beta1/api.proto``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from iadeep.deviceplugin._allocate import NoMatchingPod
from iadeep.deviceplugin._proto import load

if TYPE_CHECKING:
    from iadeep.deviceplugin._metrics import DevicePluginMetrics

__all__ = ["API_VERSION", "HEALTHY", "UNHEALTHY", "ResourceServer", "register", "pb2", "pb2_grpc"]

log = logging.getLogger(__name__)

pb2, pb2_grpc = load()

API_VERSION = "v1beta1"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

Devices = Callable[[], Sequence[tuple[str, bool]]]
AllocateFn = Callable[[Sequence[str]], dict[str, str]]
PreferredFn = Callable[[Sequence[str], Sequence[str], int], list[str]]


class _Servicer(pb2_grpc.DevicePluginServicer):  # type: ignore[misc,name-defined]
    def __init__(self, server: ResourceServer) -> None:
        self.s = server

    def GetDevicePluginOptions(self, request, context):  # noqa: N802 - gRPC method name
        return pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):  # noqa: N802
        seen = -1
        while context.is_active() and not self.s.stopping.is_set():
            with self.s.changed:
                if self.s.version == seen:
                    self.s.changed.wait(timeout=1.0)
                    if self.s.version == seen:
                        continue
                seen = self.s.version
            devices = [pb2.Device(ID=d, health=HEALTHY if ok else UNHEALTHY) for d, ok in self.s.devices()]
            self.s.count("device_updates")
            yield pb2.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        out = []
        with self.s.lock:
            for r in request.container_requests:
                try:
                    ids = self.s.preferred(list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size)
                except Exception as exc:  # noqa: BLE001 - as in Allocate: the kubelet gets a reason, never a crash
                    log.warning("%s: GetPreferredAllocation failed: %s: %s", self.s.resource, type(exc).__name__, exc)
                    self.s.count("preferred", "error")
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(exc).__name__}: {exc}")
                self.s.count("preferred", "ok")
                out.append(pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb2.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request, context):  # noqa: N802
        responses = []
        with self.s.lock:  # serialised per node
            for r in request.container_requests:
                ids = list(r.devices_ids)
                wrong = _wrong_ids(ids, {d for d, _ in self.s.devices()})
                if wrong:  # the kubelet only sends devices this plugin advertises, each once
                    log.warning("%s: Allocate refused: %s", self.s.resource, wrong)
                    self.s.count("allocations", "invalid_devices")
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, wrong)
                try:
                    envs = self.s.allocate(ids)
                except NoMatchingPod as exc:
                    log.warning("%s: Allocate refused: %s", self.s.resource, exc)
                    self.s.count("allocations", "no_matching_pod")
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                except Exception as exc:  # noqa: BLE001 - the kubelet gets a reason, never a crash
                    log.exception("%s: Allocate failed", self.s.resource)
                    self.s.count("allocations", "error")
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(exc).__name__}: {exc}")
                self.s.count("allocations", "ok")
                responses.append(pb2.ContainerAllocateResponse(envs=envs))
        return pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):  # noqa: N802
        return pb2.PreStartContainerResponse()


def _wrong_ids(ids: Sequence[str], advertised: set[str]) -> str:
    """What is wrong with a container request's device IDs (``""``: nothing): none at all, IDs
    this plugin does not advertise, or IDs named more than once."""
    if not ids:
        return "no device IDs in the container request"
    unknown = sorted({d for d in ids if d not in advertised})
    twice = sorted({d for d in ids if ids.count(d) > 1})
    parts = ([f"device IDs this plugin does not advertise: {', '.join(unknown[:5])}"
              + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else "")] if unknown else [])
    parts += [f"device IDs named more than once: {', '.join(twice[:5])}"] if twice else []
    return "; ".join(parts)


class ResourceServer:
    """A ``DevicePlugin`` server for one resource.

    Args:
        resource: the resource name, e.g. ``iadeep.io/gpu-mem``.
        socket: the plugin's socket path (in the kubelet's socket dir).
        devices: current ``(device ID, healthy)`` list.
        allocate: container device IDs -> environment (raises ``NoMatchingPod``).
        preferred: ``(available, must include, size)`` -> device IDs.
        lock: serialises Allocate and GetPreferredAllocation (shared by the node's servers).
        metrics: where the calls are counted (``resource`` label: this server's); ``None``: nowhere.
    """

    def __init__(self, resource: str, socket: Path, devices: Devices, allocate: AllocateFn, preferred: PreferredFn,
                 lock: threading.Lock, metrics: DevicePluginMetrics | None = None) -> None:
        self.resource, self.socket = resource, socket
        self.devices, self.allocate, self.preferred, self.lock = devices, allocate, preferred, lock
        self.metrics = metrics
        self.version = 0
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self._server: grpc.Server | None = None

    def count(self, counter: str, outcome: str | None = None) -> None:
        """Add one to ``metrics.<counter>`` for this resource (and ``outcome``)."""
        if self.metrics is not None:
            c = getattr(self.metrics, counter)
            (c.labels(self.resource) if outcome is None else c.labels(self.resource, outcome)).inc()

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        self.stopping.clear()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="iadeep-dp"))
        pb2_grpc.add_DevicePluginServicer_to_server(_Servicer(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def devices_changed(self) -> None:
        """Push the device list to every ListAndWatch stream."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()


def register(kubelet_socket: Path, endpoint: str, resource: str, timeout_s: float = 5.0) -> None:
    """Register a plugin with the kubelet (``Registration.Register``, API v1beta1).

    Raises:
        grpc.RpcError: the kubelet refused or did not answer.
    """
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        pb2_grpc.RegistrationStub(channel).Register(
            pb2.RegisterRequest(version=API_VERSION, endpoint=endpoint, resource_name=resource,
                                options=pb2.DevicePluginOptions(get_preferred_allocation_available=True)),
            timeout=timeout_s)
