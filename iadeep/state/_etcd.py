"""The etcd state store: :class:`iadeep.state._store.KVStateStore` over
:class:`iadeep.state._etcdwire.EtcdBackend`, the only code in iadeep that talks to etcd.

It speaks etcd's v3 JSON gateway (``/v3/kv/txn`` and friends) with ``etcd3gw``'s client; see
:mod:`iadeep.state._records` for the key schema, :mod:`iadeep.state._keys` for its extra
``<p>/reservations/<pod_uid>`` key, :mod:`iadeep.state._alloc` for the allocation transactions
(compare-and-swap on mod revisions, retried on lost races) and :mod:`iadeep.state._etcdwire` for
the wire: one HTTP session per thread, retries with exponential backoff and jitter, failover to
the next endpoint, auth tokens, watch streams reopened from the last revision seen, and
:class:`~iadeep.state.StoreUnavailable` naming the endpoints when retries run out.
"""

from __future__ import annotations

from collections.abc import Sequence

from iadeep.state._etcdwire import EtcdBackend
from iadeep.state._keys import Keys
from iadeep.state._settings import StateSettings
from iadeep.state._store import KVStateStore

__all__ = ["EtcdStateStore"]


class EtcdStateStore(KVStateStore):
    """:class:`iadeep.state.StateStore` backed by etcd (thread-safe).

    Args:
        settings: endpoints, prefix, TLS, auth, timeouts and retries; ``None`` reads them from
            the environment (``IADEEP_ETCD_*``). Without endpoints, the local etcd of
            ``iadeep etcd start`` is used if it runs.
        endpoints: shorthand overriding ``settings.endpoints``.

    Attributes:
        settings: the settings in use; endpoints: the etcd endpoints, in failover order.

    Raises:
        StoreUnavailable: no endpoint configured and no local etcd running.

    Example::

        store = EtcdStateStore(endpoints=["http://127.0.0.1:2379"])
        store.put_inventory(NodeInventory("n1", (GpuInfo(0, 32.0),)), lease_ttl_s=10)
        store.reserve(job, "n1", [0], colocation_limit=2, now_s=time.time())
    """

    backend: EtcdBackend

    def __init__(self, settings: StateSettings | None = None, *, endpoints: Sequence[str] | None = None) -> None:
        settings = settings if settings is not None else StateSettings()
        if endpoints is not None:
            settings = StateSettings.model_validate({**settings.model_dump(), "endpoints": list(endpoints)})
        if not settings.endpoints:
            from iadeep.state._local import require_endpoints

            settings = StateSettings.model_validate({**settings.model_dump(), "endpoints": require_endpoints(settings)})
        super().__init__(EtcdBackend(settings), Keys(settings.prefix), conflict_attempts=settings.retry.conflict_attempts)
        self.settings = settings
        self.endpoints = self.backend.endpoints

    def __enter__(self) -> EtcdStateStore:
        return self
