"""Checks shared by the live undo tests (iadeep's tuning session and gandiva's profile)."""

from __future__ import annotations

from iadeep.state import BannedType


def assert_newcomer_undone(out, metrics: dict, undos: dict) -> None:
    """The pair was undone live: the newcomer (ResNet-50/64) evicted once and replaced, the
    CycleGAN survivor never, no Job failed, no reservation left, and the one undo record evicted
    the pod below its threshold of 1 with the pair's types as submitted.

    Args:
        out: the live run's jobs table indexed by job id; metrics: its ``metrics-<policy>.json``;
        undos: the store's undo records by pod UID.
    """
    assert metrics["failed_jobs"] == 0 and metrics["reservations_left"] == 0  # the evicted pod failed no Job
    assert metrics["replacement_pods"] == 1
    assert out.loc["newcomer", "evictions"] == 1 and out.loc["survivor", "evictions"] == 0
    (record,) = undos.values()
    assert record.outcome == "evicted" and record.progress < 1.0 == record.undo_below
    assert record.types[1] == BannedType("ResNet-50", 64) and record.types[0].model == "CycleGAN"
