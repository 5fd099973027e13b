"""Prometheus metrics of the device plugin (``/metrics`` beside ``/healthz``, ``iadeep_deviceplugin_*``),
in a registry of its own per plugin so that several plugins in one test process do not collide.

Updated per call:

==================================================  =========  ========================================
name                                                type       labels
==================================================  =========  ========================================
``iadeep_deviceplugin_allocations_total``           counter    ``resource``, ``outcome`` (ok,
                                                               no_matching_pod, invalid_devices,
                                                               error): one per
                                                               container request of an ``Allocate``
``iadeep_deviceplugin_preferred_allocations_total`` counter    ``resource``, ``outcome`` (ok, error)
``iadeep_deviceplugin_device_updates_total``        counter    ``resource``: device lists sent on the
                                                               ``ListAndWatch`` streams
``iadeep_deviceplugin_registrations_total``         counter    ``outcome`` (ok, failed): registrations
                                                               of both resources with the kubelet
``iadeep_deviceplugin_inventory_publications_total`` counter   ``outcome`` (ok, unavailable): writes of
                                                               the node inventory to etcd
==================================================  =========  ========================================

Computed at scrape time:

==================================================  =========  ========================================
``iadeep_deviceplugin_devices``                     gauge      ``resource``, ``health`` (Healthy,
                                                               Unhealthy): device IDs advertised
``iadeep_deviceplugin_gpus``                        gauge      (none): GPUs discovered
``iadeep_deviceplugin_registered``                  gauge      (none): 1 while registered with the
                                                               kubelet now running
==================================================  =========  ========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["DevicePluginMetrics"]


class _StateCollector(Collector):
    def __init__(self, devices: Callable[[], Mapping[str, Sequence[tuple[str, bool]]]], gpus: Callable[[], int],
                 registered: Callable[[], bool]) -> None:
        self._devices, self._gpus, self._registered = devices, gpus, registered

    def collect(self) -> Iterator[GaugeMetricFamily]:
        devices = GaugeMetricFamily("iadeep_deviceplugin_devices", "Device IDs advertised to the kubelet",
                                    labels=["resource", "health"])
        for resource, ids in self._devices().items():
            healthy = sum(1 for _, ok in ids if ok)
            devices.add_metric([resource, "Healthy"], healthy)
            devices.add_metric([resource, "Unhealthy"], len(ids) - healthy)
        yield devices
        yield GaugeMetricFamily("iadeep_deviceplugin_gpus", "GPUs discovered on the node", value=self._gpus())
        yield GaugeMetricFamily("iadeep_deviceplugin_registered", "1 while registered with the running kubelet",
                                value=1.0 if self._registered() else 0.0)


class DevicePluginMetrics:
    """The device plugin's metrics (module docstring).

    Args:
        devices: ``resource -> [(device ID, healthy)]`` now, read at scrape time.
        gpus: the number of GPUs discovered now.
        registered: whether the plugin is registered with the kubelet now.
    """

    def __init__(self, devices: Callable[[], Mapping[str, Sequence[tuple[str, bool]]]], gpus: Callable[[], int],
                 registered: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.allocations = Counter("iadeep_deviceplugin_allocations", "Container allocations asked by the kubelet, by outcome",
                                   ["resource", "outcome"], registry=r)
        self.preferred = Counter("iadeep_deviceplugin_preferred_allocations",
                                 "Preferred-allocation answers to the kubelet, by outcome", ["resource", "outcome"], registry=r)
        self.device_updates = Counter("iadeep_deviceplugin_device_updates", "Device lists sent on ListAndWatch streams",
                                      ["resource"], registry=r)
        self.registrations = Counter("iadeep_deviceplugin_registrations", "Registrations with the kubelet, by outcome",
                                     ["outcome"], registry=r)
        self.publications = Counter("iadeep_deviceplugin_inventory_publications",
                                    "Writes of the node inventory to the state store, by outcome", ["outcome"], registry=r)
        r.register(_StateCollector(devices, gpus, registered))
