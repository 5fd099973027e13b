"""Polling helper for tests against real peers (kube-apiserver, etcd, servers started by a test)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(fetch: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 30.0, what: str = "") -> T:
    """Call ``fetch`` until ``done(result)``; return the last result.

    Polls with a back-off from 0.05 s to 0.5 s.

    Raises:
        AssertionError: ``timeout`` (seconds) passed; the message names ``what`` and the last result.
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or 'condition'}; last: {value!r}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
