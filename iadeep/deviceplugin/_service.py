"""The device plugin of one node: GPUs -> kubelet resources, inventory in etcd, allocation.

* Two resources, each served by its own ``DevicePlugin`` on a socket in the kubelet's folder:
  ``iadeep.io/gpu-mem``, one device ID per GiB of each GPU (``<GPU UUID>-mem-<k>``), and
  ``iadeep.io/gpu-count``, one device ID per GPU per **co-location slot** (``<GPU UUID>-slot-<k>``,
  ``k`` below the co-location limit). The kubelet's device manager gives a device to one
  container only, so one ID per GPU would let it admit one pod per GPU, whatever the extender
  co-located there. The node's kubelet capacity of ``gpu-count`` is therefore GPUs x slots (the
  pods it can admit), not the number of GPUs; kube-scheduler ignores the resource
  (``ignoredByScheduler``: the extender places by the :class:`~iadeep.state.NodeInventory`, one
  entry per GPU, and reads ``gpu-count`` only from pods, as GPUs per pod). The limit is the one
  the extender places with: its :class:`~iadeep.state.PlacementPolicy` record in etcd (its
  ``colocation_limit`` setting, else its policy's own), read at start and with every lease
  renewal; until an extender published one, 1 slot per GPU (every policy places one job per GPU).
  A slot's health is its GPU's, so a health change marks all its slots.
* The node's :class:`~iadeep.state.NodeInventory` (index, GiB, UUID of each GPU) is published in
  etcd on a lease and kept alive; republished when the GPUs change (a GPU whose UUID changed
  after a reboot replaces the stale record) or when the lease was lost.
* A monitor thread polls every ``poll_s``: the GPUs (health changes are streamed to every
  ListAndWatch), the lease, and the kubelet socket: when ``kubelet.sock`` is recreated (a kubelet
  restart removes the plugins' sockets too) the servers restart and register again.
* Allocation: :mod:`iadeep.deviceplugin._allocate`.

etcd unreachable: the plugin keeps serving the kubelet, ``/readyz`` answers 503 and the
inventory is published again with back-off once etcd answers.

HTTP on ``host:port`` of the settings: ``/healthz``, ``/readyz`` and ``/metrics`` (Prometheus
text, ``iadeep_deviceplugin_*``: :mod:`iadeep.deviceplugin._metrics`).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from fastapi import FastAPI

from iadeep._serving import probe_app
from iadeep.deviceplugin._allocate import Allocator, PodApi
from iadeep.deviceplugin._gpus import Gpu, GpuBackend
from iadeep.deviceplugin._grpc import ResourceServer, register
from iadeep.deviceplugin._metrics import DevicePluginMetrics
from iadeep.deviceplugin._settings import DevicePluginSettings
from iadeep.state import GpuInfo, NodeInventory, RecordError, StateStore, StoreUnavailable

__all__ = ["DevicePluginService", "mem_device_ids", "slot_device_ids"]

log = logging.getLogger(__name__)


def mem_device_ids(gpu: Gpu) -> list[str]:
    """The ``iadeep.io/gpu-mem`` device IDs of a GPU, one per GiB."""
    return [f"{gpu.uuid}-mem-{k}" for k in range(gpu.mem_gib)]


def slot_device_ids(gpu: Gpu, slots: int) -> list[str]:
    """The ``iadeep.io/gpu-count`` device IDs of a GPU: one per co-location slot (``slots`` =
    the extender's co-location limit, jobs per GPU)."""
    return [f"{gpu.uuid}-slot-{k}" for k in range(slots)]


class DevicePluginService:
    """One node's device plugin (module docstring).

    Args:
        settings: node, socket folder, resources, timing.
        backend: GPU discovery.
        store: the state store.
        pods: the Kubernetes side of allocation.
    """

    def __init__(self, settings: DevicePluginSettings, *, backend: GpuBackend, store: StateStore, pods: PodApi) -> None:
        self.settings = settings
        self.backend = backend
        self.store = store
        self.allocator = Allocator(settings.node, pods)
        self.gpus: list[Gpu] = []
        self.registrations = 0
        self._lock = threading.Lock()
        self.metrics = DevicePluginMetrics(
            lambda: {settings.mem_resource: self._mem_devices(), settings.count_resource: self._count_devices()},
            lambda: len(self.gpus), lambda: self._kubelet_id is not None)
        d = settings.socket_dir
        self.kubelet_socket = d / "kubelet.sock"
        self.mem = ResourceServer(settings.mem_resource, d / "iadeep-gpu-mem.sock", self._mem_devices,
                                  self.allocator.allocate, self.allocator.preferred, self._lock, self.metrics)
        self.count = ResourceServer(settings.count_resource, d / "iadeep-gpu-count.sock", self._count_devices,
                                    self.allocator.allocate_slots, self.allocator.preferred_slots, self._lock, self.metrics)
        self.slots = 1  # gpu-count slots per GPU: the extender's co-location limit once read
        self._kubelet_id: tuple[int, int] | None = None
        self._published: NodeInventory | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff_until = 0.0
        self._backoff_s = 0.5
        self._placement_missing_logged = False

    # -- devices ----------------------------------------------------------------------------

    def _mem_devices(self) -> list[tuple[str, bool]]:
        return [(d, g.healthy) for g in self.gpus for d in mem_device_ids(g)]

    def _count_devices(self) -> list[tuple[str, bool]]:
        return [(d, g.healthy) for g in self.gpus for d in slot_device_ids(g, self.slots)]

    def _read_placement(self) -> None:
        """Take the extender's co-location limit as slots per GPU (module docstring)."""
        try:
            placement = self.store.placement()
        except RecordError as exc:
            log.warning("the extender's placement record is malformed, keeping %d slot(s) per GPU: %s", self.slots, exc)
            return
        if placement is None:
            if self._placement_missing_logged is False:
                log.warning("no extender has published its placement yet: %d gpu-count slot(s) per GPU until one "
                            "does", self.slots)
                self._placement_missing_logged = True
            return
        if placement.colocation_limit != self.slots:
            log.info("gpu-count: %d slot(s) per GPU (the extender's %s policy places up to %d jobs per GPU)",
                     placement.colocation_limit, placement.policy, placement.colocation_limit)
            self.slots = placement.colocation_limit
            self.count.devices_changed()

    def inventory(self) -> NodeInventory:
        """The node's GPUs as the extender reads them."""
        named = self.settings.gpu_model  # the cluster's name for this node's GPUs, when it differs from NVML's
        return NodeInventory(self.settings.node,
                             tuple(GpuInfo(g.index, float(g.mem_gib), g.uuid, named or g.model) for g in self.gpus),
                             allocates=True)

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> DevicePluginService:
        """Discover, publish, serve and register; then monitor on a thread."""
        self.gpus = self.backend.discover()
        log.info("node %s: %d GPU(s): %s", self.settings.node, len(self.gpus),
                 ", ".join(f"{g.index}:{g.uuid} {g.mem_gib} GiB" for g in self.gpus))
        self._publish()
        self._serve_and_register()
        self._thread = threading.Thread(target=self._monitor, name="iadeep-deviceplugin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.mem.stop()
        self.count.stop()

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.kubelet_socket)
            return st.st_ino, st.st_ctime_ns
        except FileNotFoundError:
            return None

    def _serve_and_register(self) -> bool:
        """(Re)start both servers and register them; False when the kubelet is not there yet."""
        self._kubelet_id = self._kubelet_identity()
        for s in (self.mem, self.count):
            s.stop()
            s.start()
        if self._kubelet_id is None:
            log.warning("no kubelet socket at %s yet; registering when it appears", self.kubelet_socket)
            return False
        try:
            for s in (self.mem, self.count):
                register(self.kubelet_socket, s.socket.name, s.resource)
        except Exception as exc:  # noqa: BLE001 - retried by the monitor
            log.warning("registration with the kubelet failed, retrying: %s", exc)
            self._kubelet_id = None
            self.metrics.registrations.labels("failed").inc()
            return False
        self.registrations += 1
        self.metrics.registrations.labels("ok").inc()
        log.info("registered %s and %s with the kubelet", self.mem.resource, self.count.resource)
        return True

    def _publish(self) -> None:
        inv = self.inventory()
        try:
            self._read_placement()
            if inv != self._published or not self.store.keepalive(self.settings.node):
                self.store.put_inventory(inv, lease_ttl_s=self.settings.lease_ttl_s)
                if self._published is not None and inv != self._published:
                    log.warning("node %s: GPUs changed, inventory replaced: %s", self.settings.node, inv)
                self._published = inv
                self.metrics.publications.labels("ok").inc()
            self._backoff_s = 0.5
        except StoreUnavailable as exc:
            self.metrics.publications.labels("unavailable").inc()
            self._backoff_until = time.monotonic() + self._backoff_s
            log.warning("etcd unavailable, inventory not published (retrying in %.1f s): %s", self._backoff_s, exc)
            self._backoff_s = min(self._backoff_s * 2, 30.0)

    def _monitor(self) -> None:
        last_keepalive = time.monotonic()
        while not self._stop.wait(self.settings.poll_s):
            try:
                gpus = self.backend.discover()
            except Exception as exc:  # noqa: BLE001 - keep serving what we know
                log.warning("GPU discovery failed: %s", exc)
                gpus = self.gpus
            if gpus != self.gpus:
                self.gpus = gpus
                self.mem.devices_changed()
                self.count.devices_changed()
                log.info("devices changed: %s", [(g.index, g.uuid, g.healthy) for g in gpus])
            now = time.monotonic()
            if now >= self._backoff_until and (self.inventory() != self._published
                                               or now - last_keepalive >= self.settings.lease_ttl_s / 3):
                self._publish()
                last_keepalive = now
            ident = self._kubelet_identity()
            sockets_gone = not (self.mem.socket.exists() and self.count.socket.exists())
            if ident is not None and (ident != self._kubelet_id or sockets_gone):
                log.warning("kubelet socket recreated (kubelet restart): registering again")
                self._serve_and_register()

    # -- HTTP -----------------------------------------------------------------------------------

    def app(self) -> FastAPI:
        """``/healthz``, ``/readyz`` (503 while etcd or the kubelet does not answer), ``/metrics``
        (:func:`iadeep._serving.probe_app`)."""
        return probe_app("iadeep device plugin", self.metrics.registry,
                         lambda: None if self.store.healthy() and self._kubelet_id is not None
                         else "etcd or kubelet not reachable")
