"""The in-process state store: :class:`iadeep.state._store.KVStateStore` over
:class:`iadeep.state._kvmemory.MemoryBackend`.

It is a real store, not a mock: the same logic as :class:`iadeep.state.EtcdStateStore` (same
checks, errors, watch events and keys) over a backend with etcd's semantics in process memory.
The simulator-side tools and the tests of drivers use it where no etcd runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from iadeep.state._keys import Keys
from iadeep.state._kvmemory import MemoryBackend
from iadeep.state._settings import RetrySettings
from iadeep.state._store import KVStateStore

__all__ = ["MemoryStateStore"]


class MemoryStateStore(KVStateStore):
    """:class:`iadeep.state.StateStore` in process memory (thread-safe, one lock).

    Args:
        prefix: key prefix (as the etcd store's, default ``/iadeep``).
        clock: monotonic seconds for lease expiry; the simulator may pass a virtual clock.
        history: changes kept for :meth:`changes` (older ones are compacted, as etcd does).
        max_txn_ops: the most operations of one transaction (etcd's default ``--max-txn-ops``,
            so that both stores refuse alike).

    Leases expire lazily: a record whose lease ran out disappears (with a ``delete`` event) at
    the next call, or within about 50 ms while a watch waits.
    """

    backend: MemoryBackend

    def __init__(self, *, prefix: str = "/iadeep", clock: Callable[[], float] = time.monotonic,
                 history: int = 100_000, max_txn_ops: int = 128) -> None:
        super().__init__(MemoryBackend(clock=clock, history=history, max_txn_ops=max_txn_ops),
                         Keys("/" + prefix.strip("/")), conflict_attempts=RetrySettings().conflict_attempts)

    def __enter__(self) -> MemoryStateStore:
        return self
