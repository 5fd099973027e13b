"""Prometheus targets of a local cluster's services (file-based discovery, ``file_sd_configs``).

``tools/prometheus/prometheus.yml`` scrapes the services that serve ``/metrics`` (the extender and
the node coordinator) at their default loopback ports and follows ``targets/<job>*.json`` next to
it for the ports a local rollout picked (:class:`~iadeep.orchestration.LocalCluster`).
:func:`scrape_targets` gives those files' content, :func:`write_scrape_targets` writes them
(each file replaced whole, by a rename: Prometheus never reads half a file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from iadeep.orchestration._local import LocalCluster

__all__ = ["SCRAPED_SERVICES", "scrape_targets", "write_scrape_targets"]

#: service of :data:`iadeep.orchestration._local.LOCAL_SERVICES` -> Prometheus job (those serving /metrics)
SCRAPED_SERVICES: dict[str, str] = {"extender": "iadeep-extender", "coordinator": "iadeep-coordinator"}


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
