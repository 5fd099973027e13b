"""The extender's upkeep and inspection: releasing the reservations of pods that ended, the
periodic sweep of reservations whose pods are gone, and ``/inspect``'s and ``/metrics``' view of
the state.

:class:`Upkeep` is a part of :class:`iadeep.extender.ExtenderService` (a base class of it), over
the service's ``store``, ``pod_api``, ``cache``, ``metrics`` and release bookkeeping.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from iadeep.extender._bind import KubeError, release_reservation
from iadeep.state import StoreUnavailable

__all__ = ["Upkeep"]

log = logging.getLogger("iadeep.extender")


class Upkeep:
    """Releases, the sweep, and inspection (module docstring)."""

    @property
    def releases_in_flight(self) -> int:
        """Releases of ended pods being made now."""
        return self._releasing

    def await_releases(self) -> None:
        """Wait until no release of an ended pod is in flight (bounded by ``release_wait_s``)."""
        if not self._releasing:
            return
        deadline = time.monotonic() + self.settings.cache.release_wait_s
        with self._released:
            while self._releasing and (left := deadline - time.monotonic()) > 0:
                self._released.wait(left)

    def sweep(self) -> list[str]:
        """Release reservations of pods that are gone, finished, bound elsewhere, or left unbound
        longer than ``sweep_grace_s`` (a gang member: ``gang_timeout_s``, and then the gang's
        other unbound members with it); returns the released pod UIDs.

        Raises:
            KubeError, StoreUnavailable: the pods or the reservations could not be listed.
        """
        if self.pod_api is None:
            return []
        assignments = self.store.assignments()
        pods = {p.uid: p for p in self.pod_api.pods()}
        now = self.clock()
        grace = self.settings.cache.sweep_grace_s
        try:
            jobs = self.cache.current()[0].jobs
        except StoreUnavailable:
            jobs = {}
        stale: set[str] = set()
        unbound: set[str] = set()
        for a in assignments:
            p = pods.get(a.pod_uid)
            job = jobs.get(a.pod_uid)
            limit = min(grace, self.settings.gang_timeout_s) if job is not None and job.gang else grace
            if p is not None and not p.node:
                unbound.add(a.pod_uid)
            if p is None or p.phase in ("Succeeded", "Failed") or (p.node and p.node != a.node) \
                    or (not p.node and now - a.assumed_at > limit):
                stale.add(a.pod_uid)
        stale |= self.gang_peers(stale, unbound)  # a gang is released together
        with self._memo_lock:
            stale |= self._pending_release
        released = self.release_pods(sorted(stale), why="sweep", attempts=1)
        if released:
            log.info("sweep released %d stale reservation(s): %s", len(released), ", ".join(released[:10]))
        return released

    def release_pods(self, uids: Sequence[str], *, why: str = "pod ended", attempts: int = 3) -> list[str]:
        """Release the reservations of ``uids`` (the one release path: the pod follower calls it
        for pods that ended, the sweep for stale reservations). Idempotent; a release the store
        refuses (unreachable) is queued for the next sweep. Returns the UIDs released.

        The pod follower's UIDs are filtered to pods with a job record in the followed copy (pods
        never reserved through iadeep need no release) unless queued for release already. While a
        release is in flight, ``filter`` waits for it (at most ``CacheSettings.release_wait_s``):
        kube-scheduler retries the pods that did not fit on the very event that ended the pod,
        and would otherwise be told the memory is still taken.
        """
        if why == "sweep":  # stale reservations: nobody is being retried on their account
            return self._release_pods(uids, why=why, attempts=attempts)
        with self._released:
            self._releasing += 1
        try:
            return self._release_pods(uids, why=why, attempts=attempts)
        finally:
            with self._released:
                self._releasing -= 1
                self._released.notify_all()

    def _release_pods(self, uids: Sequence[str], *, why: str, attempts: int) -> list[str]:
        released = []
        now = self.clock()
        if why != "sweep":
            try:
                jobs = self.cache.current()[0].jobs
            except StoreUnavailable:
                jobs = None  # unknown: try them all
            with self._memo_lock:
                queued = set(self._pending_release)
            uids = [u for u in uids if jobs is None or u in jobs or u in queued]
        for uid in uids:
            if release_reservation(self.store, uid, now_s=now, attempts=attempts):
                released.append(uid)
                self.cache.forget(uid)
                with self._memo_lock:
                    self._pending_release.discard(uid)
            else:
                with self._memo_lock:
                    self._pending_release.add(uid)
        if released:
            self.metrics.releases.labels(why).inc(len(released))
        return released

    def _sweep_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.sweep()
            except (KubeError, StoreUnavailable) as exc:
                log.warning("sweep failed: %s", exc)
            except Exception:  # noqa: BLE001 - keep sweeping
                log.exception("sweep failed")

    def inspect(self, node: str | None = None) -> dict[str, Any]:
        """Per node, per GPU: memory, the pods on it and their predicted normalised throughput.

        Raises:
            StoreUnavailable: no usable snapshot.
        """
        snap, base = self.cache.current()
        pred = self.predicted()
        nodes: dict[str, list[dict[str, Any]]] = {}
        for name in ([node] if node is not None else base.node_names):
            gpus = base.gpus_of(name)
            if base.node_index(name) is None:
                continue
            rows = []
            for g in gpus:
                handles = [int(h) for h in base.slots[g] if h >= 0]
                types = [int(base.job_type[h]) for h in handles]
                jobs = []
                for k, h in enumerate(handles):
                    uid = base.pods[h]
                    rec = snap.jobs.get(uid)
                    others = types[:k] + types[k + 1:]
                    throughput = float(np.prod([pred[types[k], t] for t in others])) if others else 1.0
                    jobs.append({
                        "pod_uid": uid,
                        "pod": f"{rec.namespace}/{rec.name}" if rec else uid,
                        "model": rec.model if rec else None,
                        "batch_size": rec.batch_size if rec else None,
                        "mem_gib": rec.mem_gib if rec else None,
                        "predicted_normalised_throughput": round(throughput, 4),
                    })
                total, used = float(base.gpu_mem_total_gib[g]), float(base.gpu_mem_used_gib[g])
                rows.append({"index": int(base.gpu_local_index[g]), "uuid": base.gpu_uuid[g], "mem_total_gib": total,
                             "mem_used_gib": round(used, 6), "mem_free_gib": round(total - used, 6), "jobs": jobs})
            nodes[name] = rows
        return {
            "policy": self.policy.name,
            "colocation_limit": self.policy.limit,
            "samples_learned": self.samples_learned,
            "snapshot_age_s": self.cache.age_s(),
            "nodes": nodes,
        }

    def _metrics_rows(self) -> dict[str, Any]:
        try:
            doc = self.inspect()
        except StoreUnavailable:
            return {"store_ok": False, "snapshot_age_s": self.cache.age_s()}
        for gpus in doc["nodes"].values():
            for g in gpus:
                for j in g["jobs"]:
                    j["mem_gib"] = j["mem_gib"] or 0.0
        doc["store_ok"] = self.cache.last_error is None
        return doc
