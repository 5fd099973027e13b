"""Experiment configuration, shared by the CLI (``iadeep experiment run``) and the Airflow DAG."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_POLICIES", "TRACE_DATASETS", "ExperimentConfig"]

#: trace format -> (dataset registry entry, path inside the dataset folder); ``philly-json`` has no
#: public mirror in the registry (the original 1 GB tarball): pass ``trace_file``.
TRACE_DATASETS: dict[str, tuple[str, str] | None] = {
    "philly": ("philly", "philly.csv"),
    "ms-itp": ("ms-itp", "raw-traces"),
    "openb": ("openb", "openb_pod_list_default.csv"),
    "philly-json": None,
}

DEFAULT_POLICIES = ("iadeep", "exclusive", "antman", "gandiva")


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything one experiment needs; defaults are the project's main job.

    The main job: 400 consecutive Philly jobs (1 to 8 GPUs) from job 40,000 on, arrivals rescaled to
    a mean offered load of 1.0 on the paper's 5 x 4 x 24 GiB cluster (the bursty trace then peaks
    well above 1, where sharing matters), IADeep's five-model mix, all four policies.

    Attributes:
        trace: trace format name (a key of :data:`TRACE_DATASETS`).
        trace_file: explicit trace file or folder (else fetched through the dataset registry).
        jobs: number of jobs (after filters).
        start_job: skip this many jobs first; ``None``: the main job's 40,000 for the registry's Philly
            trace without a submission-time window, 0 otherwise (a window picks its own jobs).
        window_start_s / window_end_s: submission-time window (s from trace start).
        virtual_cluster: Philly virtual cluster or ITP cluster to keep.
        max_gpus: drop jobs needing more GPUs (``too_many_gpus``); ``None`` (default): no cap of
            its own, the cluster's size applies (wider jobs count as ``wider_than_cluster``).
        arrival_scale: multiply inter-arrival gaps.
        iadeep_arrival_rule: IADeep artifact's rule (gap / 1000 x arrival_scale).
        target_load: rescale gaps to this mean offered load (None: keep the trace's timing).
        mix: workload mix name ("iadeep" or "gavel").
        skip_bad_rows: skip (and count) malformed trace rows instead of stopping at the first.
        strict: stop at the first known quirk of the trace too (censored job, attempt ending
            before it starts, ...; :data:`iadeep.traces.REASONS`) instead of handling it by rule.
        include_censored: count censored jobs (still running when the trace was taken) in the JCT
            statistics; default: excluded (counted apart as ``censored_jobs``).
        drop_zero_duration: drop the trace's jobs of 0 s (not censored) before the run, counted as
            ``zero_duration`` in ``trace.dropped``; default: kept (they complete at once and count in
            the completed jobs and the JCT statistics; ``trace.flagged.zero_duration`` says how many).
        infeasible: jobs that can never run on the cluster (``wider_than_cluster``,
            ``exceeds_gpu_memory``): ``"drop"`` (default, before the run, counted) or ``"keep"``
            (in the workload, reported as unschedulable by every policy).
        cluster_file: YAML cluster file (:func:`iadeep.sim.load_cluster`: node groups); replaces
            ``nodes`` / ``gpus_per_node`` / ``gpu_mem_gib``.
        policies: policy names to compare.
        nodes / gpus_per_node / gpu_mem_gib: the cluster.
        gpu_type: GPU type of the throughput measurements: "v100", "p100", "k80" in Gavel's
            published file; with ``throughputs_file``, any table key of that file (the profiler
            writes e.g. "cpu" or "nvidia-h200").
        throughputs_file: measurements in Gavel's schema (e.g. written by ``iadeep profile``)
            instead of the published ones fetched through the dataset registry.
        seed: seeds the mix and measurement noise.
        noise_seed: seeds the simulator's measurement noise instead of ``seed`` (the jobs stay those
            of ``seed``): a sweep's repeats of one setting (``iadeep experiment sweep --repeats``).
        backfill: allow queued jobs behind a waiting head to start (the same as ``queue="backfill"``).
        queue: the simulator's scheduling queue: ``fifo``, ``backfill`` or ``kube``
            (kube-scheduler's queue: priority then creation time, backoff, retries on events).
        kube_preemption: under the ``kube`` queue, let iadeep's head-of-line preemption fire for the
            pod nothing pending is ahead of (the policy's ``preempt_unblocked``: kube-scheduler's
            queue reports no job blocked behind it); the kubernetes backend then runs the
            extender with preemption (``IADEEP_EXTENDER_PREEMPTION``: the victim's pod is evicted
            and its Job replaces it with the progress kept). On by default; ignored by the other
            queues. Measured on the sweep's 12 kube settings: the worst ratio to the better packing
            baseline went from 1.39 to 1.04 (20000-2-1).
        scheduler_config: KubeSchedulerConfiguration whose ``podInitialBackoffSeconds`` /
            ``podMaxBackoffSeconds`` the ``kube`` queue uses (``None``: kube-scheduler's defaults).
        trial_s / measurement_noise: tuning trial length (s) and relative noise.
        predictor: iadeep's interference predictor ("learned" or "oracle").
        tuning: the simulator runs the policies' tuning sessions (off for the parity check while
            the live system has no node coordinator and tuner).
        kube_time_scale: multiplies the ``kube`` queue's backoff and unschedulable flush times: a
            live run at speedup ``s`` backs off in wall seconds, i.e. ``s`` x as many emulated
            seconds (the parity check sets it to the speedup).
        whole_gib: the simulator rounds each job's GPU memory up to whole GiB, as the kubernetes
            backend must request it (extended resources are integers); on for the parity check.
        gang_placement: how the simulator places a multi-GPU job (:attr:`iadeep.sim.SimSettings.gang_placement`):
            ``"pods"`` (default: equal pods, each on one node, as the kubernetes backend runs it)
            or ``"any-gpus"`` (any GPUs of the cluster, for comparing with other simulators).
        backend: ``simulator`` (the trace-driven simulator) or ``kubernetes`` (Jobs on a cluster:
            the local control plane with kwok nodes, our extender and the GPU emulator).
        speedup: the kubernetes backend's time compression (emulated seconds per wall second).
        held_clock: the local cluster's live run measures time on a clock that stands still while
            kube-scheduler decides a pod the replay opened and while the GPU emulator completes a
            pod (:class:`iadeep.emulator.HeldClock`), so that control-plane latency is not
            multiplied by ``speedup`` into emulated time; off: wall time.
        timeout_s: the kubernetes backend's wall-clock bound per policy (``None``: from the trace).
        kubeconfig: the kubernetes backend on a user's cluster (the extender deployed with the one
            policy in ``policies``, GPU nodes whose GPUs run or are emulated: ``iadeep emulator serve``
            completes the Jobs and writes their times) instead of the local control plane. The
            state store (reservations left) from ``IADEEP_ETCD_*`` when ``IADEEP_ETCD_ENDPOINTS`` is set.
        out: output folder.
    """

    trace: str = "philly"
    trace_file: str | None = None
    jobs: int | None = field(default=400, metadata={"ge": 0})
    start_job: int | None = field(default=None, metadata={"ge": 0})
    window_start_s: float | None = field(default=None, metadata={"ge": 0})
    window_end_s: float | None = field(default=None, metadata={"ge": 0})
    virtual_cluster: str | None = None
    max_gpus: int | None = field(default=None, metadata={"ge": 1})
    arrival_scale: float = field(default=1.0, metadata={"gt": 0})
    iadeep_arrival_rule: bool = False
    target_load: float | None = field(default=1.0, metadata={"ge": 0})
    mix: str = "iadeep"
    skip_bad_rows: bool = False
    strict: bool = False
    include_censored: bool = False
    drop_zero_duration: bool = False
    infeasible: str = "drop"
    cluster_file: str | None = None
    policies: tuple[str, ...] = DEFAULT_POLICIES
    nodes: int = field(default=5, metadata={"ge": 1})
    gpus_per_node: int = field(default=4, metadata={"ge": 1})
    gpu_mem_gib: float = field(default=24.0, metadata={"gt": 0})
    gpu_type: str = "v100"
    throughputs_file: str | None = None
    seed: int = field(default=0, metadata={"ge": 0})
    noise_seed: int | None = field(default=None, metadata={"ge": 0})
    backfill: bool = False
    queue: str = "fifo"
    kube_preemption: bool = True
    scheduler_config: str | None = None
    trial_s: float = field(default=20.0, metadata={"gt": 0})
    measurement_noise: float = field(default=0.05, metadata={"ge": 0})
    predictor: str = "learned"
    tuning: bool = True
    whole_gib: bool = False
    kube_time_scale: float = 1.0
    gang_placement: str = "pods"
    backend: str = "simulator"
    speedup: float = 1000.0
    held_clock: bool = True
    timeout_s: float | None = field(default=None, metadata={"gt": 0})
    kubeconfig: str | None = None
    out: str = "runs/latest"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        """Convert and check every field (:func:`iadeep.experiment.coerce_fields`: whole-number
        floats become ints, bounds from each field's ``metadata``), normalise ``jobs=0`` /
        ``target_load=0`` to ``None`` (all jobs / trace timing) and check names.

        Raises:
            ConfigError: (a ``ValueError``) a value of the wrong type or out of bounds, an unknown
                trace, policy, mix, GPU type or predictor (the message names the parameter and
                lists the known values), a policy named twice, ``backfill`` with the ``kube`` queue,
                an unreadable ``scheduler_config``, or a registry-less trace without ``trace_file``.
        """
        from iadeep._params import ConfigError, coerce_fields
        from iadeep.interference import GPU_TYPES
        from iadeep.policy import POLICIES
        from iadeep.traces import MIXES

        coerce_fields(self)
        if self.start_job is None:
            windowed = self.window_start_s is not None or self.window_end_s is not None
            object.__setattr__(self, "start_job", 40_000 if self.trace == "philly" and not self.trace_file and not windowed else 0)
        for name in ("jobs", "target_load"):
            if not getattr(self, name):
                object.__setattr__(self, name, None)
        if not self.out.strip():
            raise ConfigError("out", "an output folder is needed (got an empty path)")
        if self.target_load is not None and (self.arrival_scale != 1.0 or self.iadeep_arrival_rule):
            which = "arrival_scale" if self.arrival_scale != 1.0 else "iadeep_arrival_rule"
            raise ConfigError(which, f"target_load (here {self.target_load:g}; default 1) sets the arrival scaling itself: "
                              "pass target_load 0 (trace timing) to scale arrivals yourself")
        if self.trace not in TRACE_DATASETS:
            raise ConfigError("trace", f"unknown trace {self.trace!r}; known: {', '.join(TRACE_DATASETS)}")
        if TRACE_DATASETS[self.trace] is None and not self.trace_file:
            raise ConfigError("trace_file", f"trace {self.trace!r} is not in the dataset registry: give its file")
        if not self.speedup > 0:
            raise ConfigError("speedup", f"speedup must be positive, got {self.speedup}")
        if not self.policies:
            raise ConfigError("policies", "at least one policy is needed")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ConfigError("policies", f"unknown policy {', '.join(map(repr, unknown))}; known: {', '.join(POLICIES)}")
        twice = sorted({p for p in self.policies if self.policies.count(p) > 1})
        if twice:
            raise ConfigError("policies", f"{', '.join(map(repr, twice))} named more than once")
        from iadeep.sim import GANG_PLACEMENTS, QUEUES

        checks = [("mix", self.mix, tuple(MIXES)), ("predictor", self.predictor, ("learned", "oracle")),
                  ("infeasible", self.infeasible, ("drop", "keep")), ("queue", self.queue, QUEUES),
                  ("backend", self.backend, ("simulator", "kubernetes")),
                  ("gang_placement", self.gang_placement, GANG_PLACEMENTS)]
        if self.throughputs_file is None:  # a given file's keys are checked when it is read
            checks.append(("gpu_type", self.gpu_type, GPU_TYPES))
        for field_name, value, known in checks:
            if value not in known:
                raise ConfigError(field_name, f"unknown {field_name} {value!r}; known: {', '.join(known)}")
        if self.kubeconfig is not None:
            if self.backend != "kubernetes":
                raise ConfigError("kubeconfig", "a kubeconfig is for the kubernetes backend (--backend kubernetes)")
            if not Path(self.kubeconfig).is_file():
                raise ConfigError("kubeconfig", f"{self.kubeconfig} is not a file")
            if len(self.policies) != 1:
                raise ConfigError("policies", "on a user's cluster (kubeconfig) the run is of the one policy its deployed "
                                  f"extender runs: name that one policy, got {', '.join(self.policies)}")
        if self.backfill and self.queue == "kube":
            raise ConfigError("backfill", "backfill lets jobs pass a waiting FIFO head; kube-scheduler's queue (queue "
                              "'kube') never waits on a head: use one or the other")
        if self.scheduler_config is not None:  # read now, not when the first policy's run reaches it
            from iadeep.sim import KubeQueueSettings

            try:
                KubeQueueSettings.from_scheduler_config(self.scheduler_config)
            except ValueError as exc:
                raise ConfigError("scheduler_config", str(exc)) from None
        if self.window_start_s is not None and self.window_end_s is not None and self.window_end_s <= self.window_start_s:
            raise ConfigError("window_end_s", f"must be after the window's start ({self.window_start_s} s), got {self.window_end_s}")

    @property
    def out_dir(self) -> Path:
        """Output folder as a path."""
        return Path(self.out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for Airflow params and summary.json)."""
        d = asdict(self)
        d["policies"] = list(self.policies)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentConfig":
        """Inverse of :meth:`to_dict`, and the validator of untyped parameters (a DAG conf).

        Raises:
            ConfigError: unknown keys, wrong types or values (the message names the parameter);
                see :func:`iadeep.experiment.validate_params`.
        """
        from iadeep._params import validate_params

        return validate_params(cls, d)
