"""Shared state of the live system: typed records, the store protocol and its implementations.

``iadeep.state`` is the only package that talks to etcd.
"""

from iadeep.state._protocol import AllocationConflict, StateStore, StoreUnavailable
from iadeep.state._records import (
    Assignment,
    GpuInfo,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    RecordError,
    TuningRequest,
    from_json,
    to_json,
)

__all__ = [
    "AllocationConflict",
    "Assignment",
    "GpuInfo",
    "GpuState",
    "InterferenceSampleRecord",
    "JobRecord",
    "Measurement",
    "NodeInventory",
    "RecordError",
    "StateStore",
    "StoreUnavailable",
    "TuningRequest",
    "from_json",
    "to_json",
]
