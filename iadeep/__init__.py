"""iadeep: interference-aware multiplexing of deep-learning training jobs on shared GPUs.

Re-implements IADeep (Chen et al., SC'23, "Interference-Aware Multiplexing for Deep Learning in
GPU Clusters: A Middleware Approach"). The policy core (:mod:`iadeep.policy`,
:mod:`iadeep.interference`, :mod:`iadeep.goodput`) does no I/O; drivers around it — the
trace-driven simulator (:mod:`iadeep.sim`) and the live services — inject clocks, state and
measurement executors.
"""

__version__ = "0.1.0"
