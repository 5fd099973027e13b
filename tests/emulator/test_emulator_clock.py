"""The live replay's held clock (:class:`iadeep.emulator.HeldClock`): shared by processes through
one file, standing still while any hold is outstanding, and the replay's holds per pod."""

import multiprocessing
import time

import pytest

from iadeep.emulator import HeldClock
from iadeep._host._clock import CREEP


def test_a_held_clock_stands_still_and_runs_on_without_a_jump(tmp_path):
    clock = HeldClock(tmp_path / "clock")
    assert abs(clock.now() - time.time()) < 0.05
    clock.hold()
    frozen = clock.now()
    time.sleep(0.15)
    crept = clock.now()
    assert clock.holding() and 0 < crept - frozen <= 0.2 * CREEP  # it creeps: later reads order after earlier ones
    clock.release()
    resumed = clock.now()
    assert 0 <= resumed - crept < 0.05  # continuous: it goes on from where it stood
    time.sleep(0.1)
    assert clock.now() - resumed >= 0.09
    assert 0.14 <= clock.held_s() < 0.3
    assert 0.14 <= time.time() - clock.now() < 0.3


def test_holds_are_counted_so_the_last_release_restarts_it(tmp_path):
    a, b = HeldClock(tmp_path / "clock"), HeldClock(tmp_path / "clock")
    a.hold()
    b.hold()
    frozen = b.now()
    a.release()
    time.sleep(0.1)
    assert a.now() - frozen < 0.2 * CREEP  # b's hold is still outstanding
    b.release()
    assert not a.holding()
    with pytest.raises(RuntimeError, match="release without a hold"):
        a.release()


def _hold_for(path: str, seconds: float, ready) -> None:
    clock = HeldClock(path)
    clock.hold()
    ready.set()
    time.sleep(seconds)
    clock.release()


def test_another_process_holds_the_same_clock(tmp_path):
    path = tmp_path / "clock"
    clock = HeldClock(path)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_for, args=(str(path), 0.3, ready))
    proc.start()
    assert ready.wait(30)
    frozen = clock.now()
    time.sleep(0.1)
    assert clock.now() - frozen < 0.2 * CREEP
    proc.join(30)
    assert proc.exitcode == 0 and not clock.holding()
    assert clock.held_s() >= 0.25


def test_a_file_that_is_not_a_clock_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a clock\n")
    with pytest.raises(ValueError, match="not a clock file"):
        HeldClock(path)
    assert path.read_text() == "not a clock\n"
