"""Prometheus targets of a local cluster's services (file-based discovery, ``file_sd_configs``).

``tools/prometheus/prometheus.yml`` scrapes every service that serves ``/metrics``
(:data:`SCRAPE_JOBS`: the extender, the node coordinator, the tuner, the device plugin and the GPU
emulator) at its default loopback port and follows ``targets/<job>*.json`` next to it for the
ports a local rollout picked (:class:`~iadeep.orchestration.LocalCluster`; the emulator is no
part of a rollout: a live run starts it as a process and writes its own targets).
:func:`scrape_targets` gives those files' content, :func:`write_scrape_targets` writes them
(each file replaced whole, by a rename: Prometheus never reads half a file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from iadeep.orchestration._local import LocalCluster

__all__ = ["SCRAPED_SERVICES", "SCRAPE_JOBS", "scrape_targets", "write_scrape_targets"]

#: service of :data:`iadeep.orchestration._local.LOCAL_SERVICES` -> Prometheus job (those serving /metrics)
SCRAPED_SERVICES: dict[str, str] = {"extender": "iadeep-extender", "coordinator": "iadeep-coordinator",
                                    "tuner": "iadeep-tuner", "deviceplugin": "iadeep-deviceplugin"}
#: every Prometheus job of ``prometheus.yml`` -> the service's default port on 127.0.0.1 (its
#: settings' ``port``)
SCRAPE_JOBS: dict[str, int] = {"iadeep-extender": 8888, "iadeep-coordinator": 8891, "iadeep-tuner": 8890,
                               "iadeep-deviceplugin": 8892, "iadeep-emulator": 8893}


def scrape_targets(c: LocalCluster, *, labels: dict[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """``job -> file_sd entries`` (``[{"targets": ["127.0.0.1:PORT"], "labels": {...}}]``) of ``c``'s services.

    Args:
        labels: added to every target (e.g. ``{"run": "..."}`` to tell runs apart).
    """
    return {job: [{"targets": [f"127.0.0.1:{c.ports[service]}"], "labels": {"service": service, **(labels or {})}}]
            for service, job in SCRAPED_SERVICES.items()}


def write_scrape_targets(c: LocalCluster, folder: Path, *, labels: dict[str, str] | None = None) -> list[Path]:
    """Write ``folder/<job>-local.json`` for each job of :func:`scrape_targets`; returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for job, entries in scrape_targets(c, labels=labels).items():
        path = folder / f"{job}-local.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(entries, indent=2) + "\n")
        os.replace(tmp, path)
        out.append(path)
    return out
