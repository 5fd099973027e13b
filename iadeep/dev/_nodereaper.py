"""The local node's reaper: ``python -m iadeep.dev._nodereaper FD DIRECTORY CGROUP``.

Started by :class:`iadeep.dev.Node` in a session of its own, holding the read end of a pipe
whose write end only the starting process has. When that process exits - orderly, by an
exception or by SIGKILL - the kernel closes the write end, the read returns end-of-file and the
reaper runs :func:`iadeep.dev._nodeclean.teardown`: the runc shims and the containers, which
``PR_SET_PDEATHSIG`` cannot reach (the shims daemonize), are killed and their mounts and
cgroups removed. A byte on the pipe instead means "stopped in order, exit without cleaning".
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from iadeep.dev._nodeclean import teardown


def main(argv: list[str]) -> int:
    fd, directory, cgroup = int(argv[0]), Path(argv[1]), argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal is the parent's business
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        data = os.read(fd, 1)
    except OSError:
        data = b""
    if data:
        return 0
    result = teardown(directory, cgroup)
    print(f"iadeep node reaper: parent gone; {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
