"""The replay's holds of a live run's clock (``GatedSubmitter``'s ``clock``): a pod the replay opened
holds it until the pod watch shows kube-scheduler's decision, a pod that ends holds it a moment
more. The pods are the API's JSON as the watch delivers it; the clock is the real shared file."""

import time

import pytest

from iadeep.emulator import HeldClock
from iadeep.experiment._replay import _Holds


def _pod(name, *, node=None, reason=None, phase="Pending"):
    status = {"phase": phase}
    if reason is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason}]
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_an_opened_pod_holds_the_clock_until_it_is_bound_or_unschedulable(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    holds = _Holds(clock, hold_max_s=30.0, settle_s=0.0)
    try:
        holds.opened("a")
        assert clock.holding()
        holds.seen("a", _pod("a", reason="SchedulingGated"))  # the watch's event of the gate's removal
        holds.seen("a", _pod("a"))
        assert clock.holding()
        holds.opened("b")
        holds.seen("a", _pod("a", node="n1"))
        assert clock.holding()  # b is still being decided
        holds.seen("b", _pod("b", reason="Unschedulable"))
        assert not clock.holding()
        assert holds.held_s > 0
    finally:
        holds.close()


def test_a_pod_never_decided_releases_the_clock_after_the_bound(tmp_path, wall):
    clock = HeldClock(tmp_path / "clock", wall=wall)
    holds = _Holds(clock, hold_max_s=0.2, settle_s=0.0, wall=wall)  # e.g. a gang's member waiting at Permit
    try:
        holds.opened("member-0")
        wall.step(0.15)
        holds.expire()
        assert clock.holding()  # within the bound
        wall.step(0.1)
        holds.expire()
        assert not clock.holding()
        assert clock.held_s() == pytest.approx(0.25, abs=wall.EPS) and holds.held_s == pytest.approx(0.25, abs=wall.EPS)
    finally:
        holds.close()


def test_a_pod_that_ends_holds_the_clock_while_the_pending_pods_are_tried_again(tmp_path, wall):
    clock = HeldClock(tmp_path / "clock", wall=wall)
    holds = _Holds(clock, hold_max_s=30.0, settle_s=0.2, wall=wall)
    try:
        holds.seen("a", _pod("a", node="n1", phase="Running"))
        assert not clock.holding()
        holds.seen("a", _pod("a", node="n1", phase="Succeeded"))
        assert clock.holding()
        wall.step(0.1)
        holds.expire()
        assert clock.holding()  # settling
        wall.step(0.15)
        holds.expire()
        assert not clock.holding()
        holds.seen("a", _pod("a", node="n1", phase="Succeeded"))  # the same end seen again: no second hold
        assert not clock.holding()
        assert clock.held_s() == pytest.approx(0.25, abs=wall.EPS)
    finally:
        holds.close()


def test_the_holds_thread_ends_the_holds_that_are_due(tmp_path, wall):
    """Nobody calls ``expire`` here: the holds' own thread ends a hold past its bound (the wall is
    stepped past it at once, so only the thread's running is waited for; pytest's timeout bounds it)."""
    clock = HeldClock(tmp_path / "clock", wall=wall)
    holds = _Holds(clock, hold_max_s=0.2, settle_s=0.0, wall=wall)
    try:
        holds.opened("member-0")
        wall.step(1.0)
        while clock.holding():
            time.sleep(0.01)
        assert holds.held_s == pytest.approx(1.0, abs=wall.EPS)
    finally:
        holds.close()


def test_the_held_time_is_counted_before_the_clock_is_released(tmp_path, wall):
    """Whoever sees the clock released (another thread: the test above waits for that) reads the
    held time complete: at the release the hold's 0.5 s is already counted."""
    at_release: list[float] = []

    class Watched(HeldClock):
        def release(self) -> None:
            at_release.append(holds.held_s)
            super().release()

    clock = Watched(tmp_path / "clock", wall=wall)
    holds = _Holds(clock, hold_max_s=30.0, settle_s=0.0, wall=wall)
    try:
        holds.opened("a")
        wall.step(0.5)
        holds.seen("a", _pod("a", node="n1", phase="Running"))
        assert at_release == [pytest.approx(0.5, abs=wall.EPS)]
    finally:
        holds.close()


def test_closing_releases_every_hold_left(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    holds = _Holds(clock, hold_max_s=30.0, settle_s=30.0)
    holds.opened("a")
    holds.seen("b", _pod("b", phase="Failed"))
    holds.close()
    assert not clock.holding()
