"""The extender's copy of the shared state: listed once, then kept current from the store's changes.

``filter`` and ``prioritize`` must answer in milliseconds, so they read a :class:`Snapshot` and
its :class:`ViewBase` that this cache keeps in memory. It follows the store the way a Kubernetes
informer follows the API server: :meth:`StateStore.list_state` once (all records at one
revision), then :meth:`StateStore.changes` from the next revision, each batch of changes applied
to the copy in place of a re-read (Python work only for the GPUs and jobs that changed). The
watch is reopened every ``idle_s`` when nothing changes, which also proves the store is still
reachable: a watch that only timed out proves nothing (a paused etcd holds the stream open and
silent), so a quiet watch is followed by one cheap linearizable read, and only an answer (or a
delivered change) confirms the copy. After ``max_age_s`` without confirmation :meth:`current`
refuses the copy (filter answers ``Error``, ``/readyz`` fails). A broken watch is resumed from the last revision seen;
compacted history (or an outage) makes the cache list again.

Reservations this process makes are applied to the copy at once (:meth:`apply`), so the next
``filter`` already sees them, and re-applied over any change of the same GPU that the watch
delivers before the reservation itself (recognised by the job record its transaction wrote).
``bind`` never trusts the copy for correctness: the store's reservation transaction is the
arbiter, and after a conflict :meth:`sync` waits until the copy has caught up with the store
before placing again.

Learned interference samples reach ``on_samples`` in order, each once (all of them at the first
listing). Undo records (:class:`~iadeep.state.UndoRecord`) reach ``on_undos``: every one at each
listing (the bans they carry must be applied again by a restarted extender), then each put the
watch delivers. The job rows of the view are compacted (rebuilt from the snapshot) when more than
half of them belong to pods that left.

Thread-safety: every method may be called from any thread; readers never wait for a writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from iadeep.extender._view import Snapshot, ViewBase, add_reservation, remove_pod
from iadeep.podspec import TypeResolver
from iadeep.state import (
    Assignment,
    ChangeBatch,
    GpuState,
    HistoryCompacted,
    InterferenceSampleRecord,
    JobRecord,
    NodeInventory,
    StateStore,
    StoreUnavailable,
    UndoRecord,
)

__all__ = ["StateCache"]

log = logging.getLogger("iadeep.extender")

Clock = Callable[[], float]

_PENDING_TTL_S = 60.0  # an own reservation not confirmed by the watch for this long is dropped
_COMPACT_MIN_ROWS = 1024  # compaction is not worth it below this many job rows
_DELIVERED = 4096  # job records remembered as delivered by the watch (binds in flight are far fewer)


class StateCache:
    """Snapshot of inventories, GPU states and jobs, plus the view arrays built from it.

    Args:
        store: the state store.
        types: job-type resolver (for the view's job arrays).
        slots: co-location slots per GPU in the views (the policy's limit).
        max_age_s: :meth:`current` refuses a copy not confirmed by the store for this long (s).
        idle_s: how long a watch waits without changes before it is reopened (s).
        clock: Unix time, injectable for tests.
        on_samples: called with new learned samples (oldest first), from the following thread.
        on_undos: called with undo records (all of them at each listing, then each one put),
            from the following thread; it must return quickly (no Kubernetes calls on this thread).
        on_nodes: called with the names of the nodes whose inventory or GPU states changed (all
            published nodes at each listing), after the copy reflects the change, from the
            following thread; it must return quickly (:class:`~iadeep.extender._nodestate.NodeStatePublisher`).
    """

    def __init__(self, store: StateStore, types: TypeResolver, *, slots: int, max_age_s: float = 5.0,
                 idle_s: float = 1.0, clock: Clock = time.time,
                 on_samples: Callable[[Sequence[InterferenceSampleRecord]], None] | None = None,
                 on_undos: Callable[[Sequence[UndoRecord]], None] | None = None,
                 on_nodes: Callable[[set[str]], None] | None = None):
        self.store = store
        self.types = types
        self.slots = slots
        self.max_age_s = max_age_s
        self.idle_s = idle_s
        self.clock = clock
        self.on_samples = on_samples
        self.on_undos = on_undos
        self.on_nodes = on_nodes
        self._write = threading.RLock()  # one writer at a time; readers only read self._state
        self._state: tuple[Snapshot, ViewBase] | None = None
        self._error: str | None = "not loaded yet"
        self._confirmed_at = 0.0  # last time the store answered (Unix s)
        self._revision = 0  # store revision the copy reflects
        self._caught_up = threading.Condition(self._write)
        # own reservations not yet seen in the watch: (applied at, job, type id, assignments)
        self._pending: list[tuple[float, JobRecord, int, tuple[Assignment, ...]]] = []
        # job records the watch delivered lately: (pod UID, record) -> None, oldest first
        self._delivered: OrderedDict[tuple[str, JobRecord], None] = OrderedDict()
        self._samples_seen = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listings = 0
        self.batches = 0

    # -- reading -----------------------------------------------------------------------------
    def current(self) -> tuple[Snapshot, ViewBase]:
        """The latest snapshot and its view arrays.

        Raises:
            StoreUnavailable: the store could not be followed, or has not confirmed the copy for
                ``max_age_s`` (without a following thread, a listing is tried first).
        """
        state, error = self._state, self._error
        if (state is None or error is not None or self._stale()) and self._thread is None:
            self.refresh()
            state, error = self._state, self._error
        if error is not None:
            raise StoreUnavailable(f"state store unavailable: {error}")
        if state is None:
            raise StoreUnavailable("state never loaded")
        if self._stale():
            raise StoreUnavailable(f"state not confirmed by the store for {self.clock() - self._confirmed_at:.1f}s "
                                   f"(limit {self.max_age_s}s)")
        return state

    def _stale(self) -> bool:
        return self.clock() - self._confirmed_at > self.max_age_s

    @property
    def last_error(self) -> str | None:
        return self._error

    @property
    def revision(self) -> int:
        """The store revision the copy reflects."""
        return self._revision

    def age_s(self) -> float | None:
        """Seconds since the store last confirmed the copy (``None``: never loaded)."""
        return None if self._state is None else self.clock() - self._confirmed_at

    # -- writing -----------------------------------------------------------------------------
    def refresh(self) -> None:
        """List the whole state again now (replaces the copy; own reservations the listing does
        not show yet are re-applied).

        Raises:
            StoreUnavailable: the store could not be read (the error is also kept for :meth:`current`).
        """
        try:
            listing = self.store.list_state()
        except StoreUnavailable as exc:
            self._error = str(exc)
            raise
        now = self.clock()
        snap = Snapshot(listing.inventories, listing.gpu_states, listing.jobs, now)
        try:
            base = ViewBase.from_snapshot(snap, self.types, slots=self.slots)
        except Exception as exc:
            self._error = f"could not build the state copy: {type(exc).__name__}: {exc}"
            raise
        fresh: list[InterferenceSampleRecord] = []
        with self._write:
            self._pending = [p for p in self._pending if now - p[0] < _PENDING_TTL_S]
            snap, base = self._with_pending(snap, base, now)
            self._state, self._error = (snap, base), None
            self._revision = listing.revision
            self._confirmed_at = now
            self.listings += 1
            if len(listing.samples) > self._samples_seen:
                fresh = listing.samples[self._samples_seen:]
                self._samples_seen = len(listing.samples)
            self._caught_up.notify_all()
        if fresh and self.on_samples is not None:
            self.on_samples(fresh)
        if listing.undos and self.on_undos is not None:
            self.on_undos(list(listing.undos.values()))
        if self.on_nodes is not None:
            self.on_nodes(set(snap.inventories))

    def apply_batch(self, batch: ChangeBatch) -> None:
        """Apply one batch of store changes (from :meth:`StateStore.changes`) to the copy."""
        inventories: dict[str, NodeInventory | None] = {}
        gpus: dict[tuple[str, int], GpuState | None] = {}
        jobs: dict[str, JobRecord | None] = {}
        samples: list[InterferenceSampleRecord] = []
        undos: list[UndoRecord] = []
        for c in batch.changes:
            if c.kind == "inventory":
                inventories[c.name] = c.record  # type: ignore[index,assignment]
            elif c.kind == "gpu":
                gpus[c.name] = c.record  # type: ignore[index,assignment]
            elif c.kind == "job":
                jobs[c.name] = c.record  # type: ignore[index,assignment]
            elif c.kind == "sample" and c.record is not None:
                samples.append(c.record)  # type: ignore[arg-type]
            elif c.kind == "undo" and c.record is not None:
                undos.append(c.record)  # type: ignore[arg-type]
        # every node a change concerns, also those the copy already reflects (a release this
        # process made: forget() applied it before the watch delivered it)
        nodes = set(inventories) | {node for node, _ in gpus}
        now = self.clock()
        with self._write:
            if self._state is None:
                return
            snap, base = self._state
            # changes the copy already has (this process's own reservations, applied at bind time)
            # cost nothing: no copy of the snapshot or the arrays for them
            gpus = {k: v for k, v in gpus.items() if snap.gpu_states.get(k) != v}
            jobs = {k: v for k, v in jobs.items() if snap.jobs.get(k) != v}
            inventories = {k: v for k, v in inventories.items() if snap.inventories.get(k) != v}
            # an own reservation is confirmed once the watch delivers the job record its
            # transaction wrote (the very record: an older one of the same pod does not count);
            # later changes in the same batch, a release say, then apply as they are
            written = {(c.name, c.record) for c in batch.changes if c.kind == "job" and c.record is not None}
            for w in written:
                self._delivered[w] = None
            while len(self._delivered) > _DELIVERED:
                self._delivered.popitem(last=False)
            if self._pending:
                self._pending = [p for p in self._pending
                                 if now - p[0] < _PENDING_TTL_S and (p[1].pod_uid, p[1]) not in written]
            if inventories or gpus or jobs:
                snap = snap.with_changes(inventories=inventories, gpu_states=gpus, jobs=jobs)
                if inventories or (len(base.pods) > _COMPACT_MIN_ROWS and base.mostly_dead()):
                    base = ViewBase.from_snapshot(snap, self.types, slots=self.slots)
                else:
                    base = base.with_jobs(jobs, self.types, now_s=now)
                    base = base.with_gpu_states({k: snap.gpu_states.get(k) for k in gpus}, snap.jobs, self.types, now_s=now)
                snap, base = self._with_pending(snap, base, now)
                self._state = (snap, base)
            self._revision = max(self._revision, batch.revision)
            self._confirmed_at = now
            self._error = None
            self._samples_seen += len(samples)
            self.batches += 1
            self._caught_up.notify_all()
        if samples and self.on_samples is not None:
            self.on_samples(samples)
        if undos and self.on_undos is not None:
            self.on_undos(undos)
        if nodes and self.on_nodes is not None:
            self.on_nodes(nodes)

    def _with_pending(self, snap: Snapshot, base: ViewBase, now: float) -> tuple[Snapshot, ViewBase]:
        for _, job, type_id, assignments in self._pending:
            snap, base = add_reservation(snap, base, job, type_id, assignments, self.types, now_s=now)
        return snap, base

    def apply(self, job: JobRecord, type_id: int, assignments: Sequence[Assignment]) -> None:
        """Add a reservation this process just made to the copy."""
        now = self.clock()
        with self._write:
            if (job.pod_uid, job) in self._delivered:
                return  # the watch was faster: the copy has it (and anything that followed it)
            if self._state is None:
                self._pending.append((now, job, type_id, tuple(assignments)))
                return
            state = add_reservation(*self._state, job, type_id, assignments, self.types, now_s=now)
            if state[0] is not self._state[0]:  # not yet delivered by the watch: re-apply it until it is
                self._pending.append((now, job, type_id, tuple(assignments)))
                self._state = state

    def forget(self, pod_uid: str) -> None:
        """A reservation of ``pod_uid`` was released: drop it from the copy and stop re-applying it."""
        with self._write:
            self._pending = [p for p in self._pending if p[1].pod_uid != pod_uid]
            if self._state is not None:
                self._state = remove_pod(*self._state, pod_uid, self.types, now_s=self.clock())

    def sync(self, timeout_s: float = 2.0) -> bool:
        """Wait until the copy reflects every change the store had when called (a listing when no
        thread follows the store); False when that took longer than ``timeout_s``.

        Raises:
            StoreUnavailable: the store's revision could not be read.
        """
        if self._thread is None:
            self.refresh()
            return True
        target = self.store.revision()
        deadline = time.monotonic() + timeout_s
        with self._write:
            while self._revision < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._caught_up.wait(left)
        return True

    # -- background --------------------------------------------------------------------------
    def start(self) -> None:
        """Follow the store in a daemon thread (lists first when nothing is loaded)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._follow, name="iadeep-state-follow", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        must_list = self._state is None
        backoff = 0.1
        while not self._stop.is_set():
            try:
                if must_list:
                    self.refresh()
                    must_list = False
                for batch in self.store.changes(self._revision + 1, idle_s=self.idle_s):
                    self.apply_batch(batch)
                    if self._stop.is_set():
                        return
                # The watch delivered nothing for idle_s. That alone proves nothing (a paused etcd
                # keeps the stream open and silent), so one linearizable read confirms that etcd
                # answers; the copy is confirmed as of when the read was sent (changes made before
                # it are delivered by the next watch, which starts where this one stopped).
                asked = self.clock()
                self.store.revision()
                self._confirmed_at = asked
                backoff = 0.1
            except HistoryCompacted as exc:
                log.info("state history compacted, listing again: %s", exc)
                must_list = True
            except Exception as exc:  # noqa: BLE001 - keep following; /readyz reports the error meanwhile
                if isinstance(exc, StoreUnavailable):
                    log.warning("following the state store failed: %s", exc)
                    self._error = str(exc)
                else:
                    log.exception("following the state store failed")
                    self._error = "following the state store failed (see the extender log)"
                must_list = True  # the store may have lost or moved its history meanwhile
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.idle_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

