"""A live replay's clock: wall time that stands still while the control plane has work in flight.

Every wall second of Kubernetes latency is ``speedup`` emulated seconds of a live run: a pod that
takes 1 s from its arrival to its bind has queued 1,000 emulated seconds at 1000x, where the
simulator binds it at once. :class:`HeldClock` removes that from emulated time. It reads Unix
seconds less the wall time it was *held*; the replay holds it while a pod it opened is neither bound
nor found unschedulable (kube-scheduler and the extender are still deciding), and the GPU emulator
holds it while it completes pods whose work is done (the API writes that free their GPUs), and the
node coordinator holds it through each tuning round. They all measure time with it (arrivals,
work, the start and end annotations, measurement times), so a held second passes for nobody: jobs
make no progress and no arrival comes while a decision is in flight, as in the simulator.

While held, the clock creeps at :data:`CREEP` of the wall's pace instead of stopping dead, so that
times read one after the other still order events (a report made after a batch size was written
reads later than the write; float64 resolves about 0.24 us at today's Unix times, so a millisecond
apart is 1 us apart on the clock): 1 ms of emulated time per held wall second at 1x, 0.5 s at 500x.

The clock is one small file shared by the processes of one run (the replay and the emulator run on
one machine in the local cluster): 40 bytes, ``<seq, held_since, offset_s, holds>`` with ``seq``
repeated at the end of a write (a reader retries a torn read). Writers (:meth:`HeldClock.hold`,
:meth:`HeldClock.release`) take an exclusive ``flock`` for their read-modify-write; readers take
no lock (one ``pread``).

- ``holds``: how many holds are outstanding (the clock is held while it is above 0);
- ``held_since``: the wall time the current hold began (meaningful while held);
- ``offset_s``: what the holds before the current one took off the clock (``1 - CREEP`` of
  their wall seconds).

``now() = wall() - offset_s`` when not held, ``held_since + CREEP x (wall() - held_since) -
offset_s`` when held (``wall``: ``time.time``): monotonic, continuous, and at most the wall time.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["HeldClock"]

_LAYOUT = struct.Struct("<QddqQ")  # seq, held_since, offset_s, holds, seq again
CREEP = 1e-3
"""The held clock's pace, relative to the wall's."""
_READ_ATTEMPTS = 100


class HeldClock:
    """Unix seconds less the wall time held (module docstring).

    Args:
        path: the shared clock file; created (not held, offset 0) when it does not exist.
        wall: the wall clock it reads (Unix s); every process sharing the file must read the same
            one (``time.time``; a test passes its own to step time by hand).

    Raises:
        OSError: the file cannot be opened or created.
        ValueError: the file exists but is not a clock file (its size says so).
    """

    def __init__(self, path: str | Path, *, wall: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._wall = wall
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()  # writers of this process, besides the file lock between processes
        with self._locked():
            size = os.fstat(self._fd).st_size
            if size == 0:
                os.pwrite(self._fd, _LAYOUT.pack(1, 0.0, 0.0, 0, 1), 0)
        if size not in (0, _LAYOUT.size):
            os.close(self._fd)
            raise ValueError(f"{self.path}: not a clock file ({size} bytes, expected {_LAYOUT.size})")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> tuple[int, float, float, int]:
        for _ in range(_READ_ATTEMPTS):
            seq, since, offset, holds, seq2 = _LAYOUT.unpack(os.pread(self._fd, _LAYOUT.size, 0))
            if seq == seq2:
                return seq, since, offset, holds
        raise OSError(f"{self.path}: no consistent read in {_READ_ATTEMPTS} attempts")

    def now(self) -> float:
        """The clock's time (Unix s, less the wall time held)."""
        _, since, offset, holds = self._read()
        now = self._wall()
        return (since + CREEP * (now - since) if holds > 0 else now) - offset

    def held_s(self) -> float:
        """Wall seconds held so far (the current hold included)."""
        _, since, offset, holds = self._read()
        return (offset + (1.0 - CREEP) * (self._wall() - since) if holds > 0 else offset) / (1.0 - CREEP)

    def holding(self) -> bool:
        """Whether the clock stands still now."""
        return self._read()[3] > 0

    def hold(self) -> None:
        """Stop the clock (another outstanding hold of any process keeps it stopped too)."""
        with self._locked():
            seq, since, offset, holds = self._read()
            if holds == 0:
                since = self._wall()
            os.pwrite(self._fd, _LAYOUT.pack(seq + 1, since, offset, holds + 1, seq + 1), 0)

    def release(self) -> None:
        """End one hold; the clock runs again when no hold is left.

        Raises:
            RuntimeError: no hold is outstanding.
        """
        with self._locked():
            seq, since, offset, holds = self._read()
            if holds <= 0:
                raise RuntimeError(f"{self.path}: release without a hold")
            if holds == 1:
                offset += (1.0 - CREEP) * max(self._wall() - since, 0.0)
            os.pwrite(self._fd, _LAYOUT.pack(seq + 1, since, offset, holds - 1, seq + 1), 0)

    def close(self) -> None:
        """Close the file (the clock's state stays in it)."""
        os.close(self._fd)
