"""The extender's copy of the shared state, refreshed from the store in the background.

``filter`` and ``prioritize`` must answer in milliseconds, so they read a :class:`Snapshot` (and
its :class:`ViewBase`) that a background thread re-reads from the store every
``refresh_interval_s``. Reservations this process makes are applied to the copy at once (and
re-applied over a refresh that started before them), so the next ``filter`` already sees them.
``bind`` never trusts the copy for correctness: the store's reservation transaction is the
arbiter, and a conflict refreshes the copy and places again.

Node inventories (which change when a device plugin starts or goes away) are re-read every
``inventory_interval_s``, learned interference samples every ``samples_interval_s`` (handed to
``on_samples`` in order, each sample once), job records only when a GPU holds a pod the copy
has no record of.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from iadeep.extender._view import Snapshot, TypeResolver, ViewBase
from iadeep.state import Assignment, InterferenceSampleRecord, JobRecord, StateStore, StoreUnavailable

__all__ = ["StateCache"]

log = logging.getLogger("iadeep.extender")

Clock = Callable[[], float]


class StateCache:
    """Snapshot of inventories, GPU states and jobs, plus the view arrays built from it.

    Args:
        store: the state store.
        types: job-type resolver (for the view's job arrays).
        slots: co-location slots per GPU in the views (the policy's limit).
        max_age_s: :meth:`current` refuses a snapshot older than this.
        clock: Unix time, injectable for tests.
        on_samples: called with new learned samples (oldest first), from the refreshing thread.
    """

    def __init__(self, store: StateStore, types: TypeResolver, *, slots: int, max_age_s: float = 5.0,
                 clock: Clock = time.time, on_samples: Callable[[Sequence[InterferenceSampleRecord]], None] | None = None):
        self.store = store
        self.types = types
        self.slots = slots
        self.max_age_s = max_age_s
        self.clock = clock
        self.on_samples = on_samples
        self._lock = threading.Lock()  # guards the fields below
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._snapshot: Snapshot | None = None
        self._base: ViewBase | None = None
        self._error: str | None = "not loaded yet"
        self._recent: list[tuple[float, JobRecord, int, tuple[Assignment, ...]]] = []
        self._samples_seen = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    # -- reading -----------------------------------------------------------------------------
    def current(self) -> tuple[Snapshot, ViewBase]:
        """The latest snapshot and its view arrays.

        Raises:
            StoreUnavailable: the last refresh failed, or the snapshot is older than ``max_age_s``
                (a synchronous refresh is tried first when there is no background thread).
        """
        with self._lock:
            snap, base, error = self._snapshot, self._base, self._error
        stale = snap is None or self.clock() - snap.taken_at_s > self.max_age_s
        if (stale or error is not None) and self._thread is None:
            self.refresh()
            with self._lock:
                snap, base, error = self._snapshot, self._base, self._error
            stale = False
        if error is not None:
            raise StoreUnavailable(f"state store unavailable: {error}")
        if stale or snap is None or base is None:
            age = "never loaded" if snap is None else f"{self.clock() - snap.taken_at_s:.1f}s old"
            raise StoreUnavailable(f"state snapshot is {age} (limit {self.max_age_s}s)")
        assert snap is not None and base is not None
        return snap, base

    @property
    def last_error(self) -> str | None:
        with self._lock:
            return self._error

    def age_s(self) -> float | None:
        with self._lock:
            snap = self._snapshot
        return None if snap is None else self.clock() - snap.taken_at_s

    # -- writing -----------------------------------------------------------------------------
    def refresh(self, *, samples: bool = True, inventories: bool = True) -> None:
        """Re-read the store now: GPU states always; inventories when ``inventories`` (or none are
        known yet); job records only when a GPU holds a pod this copy has no record of (this
        process's own reservations carry theirs), so a steady refresh costs one range read.

        Raises:
            StoreUnavailable: the store could not be read (the error is also kept for :meth:`current`).
        """
        with self._refresh_lock:
            started = self.clock()
            with self._lock:
                old = self._snapshot
            try:
                invs = self.store.inventories() if inventories or old is None else old.inventories
                states = self.store.gpu_states()
                jobs = old.jobs if old is not None else {}
                if any(uid not in jobs for st in states.values() for uid in st.pods):
                    jobs = self.store.jobs()
                new_samples = self.store.samples() if samples and self.on_samples is not None else None
            except StoreUnavailable as exc:
                with self._lock:
                    self._error = str(exc)
                raise
            snap = Snapshot(invs, states, jobs, started)
            base = ViewBase.from_snapshot(snap, self.types, slots=self.slots)
            with self._lock:
                self._recent = [r for r in self._recent if r[0] >= started]
                for _, job, type_id, assignments in self._recent:
                    snap = snap.with_reservation(job, assignments)
                    base = base.with_reservation(job, type_id, assignments)
                self._snapshot, self._base, self._error = snap, base, None
                self.refreshes += 1
            if new_samples is not None and len(new_samples) > self._samples_seen:
                fresh = new_samples[self._samples_seen:]
                self._samples_seen = len(new_samples)
                assert self.on_samples is not None
                self.on_samples(fresh)

    def apply(self, job: JobRecord, type_id: int, assignments: Sequence[Assignment]) -> None:
        """Add a reservation this process just made to the copy."""
        entry = (self.clock(), job, type_id, tuple(assignments))
        with self._lock:
            self._recent.append(entry)
            if self._snapshot is not None and self._base is not None:
                self._snapshot = self._snapshot.with_reservation(job, assignments)
                self._base = self._base.with_reservation(job, type_id, assignments)

    def forget(self, pod_uid: str) -> None:
        """A reservation of ``pod_uid`` was released: drop it from the copy and stop re-applying it."""
        with self._lock:
            self._recent = [r for r in self._recent if r[1].pod_uid != pod_uid]
            snap = self._snapshot
        if snap is None or not any(pod_uid in st.pods for st in snap.gpu_states.values()):
            return
        snap = snap.without_pod(pod_uid)
        base = ViewBase.from_snapshot(snap, self.types, slots=self.slots)
        with self._lock:
            if self._snapshot is not None and self._snapshot.taken_at_s <= snap.taken_at_s:
                self._snapshot, self._base = snap, base

    # -- background --------------------------------------------------------------------------
    def start(self, interval_s: float, *, samples_interval_s: float = 10.0, inventory_interval_s: float = 10.0) -> None:
        """Refresh every ``interval_s`` in a daemon thread (learned samples every ``samples_interval_s``,
        node inventories every ``inventory_interval_s``)."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            next_samples = next_inventories = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                samples, inventories = now >= next_samples, now >= next_inventories
                try:
                    self.refresh(samples=samples, inventories=inventories)
                    if samples:
                        next_samples = now + samples_interval_s
                    if inventories:
                        next_inventories = now + inventory_interval_s
                except StoreUnavailable as exc:
                    log.warning("state refresh failed: %s", exc)
                except Exception:  # noqa: BLE001 - keep refreshing; the error is logged with its traceback
                    log.exception("state refresh failed")
                    with self._lock:
                        self._error = "state refresh failed (see the extender log)"
                self._stop.wait(interval_s)

        self._thread = threading.Thread(target=loop, name="iadeep-state-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
