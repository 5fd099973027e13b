"""Client of the tuner's HTTP API (the coordinator's side), with retries on transient failures.

Every answer is decoded into the same types the library returns (:class:`Proposal`,
:class:`Outcome`), so a driver cannot tell the service from an in-process study.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from iadeep.tuning import Outcome, Proposal, StopRule, TunedJob

__all__ = ["TunerClient", "TunerError", "TunerUnavailable"]


class TunerError(RuntimeError):
    """The tuner refused a request (4xx); the message carries its ``error``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"tuner answered {status}: {message}")
        self.status = status


class TunerUnavailable(RuntimeError):
    """The tuner could not be reached within the retry deadline."""


def _outcome(d: Mapping[str, Any]) -> Outcome:
    obj = d.get("best_objective")
    return Outcome(bool(d["done"]), {k: int(v) for k, v in d["best"].items()},
                   math.nan if obj is None else float(obj), int(d["trials"]), str(d.get("reason", "")))


class TunerClient:
    """Calls ``iadeep tuner serve``.

    Args:
        url: base URL, e.g. ``http://127.0.0.1:8890``.
        timeout_s: per request.
        retry_deadline_s: how long to retry connection errors and 5xx answers (a tuner restart).
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, retry_deadline_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, trust_env=False)
        self.retry_deadline_s = retry_deadline_s

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        class _Retry(Exception):
            pass

        def once() -> dict[str, Any]:
            try:
                r = self._http.request(method, path, json=body)
            except httpx.TransportError as exc:
                raise _Retry(f"{type(exc).__name__}: {exc}") from None
            if r.status_code >= 500:
                raise _Retry(f"HTTP {r.status_code}: {r.text[:200]}")
            data = r.json()
            if r.status_code >= 400:
                raise TunerError(r.status_code, str(data.get("error", data)))
            return dict(data)

        try:
            for attempt in Retrying(stop=stop_after_delay(self.retry_deadline_s), reraise=True,
                                    wait=wait_exponential(multiplier=0.1, max=2.0),
                                    retry=retry_if_exception_type(_Retry)):
                with attempt:
                    return once()
        except _Retry as exc:
            raise TunerUnavailable(f"tuner at {self.url}: {exc}") from None
        raise AssertionError("unreachable")

    def open(self, name: str, jobs: Sequence[TunedJob], warm_start: Sequence[Mapping[str, int]] = (),
             stop: StopRule | None = None, *, gpu_mem_gib: float | None = None) -> Outcome:
        """Open (or reopen) session ``name``; ``gpu_mem_gib``: GPU memory left to its jobs (GiB)."""
        body: dict[str, Any] = {"name": name, "jobs": [asdict(j) for j in jobs], "warm_start": [dict(c) for c in warm_start]}
        if stop is not None:
            body["stop"] = asdict(stop)
        if gpu_mem_gib is not None:
            body["gpu_mem_gib"] = gpu_mem_gib
        return _outcome(self._call("POST", "/sessions", body)["outcome"])

    def ask(self, name: str) -> tuple[Proposal | None, Outcome]:
        d = self._call("POST", f"/sessions/{name}/ask")
        p = None if d["trial"] is None else Proposal(int(d["trial"]), {k: int(v) for k, v in d["config"].items()})
        return p, _outcome(d["outcome"])

    def tell(self, name: str, trial: int, normalised: Mapping[str, float]) -> Outcome:
        d = self._call("POST", f"/sessions/{name}/tell", {"trial": trial, "normalised_throughputs": dict(normalised)})
        return _outcome(d["outcome"])

    def outcome(self, name: str) -> Outcome:
        return _outcome(self._call("GET", f"/sessions/{name}")["outcome"])

    def close_session(self, name: str) -> bool:
        return bool(self._call("DELETE", f"/sessions/{name}")["deleted"])
