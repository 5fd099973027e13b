"""Small polling helpers for the control-plane tests."""

from __future__ import annotations

from iadeep.testing import wait_for  # noqa: F401  (re-exported for the tests)


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
