"""The lowest layer: child processes, loopback ports, the local binaries (etcd, the control plane)
and the lines of a Kubernetes watch stream (shared by the extender and the GPU emulator); a live
run's clock shared by its processes through a file (:class:`HeldClock`); one etcd member as a child
process (:class:`LocalEtcd`, public as :class:`iadeep.dev.LocalEtcd`).

Both :mod:`iadeep.state` (its local etcd) and :mod:`iadeep.dev` (the local control plane) build on
it; it imports nothing else of iadeep but :mod:`iadeep._parent`.
"""

from iadeep._host._binaries import GO_BINARIES, build_output, build_script, cache_root, controlplane_dir, etcd_binary
from iadeep._host._clock import HeldClock
from iadeep._host._etcd import LocalEtcd, LocalEtcdError, ServerTls, etcd_health
from iadeep._host._net import etcd_argv, free_port
from iadeep._host._procs import Proc, log_tail, pid_alive, signal_group, spawn, stop_detached
from iadeep._host._watch import watch_lines

__all__ = ["GO_BINARIES", "HeldClock", "LocalEtcd", "build_output", "LocalEtcdError", "Proc", "ServerTls", "build_script", "cache_root", "controlplane_dir",
           "etcd_argv", "etcd_binary", "etcd_health", "free_port", "log_tail",
           "pid_alive", "signal_group", "spawn", "stop_detached", "watch_lines"]
