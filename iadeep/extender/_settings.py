"""Settings of the scheduler extender service.

One root class, :class:`ExtenderSettings`, read from environment variables prefixed
``IADEEP_EXTENDER_`` (nested groups joined by ``__``) or built in code and passed explicitly::

    IADEEP_EXTENDER_HOST=0.0.0.0
    IADEEP_EXTENDER_PORT=8888
    IADEEP_EXTENDER_WORKERS=1
    IADEEP_EXTENDER_URL_PREFIX=/iadeep
    IADEEP_EXTENDER_POLICY=iadeep
    IADEEP_EXTENDER_COLOCATION_LIMIT=2
    IADEEP_EXTENDER_UNDO_BELOW=1.0                  # 0: never undo a co-location
    IADEEP_EXTENDER_GPU_MEM_RESOURCE=iadeep.io/gpu-mem
    IADEEP_EXTENDER_KUBE__IN_CLUSTER=true
    IADEEP_EXTENDER_CACHE__MAX_AGE_S=5

etcd is configured through the state store's own settings (:class:`iadeep.state.StateSettings`,
variables ``IADEEP_ETCD_*``), nested here as ``etcd`` (``IADEEP_EXTENDER_ETCD__PREFIX`` also works).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep._serving import LogLevel
from iadeep.policy import MAX_COLOCATION_LIMIT, policy_names
from iadeep.state import StateSettings

__all__ = ["ExtenderSettings", "KubeSettings", "CacheSettings", "JobDefaults"]


class KubeSettings(BaseModel):
    """How the extender reaches the Kubernetes API (for annotations, Bindings and the pod sweep).

    Attributes:
        in_cluster: use the pod's service-account token (the Deployment in ``k8s/extender``).
        kubeconfig: kubeconfig file when not in cluster; ``None``: ``$KUBECONFIG`` or ``~/.kube/config``.
        context: kubeconfig context; ``None``: its current context.
        request_timeout_s: per API call (cut to what is left of the extender's ``call_budget_s``
            inside a bind).
        max_connections: kept-alive connections to the API server. At least as many as binds run
            at once (the server's worker threads, 40): a smaller pool closes the surplus after
            each call and the next call pays a new TLS handshake (the client's default is 5 per CPU).
    """

    in_cluster: bool = False
    kubeconfig: Path | None = None
    context: str | None = None
    request_timeout_s: float = Field(10.0, gt=0)
    max_connections: int = Field(40, ge=1)


class CacheSettings(BaseModel):
    """The extender's copy of the shared state (filter and prioritize read it; bind re-checks in etcd).

    The copy is listed once and then follows etcd's watch (see :mod:`iadeep.extender._cache`).

    Attributes:
        watch_idle_s: a watch that delivered nothing for this long ends and is followed by one cheap
            linearizable read (the store's revision), which confirms the copy; a watch that merely
            timed out proves nothing (a paused etcd keeps the connection open and says nothing).
        max_age_s: a copy etcd has not confirmed (by a delivered change or that read) for this long
            is not used: filter answers ``Error`` (kube-scheduler fails the cycle cleanly and
            retries) and ``/readyz`` fails. 5 s = several confirmations.
        pod_watch: follow the cluster's pods (list, then watch) and release a pod's reservation as
            soon as the pod succeeds, fails or is deleted (``iadeep.extender._podwatch``).
        pod_watch_timeout_s: how long one pod watch request stays open before it is reopened (s).
        release_wait_s: the longest ``filter`` waits for releases of ended pods in flight (s).
        bind_wait_s: the longest ``filter`` waits for the binds of the pods an earlier ``filter``
            passed (s; 0: never waits). kube-scheduler binds in the background and starts the next
            pod's cycle at once, so without waiting the next pod is judged without the GPUs the
            previous one is about to take, and is sent to a node whose free GPU is gone by its bind.
        sweep_interval_s: how often the safety-net sweep releases reservations of pods that are
            gone, finished or stranded (0: never); the pod watch releases ended pods at once.
        sweep_grace_s: a reservation whose pod is still unbound is released only after this long
            (a bind in flight takes at most kube-scheduler's ``httpTimeout``).
    """

    watch_idle_s: float = Field(1.0, gt=0)
    max_age_s: float = Field(5.0, gt=0)
    pod_watch: bool = True
    pod_watch_timeout_s: float = Field(60.0, gt=0)
    release_wait_s: float = Field(0.5, ge=0)
    bind_wait_s: float = Field(1.0, ge=0)
    sweep_interval_s: float = Field(30.0, ge=0)
    sweep_grace_s: float = Field(120.0, ge=0)


class JobDefaults(BaseModel):
    """Job type and run time assumed for a pod without the ``iadeep.io/model``,
    ``iadeep.io/batch-size`` or ``iadeep.io/duration-s`` annotations.

    Attributes:
        model: Gavel model family; ResNet-50 is the most common family in the Gavel workload mix.
        batch_size: per-GPU batch size (mapped to the nearest measured one).
        duration_s: expected run time alone on a GPU (s); 1 h is near the median of Philly's GPU jobs.
    """

    model: str = "ResNet-50"
    batch_size: int = Field(64, ge=1)
    duration_s: float = Field(3600.0, ge=0)


class ExtenderSettings(BaseSettings):
    """Everything the extender service needs; see the module docstring for the environment variables.

    Attributes:
        host / port: where uvicorn listens (``127.0.0.1:8888``; the Deployment sets ``0.0.0.0``).
        url_prefix: path prefix of the ``filter``, ``prioritize`` and ``bind`` verbs; must match the
            ``urlPrefix`` of the KubeSchedulerConfiguration (which adds the host and port).
        policy: registered policy name (:func:`iadeep.policy.make_policy`); another name is refused
            when the settings are built, naming the registered ones.
        colocation_limit: jobs per GPU, at most :data:`iadeep.policy.MAX_COLOCATION_LIMIT` (the most
            jobs a tuning session takes); ``None`` keeps the policy's own limit (2 for ``iadeep``).
        gpu_mem_resource: the extended resource that marks our pods, in GiB units.
        gpu_count_resource: extended resource for the number of GPUs a pod needs (default 1).
        throughputs_file: Gavel ``simulation_throughputs.json`` (required to serve: the service
            never downloads; ``iadeep datasets fetch gavel-throughputs`` or the image provides it).
        gpu_type: which GPU type's measurements to use.
        bind_attempts: placements tried per bind when the reservation meets a concurrent change.
        call_budget_s: every filter, prioritize and bind answers within this many seconds; it must
            stay below the ``httpTimeout`` of kube-scheduler's extender configuration (10 s in
            ``k8s/extender``), which otherwise cancels the call and retries while the extender is
            still working. A bind's etcd requests and Kubernetes API calls share 80% of it (the
            rest is for the verb's own work): the state store's retry deadline and per-request
            timeouts are cut to the time left (a bind that
            runs out answers ``Error``; a reservation it may have left is released by the sweep or
            superseded by the pod's next bind). 8 s leaves 2 s of the shipped 10 s for the network.
        preemption: carry out the policy's preemptions (iadeep's head-of-line rule for the pod
            that nothing pending is ahead of, its ``preempt_unblocked``): the victims' pods are
            evicted through the Eviction API (RBAC: ``pods/eviction`` create) and their GPUs held
            for the preemptor (:mod:`iadeep.extender._preempt`). Their Jobs must tolerate it
            (``podFailurePolicy`` ignoring ``DisruptionTarget``) and their progress be kept
            (:class:`iadeep.state.JobCheckpoint`). Off by default.
        preemption_hold_s: how long GPUs freed for a preemptor stay held for it (wall s).
        preemption_wait_s: how long the filter call that preempted waits for the victims to leave
            (wall s; below ``call_budget_s``): then the preemptor passes in that same call.
            kube-scheduler schedules one pod at a time, so this is time it waits; a victim that
            takes longer leaves the preemptor to the next pod event that wakes it.
        admission_wait_s: on a node whose device plugin serves ``Allocate``, how long a bind waits
            for the GPU pod bound there before it to be served (wall s; at most half the time left
            of the bind's budget): binds to such a node take turns, because the kubelet's
            ``Allocate`` does not name the pod (:mod:`iadeep.extender._admission`). A bind that
            runs out answers ``Error`` naming the pod ahead; kube-scheduler retries it.
        undo_below: the policy's undo threshold (summed progress rate of a tuning session's best
            measured configuration; 1 = taking turns; 0: never undo), for policies that undo
            (``iadeep``: its ``undo_below``, the simulator's default 1.0). Published in
            :class:`~iadeep.state.PlacementPolicy` for the node coordinators, which record an
            undo below it; the extender bans the pair and evicts the newest pod
            (:mod:`iadeep.extender._undo`; RBAC ``pods/eviction`` create).
        annotate_nodes: write each node's GPU reservations on its Node (annotation
            ``iadeep.io/gpu-reservations``, :mod:`iadeep.extender._nodestate`) after every change. The write is a
            Node event, on which kube-scheduler retries the pods the extender refused: without it,
            a pod refused while the release of an ended pod was still in flight waits for
            kube-scheduler's periodic retry (5 min). RBAC: ``nodes`` patch.
        gang_permit_wait_s: how long a gang member's bind waits for the gang's other members to
            pass their filter (wall s; at most half the bind's time left), as kube-scheduler's
            Permit phase waits for a gang: the members bind only once all are on their reserved
            nodes. A wait that ends unsatisfied releases the gang, and kube-scheduler places it
            again (:mod:`iadeep.extender._gang`). 3 s: kube-scheduler retries members that were
            refused while the gang was incomplete within its 1 s initial backoff of the Node
            events the reservation makes; it must stay below ``call_budget_s``.
        gang_timeout_s: a gang member left unbound this long after its gang's reservation has it,
            and every other unbound member of its gang, released by the sweep (wall s; checked
            every ``cache.sweep_interval_s``). 60 s: a gang binds within seconds, or a member
            cannot be bound where it is reserved (kube-scheduler's own filters refuse the node).
        log_level: uvicorn and ``iadeep`` log level.
        workers: server processes (uvicorn workers) sharing the port. Each keeps its own copy of
            the state; etcd's transactions keep them (like several replicas) from taking the same
            GPU memory. One process is bound by Python's GIL to about one CPU core, so more workers
            help on a host with cores to spare; on the 2-core development machine, shared with
            etcd and the load generator, two workers were no faster (docs/performance.md).
    """

    model_config = SettingsConfigDict(
        env_prefix="IADEEP_EXTENDER_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    host: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)
    url_prefix: str = "/iadeep"
    policy: str = "iadeep"
    colocation_limit: int | None = Field(None, ge=1, le=MAX_COLOCATION_LIMIT)
    gpu_mem_resource: str = "iadeep.io/gpu-mem"
    gpu_count_resource: str = "iadeep.io/gpu-count"
    throughputs_file: Path | None = None
    gpu_type: str = "v100"
    bind_attempts: int = Field(3, ge=1)
    call_budget_s: float = Field(8.0, gt=0)
    preemption: bool = False
    preemption_hold_s: float = Field(30.0, gt=0)
    preemption_wait_s: float = Field(2.0, ge=0)
    admission_wait_s: float = Field(3.0, ge=0)
    undo_below: float = Field(1.0, ge=0)
    annotate_nodes: bool = True
    gang_permit_wait_s: float = Field(3.0, ge=0)
    gang_timeout_s: float = Field(60.0, gt=0)
    log_level: LogLevel = "INFO"
    workers: int = Field(1, ge=1)
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    kube: KubeSettings = Field(default_factory=KubeSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    etcd: StateSettings = Field(default_factory=StateSettings)

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if v not in policy_names():
            raise ValueError(f"unknown policy {v!r} (one of: {', '.join(policy_names())})")
        return v

    @field_validator("url_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        v = v.strip()
        return "" if v in ("", "/") else "/" + v.strip("/")
