"""Tie a process's life to its parent's (Linux ``prctl(PR_SET_PDEATHSIG)``, see prctl(2))."""

from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits, however it exits.

    Args:
        sig: the signal (SIGTERM lets the process shut down in order).
        parent_pid: the expected parent; if it is already gone (this process was re-parented),
            ``sig`` is sent to this process at once.

    Returns:
        True when the kernel accepted it (False elsewhere than Linux).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return ok
