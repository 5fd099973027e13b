"""Prometheus metrics of the extender (``/metrics``), each in its own registry per app.

Request metrics (updated per call):

=========================================  =========  ==========================================
name                                       type       labels
=========================================  =========  ==========================================
``iadeep_extender_requests_total``         counter    ``verb``, ``outcome`` (ok, error, invalid)
``iadeep_extender_request_seconds``        histogram  ``verb``
``iadeep_extender_filter_nodes_total``     counter    ``result`` (passed, failed, unresolvable)
``iadeep_extender_binds_total``            counter    ``outcome`` (bound, wait, conflict, failed,
                                                      released, not_ours)
``iadeep_extender_reservation_retries_total``  counter  (none)
``iadeep_extender_releases_total``         counter    ``why`` (pod ended, sweep)
``iadeep_extender_bind_phase_seconds``     histogram  ``phase``: where a bind's time goes (``thread``:
                                                      waiting for a worker thread, ``node_lock``,
                                                      ``policy_lock``, ``place``, ``reserve_txn``,
                                                      ``kube``: annotate + Binding, ``admission``: the
                                                      wait for a node's turn, :mod:`._admission`)
``iadeep_extender_node_annotations_total``  counter    ``outcome`` (written, unchanged, no_node,
                                                      forbidden, failed): the ``iadeep.io/gpu-reservations``
                                                      Node annotation, :mod:`._nodestate`
``iadeep_extender_samples_learned``        gauge      (none)
=========================================  =========  ==========================================

State metrics (computed at scrape time from the current snapshot):

=========================================  =========  ==========================================
``iadeep_gpu_memory_total_gib``            gauge      ``node``, ``gpu``
``iadeep_gpu_memory_used_gib``             gauge      ``node``, ``gpu``
``iadeep_gpu_jobs``                        gauge      ``node``, ``gpu``
``iadeep_pod_gpu_memory_gib``              gauge      ``node``, ``gpu``, ``pod`` (namespace/name)
``iadeep_pod_predicted_normalised_throughput``  gauge  ``node``, ``gpu``, ``pod``
``iadeep_state_snapshot_age_seconds``      gauge      (none)
``iadeep_state_store_up``                  gauge      (none): 1 when the store was followed without error
=========================================  =========  ==========================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ExtenderMetrics"]

_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _StateCollector(Collector):
    def __init__(self, rows: Callable[[], dict[str, Any]]):
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self._rows()
        total = GaugeMetricFamily("iadeep_gpu_memory_total_gib", "GPU memory published by the device plugin (GiB)",
                                  labels=["node", "gpu"])
        used = GaugeMetricFamily("iadeep_gpu_memory_used_gib", "GPU memory reserved by pods (GiB)", labels=["node", "gpu"])
        jobs = GaugeMetricFamily("iadeep_gpu_jobs", "Pods sharing the GPU", labels=["node", "gpu"])
        pod_mem = GaugeMetricFamily("iadeep_pod_gpu_memory_gib", "GPU memory reserved by one pod on one GPU (GiB)",
                                    labels=["node", "gpu", "pod"])
        pred = GaugeMetricFamily("iadeep_pod_predicted_normalised_throughput",
                                 "Predicted throughput of the pod relative to running alone", labels=["node", "gpu", "pod"])
        for node, gpus in data.get("nodes", {}).items():
            for g in gpus:
                labels = [node, str(g["index"])]
                total.add_metric(labels, g["mem_total_gib"])
                used.add_metric(labels, g["mem_used_gib"])
                jobs.add_metric(labels, len(g["jobs"]))
                for j in g["jobs"]:
                    pod_labels = [*labels, j["pod"]]
                    pod_mem.add_metric(pod_labels, j["mem_gib"])
                    if j.get("predicted_normalised_throughput") is not None:
                        pred.add_metric(pod_labels, j["predicted_normalised_throughput"])
        yield from (total, used, jobs, pod_mem, pred)
        age = data.get("snapshot_age_s")
        age_g = GaugeMetricFamily("iadeep_state_snapshot_age_seconds", "Age of the extender's copy of the shared state")
        if age is not None:
            age_g.add_metric([], age)
        yield age_g
        up = GaugeMetricFamily("iadeep_state_store_up", "1 when the last read of the state store succeeded")
        up.add_metric([], 1.0 if data.get("store_ok") else 0.0)
        yield up


class ExtenderMetrics:
    """The extender's metrics in a private registry.

    Args:
        state_rows: returns the inspect document (see :meth:`ExtenderService.inspect`) at scrape time.
    """

    def __init__(self, state_rows: Callable[[], dict[str, Any]]):
        self.registry = CollectorRegistry()
        # several server processes (``workers``): counters live in files under
        # PROMETHEUS_MULTIPROC_DIR and every scrape sums them over the processes
        multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if multiproc:
            MultiProcessCollector(self.registry, path=multiproc)
        r = None if multiproc else self.registry
        self.requests = Counter("iadeep_extender_requests", "Extender calls", ["verb", "outcome"], registry=r)
        self.latency = Histogram("iadeep_extender_request_seconds", "Extender call latency (s)", ["verb"],
                                 buckets=_BUCKETS, registry=r)
        self.filter_nodes = Counter("iadeep_extender_filter_nodes", "Nodes judged by filter", ["result"], registry=r)
        self.binds = Counter("iadeep_extender_binds", "Bind outcomes", ["outcome"], registry=r)
        self.retries = Counter("iadeep_extender_reservation_retries", "Placements retried after a reservation conflict",
                               registry=r)
        self.releases = Counter("iadeep_extender_releases", "Reservations released", ["why"], registry=r)
        self.undos = Counter("iadeep_extender_undos", "Undo records carried out (evicted, gone, kept)", ["outcome"], registry=r)
        self.node_annotations = Counter("iadeep_extender_node_annotations", "Writes of the iadeep.io/gpu-reservations Node "
                                        "annotation", ["outcome"], registry=r)
        self.bind_phase = Histogram("iadeep_extender_bind_phase_seconds", "Time a bind spends in each phase (s)",
                                    ["phase"], buckets=_BUCKETS, registry=r)
        self.samples = Gauge("iadeep_extender_samples_learned", "Learned interference samples loaded from the store",
                             registry=r, multiprocess_mode="max")
        self.registry.register(_StateCollector(state_rows))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of a bind into ``iadeep_extender_bind_phase_seconds{phase=name}``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.bind_phase.labels(name).observe(time.perf_counter() - t0)
