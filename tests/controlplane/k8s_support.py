"""Small polling helpers for the control-plane tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(fetch: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 30.0, what: str = "") -> T:
    """Call ``fetch`` until ``done(result)``; return the last result or fail with it."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or 'condition'}; last: {value!r}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def gpu_container(name: str = "main", *, gpu_mem: int, gpus: int | None = None) -> dict:
    """A container asking for ``gpu_mem`` GiB of iadeep.io/gpu-mem (extended resources: requests == limits)."""
    resources = {"iadeep.io/gpu-mem": str(gpu_mem)}
    if gpus is not None:
        resources["iadeep.io/gpu-count"] = str(gpus)
    return {
        "name": name,
        "image": "registry.invalid/iadeep/trainer:fake",
        "resources": {"requests": dict(resources, cpu="100m"), "limits": resources},
    }
