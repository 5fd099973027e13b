"""Shared state of the live system: typed records, the store protocol and its implementations.

``iadeep.state`` is the only package that talks to etcd. A throwaway etcd member for tests and
development is :class:`iadeep.dev.LocalEtcd`; the detached one of ``iadeep etcd start`` is found
with :func:`local_endpoint` and started with :func:`ensure_local_etcd` (both raise
:class:`LocalEtcdError`).
"""

from iadeep.state._etcd import EtcdStateStore
from iadeep.state._local import LocalEtcdError, ensure_local_etcd, local_endpoint
from iadeep.state._memory import MemoryStateStore
from iadeep.state._rules import GangMember, reservation_gpu_limit
from iadeep.state._protocol import (
    AllocationConflict,
    Change,
    ChangeBatch,
    HistoryCompacted,
    NodeRecords,
    StateListing,
    StateStore,
    StoreUnavailable,
    TransactionTooLarge,
)
from iadeep.state._records import (
    WORKLOAD_STATES,
    Assignment,
    BatchSizeAssignment,
    WorkloadStatus,
    GpuInfo,
    JobCheckpoint,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    RecordError,
    MAX_INT,
    MAX_NORMALISED_THROUGHPUT,
    SESSION_KINDS,
    TuningRequest,
    UNDO_OUTCOMES,
    BannedType,
    UndoRecord,
    ArrivalRecord,
    from_json,
    to_json,
)
from iadeep.state._settings import (
    AuthSettings,
    LocalEtcdSettings,
    RetrySettings,
    StateSettings,
    TimeoutSettings,
    TlsSettings,
)

__all__ = [
    "AllocationConflict",
    "Assignment",
    "AuthSettings",
    "BatchSizeAssignment",
    "WorkloadStatus",
    "JobCheckpoint",
    "WORKLOAD_STATES",
    "Change",
    "ChangeBatch",
    "HistoryCompacted",
    "NodeRecords",
    "StateListing",
    "EtcdStateStore",
    "GangMember",
    "LocalEtcdError",
    "LocalEtcdSettings",
    "MemoryStateStore",
    "RetrySettings",
    "StateSettings",
    "TimeoutSettings",
    "TlsSettings",
    "ensure_local_etcd",
    "local_endpoint",
    "GpuInfo",
    "GpuState",
    "InterferenceSampleRecord",
    "JobRecord",
    "Measurement",
    "NodeInventory",
    "PlacementPolicy",
    "RecordError",
    "MAX_INT",
    "MAX_NORMALISED_THROUGHPUT",
    "SESSION_KINDS",
    "StateStore",
    "StoreUnavailable",
    "TransactionTooLarge",
    "TuningRequest",
    "UNDO_OUTCOMES",
    "BannedType",
    "UndoRecord",
    "ArrivalRecord",
    "from_json",
    "reservation_gpu_limit",
    "to_json",
]
