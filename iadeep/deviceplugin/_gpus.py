"""GPU discovery for the device plugin: NVML (``nvidia-ml-py``) on a GPU node, or an emulated
backend chosen explicitly where there is no NVML (development, tests, kwok clusters).

A backend answers :meth:`GpuBackend.discover` with the node's GPUs (index, UUID, whole GiB of
memory, model name, health); the plugin polls it, so a GPU that turns unhealthy, disappears or
comes back with another UUID (after a reboot) is noticed.
"""

from __future__ import annotations

import json
import logging
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["Gpu", "GpuBackend", "NvmlBackend", "EmulatedBackend", "NvmlUnavailable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gpu:
    """One GPU.

    Attributes:
        index: NVML index on the node (0-based).
        uuid: NVML UUID (``GPU-...``), the identity every device ID carries.
        mem_gib: whole GiB of memory (the device plugin advertises one ``iadeep.io/gpu-mem`` unit per GiB).
        model: product name, e.g. ``"Tesla V100-SXM2-16GB"``.
        healthy: False when the GPU stopped answering.
    """

    index: int
    uuid: str
    mem_gib: int
    model: str
    healthy: bool = True


class GpuBackend(Protocol):
    """Where the GPUs come from."""

    def discover(self) -> list[Gpu]:
        """The node's GPUs now, by index."""


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver): choose the emulated backend explicitly."""


class NvmlBackend:
    """GPUs from NVML (``pynvml`` of the ``nvidia-ml-py`` package).

    Raises:
        NvmlUnavailable: NVML is missing (e.g. ``NVMLError_LibraryNotFound`` on a machine without a driver).
    """

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable ({exc}); on a machine without GPUs run with the emulated "
                                  "backend (--backend emulated)") from None

    def discover(self) -> list[Gpu]:
        nv = self._nvml
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = nv.nvmlDeviceGetUUID(h)
                mem = nv.nvmlDeviceGetMemoryInfo(h).total
                name = nv.nvmlDeviceGetName(h)
                out.append(Gpu(i, uuid if isinstance(uuid, str) else uuid.decode(), int(mem // 2**30),
                               name if isinstance(name, str) else name.decode()))
            except nv.NVMLError as exc:
                log.warning("GPU %d does not answer NVML (%s): unhealthy", i, exc)
                out.append(Gpu(i, f"GPU-unknown-{i}", 0, "unknown", healthy=False))
        return out


class EmulatedBackend:
    """Emulated GPUs (no hardware); logged loudly at start.

    Args:
        node: node name (the default UUIDs derive from it, so they are stable across restarts).
        count / mem_gib / model: the emulated GPUs.
        state_file: optional JSON re-read at every poll, to emulate hardware events:
            ``{"uuids": {"<index>": "<uuid>"}, "unhealthy": [<index>, ...]}`` (a changed UUID is
            what a reboot with a replaced GPU looks like).
    """

    def __init__(self, node: str, count: int, mem_gib: int, model: str = "Emulated-GPU",
                 state_file: Path | None = None) -> None:
        if count < 1 or mem_gib < 1:
            raise ValueError(f"emulated GPUs need count >= 1 and mem_gib >= 1, got {count} and {mem_gib}")
        self.node, self.count, self.mem_gib, self.model, self.state_file = node, count, mem_gib, model, state_file
        log.warning("EMULATED GPUs: %d x %d GiB %r on node %s - no real GPU is given to any container",
                    count, mem_gib, model, node)

    def _state(self) -> dict:
        if self.state_file is None or not self.state_file.is_file():
            return {}
        try:
            data = json.loads(self.state_file.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError) as exc:
            log.warning("emulated GPU state %s unreadable, ignored: %s", self.state_file, exc)
            return {}

    def discover(self) -> list[Gpu]:
        st = self._state()
        uuids = {int(k): str(v) for k, v in dict(st.get("uuids", {})).items()}
        unhealthy = {int(i) for i in st.get("unhealthy", [])}
        return [Gpu(i, uuids.get(i) or f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'{self.node}/{i}')}",
                    self.mem_gib, self.model, healthy=i not in unhealthy) for i in range(self.count)]
