"""Prometheus beside a live run: the services' series for the report.

:class:`LocalPrometheus` runs Debian's ``prometheus`` (``apt-get install prometheus``; or the
binary ``$IADEEP_PROMETHEUS`` names) on a free loopback port, scraping the services of the run
(:data:`JOBS`: the extender, the GPU emulator and, with tuning, the tuner and the node
coordinator) every ``scrape_interval_s`` through file-based discovery, so that each policy's run
points it at that run's ports without a restart (:meth:`LocalPrometheus.set_targets`). After a
run, :func:`collect_series` evaluates the report's :data:`PANELS` over the run's wall-clock
window (``/api/v1/query_range``) into a JSON document; :func:`iadeep.report.plot_service_series`
draws it. Without the binary a live run goes on without these series (:func:`prometheus_binary`
is ``None``).

The panels are the Grafana dashboard's (``charts/iadeep/dashboards/iadeep.json``) at the time
scale of a live run (rate windows of seconds instead of ``$__rate_interval``):

==========================  =====================================================================
panel                       series
==========================  =====================================================================
bind latency (s)            p50 and p95 of ``iadeep_extender_request_seconds{verb="bind"}``
reservations                count of ``iadeep_pod_gpu_memory_gib`` (one per pod and GPU)
co-located jobs per GPU     max and mean over GPUs in use of ``iadeep_gpu_jobs``
tuning rounds               ``iadeep_coordinator_rounds_total``, sessions ended (cumulative)
==========================  =====================================================================
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iadeep._host import free_port

__all__ = ["PANELS", "LocalPrometheus", "collect_series", "prometheus_binary"]

_RATE = "[10s]"  # at least a few 1 s scrapes: a live run lasts tens of seconds to minutes
#: panel -> (unit, ((series label, PromQL), ...))
PANELS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "bind latency": ("s", (
        ("p50", f'histogram_quantile(0.5, sum by (le) (rate(iadeep_extender_request_seconds_bucket{{verb="bind"}}{_RATE})))'),
        ("p95", f'histogram_quantile(0.95, sum by (le) (rate(iadeep_extender_request_seconds_bucket{{verb="bind"}}{_RATE})))'),
    )),
    "reservations": ("reservations", (("reservations", "count(iadeep_pod_gpu_memory_gib) or vector(0)"),)),
    "co-located jobs per GPU": ("jobs", (
        ("max", "max(iadeep_gpu_jobs)"),
        ("mean over GPUs in use", "avg(iadeep_gpu_jobs > 0) or vector(0)"),
    )),
    "tuning rounds": ("count", (
        ("rounds", "sum(iadeep_coordinator_rounds_total)"),
        ("sessions ended", "sum(iadeep_coordinator_sessions_total)"),
    )),
}
#: the services of a live run that serve ``/metrics`` (the device plugin does too, but a live run
#: has none: its GPUs are the emulator's)
JOBS = ("iadeep-extender", "iadeep-coordinator", "iadeep-tuner", "iadeep-emulator")


def prometheus_binary() -> Path | None:
    """``$IADEEP_PROMETHEUS``, else ``prometheus`` on ``PATH`` (Debian's package), else ``None``."""
    found = os.environ.get("IADEEP_PROMETHEUS") or shutil.which("prometheus")
    return Path(found) if found else None


class LocalPrometheus:
    """Prometheus on 127.0.0.1 with its data in ``workdir`` (removed by nothing: it is the run's).

    Args:
        workdir: configuration, target files, TSDB and ``prometheus.log``.
        binary: the ``prometheus`` executable (:func:`prometheus_binary`).
        scrape_interval_s: seconds between scrapes (and rule evaluations).

    Thread-safety: one thread drives it.
    """

    def __init__(self, workdir: Path, binary: Path, *, scrape_interval_s: float = 1.0) -> None:
        self.workdir, self.binary, self.scrape_interval_s = Path(workdir), Path(binary), scrape_interval_s
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> LocalPrometheus:
        """Start it and wait until ``/-/ready`` answers.

        Raises:
            RuntimeError: it exited or was not ready within ``timeout_s`` (with its log's tail).
        """
        import httpx

        self.workdir.mkdir(parents=True, exist_ok=True)
        interval = f"{max(int(self.scrape_interval_s * 1000), 100)}ms"
        config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
                  "scrape_configs": [{"job_name": job, "metrics_path": "/metrics",
                                      "file_sd_configs": [{"files": [str(self.workdir / "targets" / f"{job}.json")],
                                                           "refresh_interval": "1s"}]} for job in JOBS]}
        (self.workdir / "prometheus.yml").write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.set_targets({})
        self.port = free_port()
        log = (self.workdir / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [str(self.binary), f"--config.file={self.workdir / 'prometheus.yml'}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self._proc.returncode}): {self._log_tail()}")
            try:
                if httpx.get(self.url + "/-/ready", timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus not ready within {timeout_s:.0f}s: {self._log_tail()}")
            time.sleep(0.2)

    def set_targets(self, targets: Mapping[str, Sequence[str]], labels: Mapping[str, str] | None = None) -> None:
        """Scrape ``job -> ["127.0.0.1:PORT", ...]`` from now on (jobs of :data:`JOBS`; a job left
        out is scraped nowhere). Each target file is replaced whole (a rename)."""
        folder = self.workdir / "targets"
        folder.mkdir(parents=True, exist_ok=True)
        for job in JOBS:
            doc = [{"targets": list(targets.get(job, [])), "labels": dict(labels or {})}] if targets.get(job) else []
            tmp = folder / f".{job}.json.tmp"
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, folder / f"{job}.json")

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """``/api/v1/query_range``: ``[{"metric": labels, "values": [[t, "v"], ...]}, ...]``.

        Raises:
            RuntimeError: Prometheus refused the query (its error names what is wrong).
        """
        import httpx

        resp = httpx.get(self.url + "/api/v1/query_range", timeout=30, trust_env=False,
                         params={"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"})
        doc = resp.json()
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r}: {doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]["result"]

    def targets_up(self) -> dict[str, int]:
        """``job -> targets whose last scrape succeeded`` (``/api/v1/targets``)."""
        import httpx

        active = httpx.get(self.url + "/api/v1/targets", timeout=10, trust_env=False).json()["data"]["activeTargets"]
        up: dict[str, int] = {}
        for t in active:
            up[t["labels"]["job"]] = up.get(t["labels"]["job"], 0) + (t["health"] == "up")
        return up

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None

    def _log_tail(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"


def collect_series(prom: LocalPrometheus, start: float, end: float, *, step_s: float | None = None) -> dict[str, Any]:
    """The :data:`PANELS` over ``[start, end]`` (Unix s), after one more scrape interval so that
    the run's last state is in. A series with no sample is left out (a run without tuning has no
    coordinator; a run without binds no bind latency).

    Returns:
        ``{"start": start, "end": end, "step_s": step, "targets_up": {job: targets whose last
        scrape succeeded}, "panels": {panel: {"unit": u, "series": {label: [[t - start (s),
        value], ...]}}}}`` (NaN samples, e.g. a quantile over no binds in the window, dropped).
    """
    step = step_s or max(prom.scrape_interval_s, (end - start) / 500)
    time.sleep(2 * prom.scrape_interval_s)
    panels: dict[str, Any] = {}
    for title, (unit, queries) in PANELS.items():
        series = {}
        for label, expr in queries:
            for result in prom.query_range(expr, start, end + prom.scrape_interval_s, step):
                points = [[round(float(t) - start, 3), float(v)] for t, v in result["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if points:
                    series[label] = points
        panels[title] = {"unit": unit, "series": series}
    return {"start": start, "end": end, "step_s": step, "targets_up": prom.targets_up(), "panels": panels}
