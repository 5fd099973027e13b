"""The replay's holds of a live run's clock (``GatedSubmitter``'s ``clock``): a pod the replay opened
holds it until the pod watch shows kube-scheduler's decision, a pod that ends holds it a moment
more. The pods are the API's JSON as the watch delivers it; the clock is the real shared file."""

import time

from iadeep.emulator import HeldClock
from iadeep.experiment._replay import _Holds


def _pod(name, *, node=None, reason=None, phase="Pending"):
    status = {"phase": phase}
    if reason is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason}]
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def _wait(pred, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


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


def test_a_pod_never_decided_releases_the_clock_after_the_bound(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    holds = _Holds(clock, hold_max_s=0.2, settle_s=0.0)  # e.g. a gang's member waiting at Permit
    try:
        holds.opened("member-0")
        assert clock.holding()
        _wait(lambda: not clock.holding())
        assert 0.15 <= clock.held_s() < 1.0
    finally:
        holds.close()


def test_a_pod_that_ends_holds_the_clock_while_the_pending_pods_are_tried_again(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    holds = _Holds(clock, hold_max_s=30.0, settle_s=0.2)
    try:
        holds.seen("a", _pod("a", node="n1", phase="Running"))
        assert not clock.holding()
        holds.seen("a", _pod("a", node="n1", phase="Succeeded"))
        assert clock.holding()
        _wait(lambda: not clock.holding())
        holds.seen("a", _pod("a", node="n1", phase="Succeeded"))  # the same end seen again: no second hold
        assert not clock.holding()
    finally:
        holds.close()


def test_closing_releases_every_hold_left(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    holds = _Holds(clock, hold_max_s=30.0, settle_s=30.0)
    holds.opened("a")
    holds.seen("b", _pod("b", phase="Failed"))
    holds.close()
    assert not clock.holding()
