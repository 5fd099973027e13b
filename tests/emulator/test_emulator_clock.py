"""The live replay's held clock (:class:`iadeep.emulator.HeldClock`): shared by processes through
one file, standing still while any hold is outstanding, and the replay's holds per pod."""

import multiprocessing
import time

import pytest

from iadeep.emulator import HeldClock
from iadeep._host._clock import CREEP


def test_a_held_clock_stands_still_and_runs_on_without_a_jump(tmp_path, wall):
    clock = HeldClock(tmp_path / "clock", wall=wall)
    assert clock.now() == wall()  # not held yet: the wall's time
    clock.hold()
    frozen = clock.now()
    wall.step(0.15)
    crept = clock.now()
    assert clock.holding() and crept - frozen == pytest.approx(0.15 * CREEP, abs=wall.EPS)  # it creeps: later reads order later
    clock.release()
    resumed = clock.now()
    assert resumed == pytest.approx(crept, abs=wall.EPS)  # continuous: it goes on from where it stood
    wall.step(0.1)
    assert clock.now() - resumed == pytest.approx(0.1, abs=wall.EPS)
    assert clock.held_s() == pytest.approx(0.15, abs=wall.EPS)
    assert wall() - clock.now() == pytest.approx(0.15 * (1 - CREEP), abs=wall.EPS)


def test_holds_are_counted_so_the_last_release_restarts_it(tmp_path, wall):
    a, b = HeldClock(tmp_path / "clock", wall=wall), HeldClock(tmp_path / "clock", wall=wall)
    a.hold()
    b.hold()
    frozen = b.now()
    a.release()
    wall.step(0.1)
    assert a.now() - frozen == pytest.approx(0.1 * CREEP, abs=wall.EPS)  # b's hold is still outstanding
    b.release()
    assert not a.holding()
    wall.step(0.1)
    assert a.now() - frozen == pytest.approx(0.1 * CREEP + 0.1, abs=wall.EPS)  # running again at the wall's pace
    with pytest.raises(RuntimeError, match="release without a hold"):
        a.release()


def _hold_until(path: str, ready, go) -> None:
    clock = HeldClock(path)
    clock.hold()
    ready.set()
    go.wait()
    clock.release()


def test_another_process_holds_the_same_clock(tmp_path):
    """While another process holds the file, this one's clock advances at most ``CREEP`` of the
    wall time between two of its reads, however long the machine takes between them."""
    path = tmp_path / "clock"
    clock = HeldClock(path)
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_until, args=(str(path), ready, go))
    proc.start()
    try:
        assert ready.wait(60)
        assert clock.holding()
        w0 = time.time()
        c0 = clock.now()
        time.sleep(0.05)
        c1 = clock.now()
        w1 = time.time()
        assert 0 < c1 - c0 <= CREEP * (w1 - w0) + 1e-6
    finally:
        go.set()
        proc.join(60)
    assert proc.exitcode == 0 and not clock.holding()
    assert clock.held_s() >= (w1 - w0) * (1 - 1e-9)  # the hold spanned both reads


def test_a_file_that_is_not_a_clock_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a clock\n")
    with pytest.raises(ValueError, match="not a clock file"):
        HeldClock(path)
    assert path.read_text() == "not a clock\n"
