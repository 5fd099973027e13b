"""Prometheus metrics of the GPU emulator (``/metrics``, ``iadeep_emulator_*``), in a registry of
its own per emulator so that several emulators in one test process do not collide.

Computed at scrape time from :meth:`EmulatorService.status <iadeep.emulator.EmulatorService.status>`:

================================================  =========  ==========================================
name                                              type       meaning
================================================  =========  ==========================================
``iadeep_emulator_nodes``                         gauge      emulated nodes whose inventory is published
``iadeep_emulator_jobs_running``                  gauge      jobs running on emulated GPUs now
``iadeep_emulator_pods_completed_total``          counter    pods completed (status ``Succeeded``
                                                             written) when their work was done
``iadeep_emulator_measurements_total``            counter    throughput measurements (steps/s) written
                                                             to the state store
``iadeep_emulator_batch_size_changes_total``      counter    batch-size assignments applied (a job's
                                                             type and its GPU's rates changed)
``iadeep_emulator_errors_total``                  counter    API calls that failed, batch sizes never
                                                             measured
================================================  =========  ==========================================

Updated per completion:

================================================  =========  ==========================================
``iadeep_emulator_completion_lag_seconds``        histogram  wall seconds from a job's work being done
                                                             (its emulated end) to its pod's completion
                                                             written to the API
================================================  =========  ==========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["EmulatorMetrics"]

_LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_GAUGES = {"nodes": ("iadeep_emulator_nodes", "Emulated nodes whose GPU inventory is published"),
           "running": ("iadeep_emulator_jobs_running", "Jobs running on emulated GPUs")}
_COUNTERS = {"completed": ("iadeep_emulator_pods_completed", "Pods completed when their emulated work was done"),
             "measurements": ("iadeep_emulator_measurements", "Throughput measurements written to the state store"),
             "resized": ("iadeep_emulator_batch_size_changes", "Batch-size assignments applied to running jobs"),
             "errors": ("iadeep_emulator_errors", "Failed API calls and unmeasured batch sizes")}


class _StatusCollector(Collector):
    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = self._status()
        for key, (name, doc) in _GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=float(now[key]))
        for key, (name, doc) in _COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=float(now[key]))


class EmulatorMetrics:
    """The emulator's metrics (module docstring).

    Args:
        status: the service's counts now (keys ``nodes``, ``running``, ``completed``,
            ``measurements``, ``resized``, ``errors``), read at scrape time.
    """

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self.registry = CollectorRegistry()
        self.completion_lag = Histogram("iadeep_emulator_completion_lag_seconds",
                                        "Wall time from a job's work being done to its pod's completion (s)",
                                        buckets=_LAG_BUCKETS, registry=self.registry)
        self.registry.register(_StatusCollector(status))
