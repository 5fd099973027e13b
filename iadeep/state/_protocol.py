"""The state-store protocol: what drivers may ask of the shared state.

Implementations: one store class (:class:`iadeep.state._store.KVStateStore`) over a key-value
backend with etcd's semantics (:mod:`iadeep.state._kv`): :class:`iadeep.state.EtcdStateStore` (over
etcd; the only code that talks to etcd) and :class:`iadeep.state.MemoryStateStore` (in process, for
tests of drivers and for the simulator-side tools).

Consistency: every method is linearisable with respect to the others; :meth:`reserve` and
:meth:`release` are atomic (one etcd transaction comparing the mod revisions of the GPU records
they change), so two reservations can never take the same GPU memory. Methods are thread-safe.

Errors: :class:`StoreUnavailable` when the backend cannot be reached after retries;
:class:`AllocationConflict` when a reservation does not fit (memory, co-location limit, missing
inventory, or the pod already holds a reservation); :class:`RecordError` for malformed records.
Nothing is written when a method raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from iadeep.state._records import (
    Assignment,
    BatchSizeAssignment,
    WorkloadStatus,
    JobCheckpoint,
    GpuState,
    InterferenceSampleRecord,
    JobRecord,
    Measurement,
    NodeInventory,
    PlacementPolicy,
    TuningRequest,
    UndoRecord,
    ArrivalRecord,
)

if TYPE_CHECKING:
    from iadeep.state._rules import GangMember

__all__ = ["StateStore", "StoreUnavailable", "AllocationConflict", "TransactionTooLarge", "HistoryCompacted",
           "Change", "ChangeBatch", "StateListing", "NodeRecords"]


class StoreUnavailable(RuntimeError):
    """The state store could not be reached (after retries); the message names the endpoint."""


class AllocationConflict(RuntimeError):
    """A reservation does not fit; the message says which GPU and why.

    Attributes:
        held: when the pod already holds a reservation, its assignments (else empty): the caller
            may reuse it (same node) or supersede it (``reserve(..., supersede=True)``).
    """

    def __init__(self, message: str, *, held: Sequence[Assignment] = ()) -> None:
        super().__init__(message)
        self.held: tuple[Assignment, ...] = tuple(held)


class TransactionTooLarge(AllocationConflict):
    """etcd refused a transaction with more operations than its ``--max-txn-ops``: the store's
    ``max_txn_ops`` setting is above the server's. The store is available; the request can never
    succeed as it is. The message names both."""


class HistoryCompacted(RuntimeError):
    """:meth:`StateStore.changes` was asked for revisions the store no longer keeps (etcd
    compaction): list the state again (:meth:`StateStore.list_state`) and follow from there."""


ChangeKind = Literal["inventory", "gpu", "job", "sample", "undo"]


@dataclass(frozen=True)
class Change:
    """One change of a followed record (see :meth:`StateStore.changes`).

    Attributes:
        kind: ``inventory`` (key ``nodes/<node>``), ``gpu`` (``gpus/<node>/<gpu>``), ``job``
            (``jobs/<pod_uid>``), ``sample`` (``samples/<seq>``) or ``undo`` (``undos/<pod_uid>``).
        name: the node name, ``(node, gpu index)``, the pod UID (job, undo) or the sample's
            sequence key.
        record: the new record; ``None`` when it was deleted.
        revision: store revision of the change.
    """

    kind: ChangeKind
    name: str | tuple[str, int]
    record: NodeInventory | GpuState | JobRecord | InterferenceSampleRecord | UndoRecord | None
    revision: int


@dataclass(frozen=True)
class ChangeBatch:
    """Changes delivered together, oldest first; ``revision``: the store revision they bring a
    follower up to (also when none of them concern the followed kinds)."""

    revision: int
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class StateListing:
    """The followed records, all as of one store ``revision`` (what :meth:`StateStore.changes`
    continues from, with ``start_revision=revision + 1``)."""

    revision: int
    inventories: dict[str, NodeInventory] = field(default_factory=dict)
    gpu_states: dict[tuple[str, int], GpuState] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    samples: list[InterferenceSampleRecord] = field(default_factory=list)
    undos: dict[str, UndoRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRecords:
    """What a caller believes one node's records are (e.g. from its followed copy), handed to
    :meth:`StateStore.reserve` so that it need not read them first.

    Attributes:
        inventory: the node's inventory (``None``: not published).
        gpu_states: GPU index -> its state (``None`` or absent: no record).
    """

    inventory: NodeInventory | None
    gpu_states: Mapping[int, GpuState | None] = field(default_factory=dict)


class StateStore(Protocol):
    """Shared state of the live system (see the module docstring for guarantees).

    Attributes:
        max_reservation_gpus: the most GPUs one reservation may hold (from the backend's limit on
            operations per transaction; see :func:`iadeep.state.reservation_gpu_limit`).
    """

    max_reservation_gpus: int

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when the backend answers within ``timeout_s`` (used by ``/readyz``)."""

    def deadline(self, seconds: float) -> AbstractContextManager[None]:
        """A block within which every call of this thread ends within ``seconds`` (else raises
        :class:`StoreUnavailable`); a write sent before the deadline may still land after it."""

    # inventory (device plugin)
    def put_inventory(self, inventory: NodeInventory, *, lease_ttl_s: int | None = None) -> None:
        """Publish a node's GPUs; with ``lease_ttl_s`` the record disappears unless kept alive."""

    def keepalive(self, node: str) -> bool:
        """Renew the lease of ``node``'s inventory; False when the record is gone (publish again)."""

    def inventories(self) -> dict[str, NodeInventory]:
        """All published nodes, by name."""

    # placement (extender -> device plugins)
    def put_placement(self, placement: PlacementPolicy) -> None:
        """Publish the extender's policy and co-location limit (replaces the previous record)."""

    def placement(self) -> PlacementPolicy | None:
        """The placement the extender published, ``None`` before any extender did."""

    # jobs and allocation (extender)
    def put_job(self, job: JobRecord) -> None:
        """Create or replace a job record."""

    def delete_job(self, pod_uid: str) -> bool:
        """Forget a job record, its measurements, batch size and workload status (not its
        reservation; :meth:`release` also deletes the job's records); True when a job record was there."""

    def jobs(self) -> dict[str, JobRecord]:
        """All job records by pod UID."""

    def gpu_states(self) -> dict[tuple[str, int], GpuState]:
        """Memory used and pods per ``(node, gpu)``; GPUs without assignments may be absent."""

    def reserve(self, job: JobRecord, node: str, gpus: Sequence[int], *, colocation_limit: int, now_s: float,
                known: NodeRecords | None = None, supersede: bool = False) -> list[Assignment]:
        """Atomically reserve ``job.mem_gib`` on each of ``gpus`` of ``node`` and store the job.

        Also sets a :class:`TuningRequest` for each GPU whose co-location set changed. ``known``
        is a hint: when it matches the store, the reservation is decided from it without reading
        first (one etcd round trip); when it does not, the store reads and decides again. It never
        makes a reservation the current records would refuse.

        With ``supersede`` (the caller knows the pod is not bound: an earlier bind attempt was
        interrupted), a reservation the pod already holds is not a conflict: on the same node it
        is returned as it is (reused); on another node it is released in the same transaction
        that makes the new one (two transactions, release first, when together they would exceed
        the backend's operation limit). A pod is never blocked by its own earlier attempt.

        Raises:
            AllocationConflict: memory or co-location limit exceeded, unknown node/GPU, more GPUs
                than :attr:`max_reservation_gpus`, or the pod already has a reservation (without
                ``supersede``; the exception's ``held`` lists it).
        """

    def reserve_gang(self, members: Sequence[GangMember], *, colocation_limit: int,
                     now_s: float) -> list[list[Assignment]]:
        """Atomically reserve every member of a gang (:class:`~iadeep.state.GangMember`: its job,
        node and GPUs) and store their jobs: one transaction, all members or none, decided by
        :func:`~iadeep.state._rules.plan_gang`. Each member gets its own reservation record
        (released by :meth:`release` of its pod UID, as any pod's). Returns each member's
        assignments, in member order.

        Raises:
            AllocationConflict: any member's reservation would not fit (as :meth:`reserve`; the
                message names the member), a member already holds a reservation, or the gang's
                transaction would exceed the backend's operation limit (``3 n + 2`` per member of
                ``n`` GPUs; 4 members of 4 GPUs are 56 of etcd's default 128).
        """

    def release(self, pod_uid: str, *, now_s: float) -> list[Assignment]:
        """Atomically drop a pod's reservations with its job record and measurements (the end of
        a pod's records; no-op when it holds none); returns what was released. A GPU left empty
        has its state and tuning request deleted."""

    def resize(self, node: str, gpu: int, sizes: Mapping[str, float]) -> GpuState:
        """Atomically set the memory the named pods reserve on one GPU (GiB per pod UID): a tuning
        session's configuration, whose batch sizes may grow into memory no other pod reserved.
        Updates the pods' assignments, their reservation records and the GPU's state in one
        transaction, and no tuning request (the co-location set did not change). Returns the
        GPU's new state.

        Raises:
            AllocationConflict: unknown node or GPU, a pod without a reservation there, a size
                below the pod's request (its job record's ``mem_gib``), or more than the GPU's
                memory in all.
            RecordError: a size that is not a positive number.
        """

    def assignments(self, node: str | None = None) -> list[Assignment]:
        """Reservations, optionally of one node."""

    # measurements, tuning, learning (coordinator, tuner)
    def add_measurement(self, m: Measurement) -> None:
        """Append a throughput report."""

    def measurements(self, pod_uid: str) -> list[Measurement]:
        """A pod's reports, oldest first (malformed ones are logged and left out)."""

    def tuning_requests(self) -> list[TuningRequest]:
        """Pending tuning requests (malformed ones are logged and left out)."""

    def complete_tuning(self, request: TuningRequest) -> bool:
        """Clear ``request`` if it is unchanged (the coordinator's acknowledgement); False when it
        changed meanwhile (tune again) or is gone."""

    def add_samples(self, samples: Sequence[InterferenceSampleRecord]) -> None:
        """Append learned interference samples (they survive restarts)."""

    def samples(self) -> list[InterferenceSampleRecord]:
        """All learned samples, oldest first (malformed ones are logged and left out)."""

    # undone co-locations (coordinator -> extender)
    def put_undo(self, record: UndoRecord) -> None:
        """Record an undone co-location (:class:`UndoRecord`, key ``undos/<pod_uid>``; replaces a
        record of the same pod: a session re-run after a coordinator restart writes the same one).

        Raises:
            RecordError: the record breaks its rules (:func:`iadeep.state.from_json`'s checks).
        """

    def undos(self) -> dict[str, UndoRecord]:
        """Every undo record by the evicted pod's UID (malformed ones are logged and left out)."""

    def settle_undo(self, record: UndoRecord, outcome: str, *, at: float) -> bool:
        """Mark an undo carried out (``outcome``: ``evicted``, ``gone`` or ``kept``, at ``at`` Unix s) if the
        stored record is still ``record`` (compare and swap on its value); False when it changed or
        is gone (nothing written).

        Raises:
            RecordError: ``outcome`` is not one of :data:`iadeep.state.UNDO_OUTCOMES`.
        """

    # the extender's arrival log (extender -> a restarted extender)
    def put_arrivals(self, records: Sequence[ArrivalRecord]) -> None:
        """Record when the policy first met these jobs (:class:`ArrivalRecord`, key
        ``arrivals/<job>``). The earliest meeting counts: a stored record of the same job stays
        when it is no later and still of use (``keep_until``) at the new one's time, and is
        replaced otherwise (or when malformed). One transaction per record, compared on the
        stored one, so that writers racing on a key (extender workers, a restart) keep the
        earliest.

        Raises:
            RecordError: a job id is not a key segment.
        """

    def arrivals(self) -> list[ArrivalRecord]:
        """Every arrival record, oldest first (malformed ones are logged and left out)."""

    def prune_arrivals(self, now: float) -> int:
        """Delete the arrival records whose ``keep_until`` is before ``now`` (Unix s) and the
        malformed ones, each unless rewritten since it was read; returns how many were deleted."""

    # jobs' own records (workload SDK, coordinator)
    def set_batch_size(self, assignment: BatchSizeAssignment) -> None:
        """Set the batch size a job is to train at (the job's SDK follows it by watch)."""

    def batch_size(self, pod_uid: str) -> BatchSizeAssignment | None:
        """The batch size last set for a job, ``None`` when none was."""

    def put_workload(self, status: WorkloadStatus) -> None:
        """Create or replace what a job says about itself (registration, completion)."""

    def workload(self, pod_uid: str) -> WorkloadStatus | None:
        """A job's own status, ``None`` when it never registered."""

    # a job's progress across its pods (by job, not pod)
    def put_checkpoint(self, checkpoint: JobCheckpoint) -> None:
        """Write a job's progress (:class:`JobCheckpoint`)."""

    def checkpoint(self, job_key: str) -> JobCheckpoint | None:
        """A job's progress, ``None`` when it has none."""

    def delete_checkpoint(self, job_key: str) -> bool:
        """Forget a job's progress (its work is done); True when there was one."""

    # following the state (the extender's cache: list once, then apply changes)
    def revision(self) -> int:
        """The store's current revision (increases with every change)."""

    def list_state(self) -> StateListing:
        """Inventories, GPU states, jobs, learned samples and undo records at one revision (malformed records,
        as :meth:`changes` describes them, are logged and left out)."""

    def changes(self, start_revision: int, *, idle_s: float) -> Iterator[ChangeBatch]:
        """Changes of inventories, GPU states, jobs, samples and undo records from ``start_revision`` on, in
        revision order, until ``idle_s`` passes without any change in the store. A malformed
        record (bad JSON, a mistyped or non-finite field, a record naming another node, GPU or
        pod than its key) is logged and reported as deleted, as :meth:`list_state` leaves it out.

        Raises:
            HistoryCompacted: ``start_revision`` is older than the history the store keeps.
            StoreUnavailable: the store cannot be reached (at the call or while following).
        """

    def watch(self, what: str | Sequence[str], *, timeout_s: float) -> Iterator[Mapping[str, str]]:
        """Yield change events (``{"type": "put"|"delete", "key": ...}``) under ``<prefix>/<what>``
        (or under any of several such prefixes, on one stream) until ``timeout_s`` passes without one."""
