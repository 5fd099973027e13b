"""The one training loop every workload shares.

Per step: ask the reporter for the assigned batch size (no I/O), take the next samples of the
epoch's permutation, train, report progress. Per epoch: evaluate, count the evaluations at or past
the target, checkpoint. The run ends at the target (met ``patience`` times), at ``max_epochs``,
at ``max_steps``, or when ``stop`` is set (SIGTERM in a pod); it checkpoints in every case, and a
new run with the same checkpoint folder resumes at the exact sample where the last one stopped.

Batch-size changes take effect at the next step boundary, mid-epoch (the seed waited for the next
epoch). The learning rate follows the batch size ``B`` (``B0``: the batch size the defaults' rate
was set for, ``lr0`` that rate, ``d`` the per-epoch decay, ``e`` the epoch)::

    lr = lr0 * (B / B0) ** k * d ** e

with ``k = 1`` for SGD, the linear scaling rule of Goyal et al., "Accurate, Large Minibatch SGD:
Training ImageNet in 1 Hour" (2017), and ``k = 1/2`` for the adaptive optimisers (Adam,
Adadelta), the square-root rule of Hoffer et al., "Train longer, generalize better" (NeurIPS 2017),
derived for Adam by Malladi et al., "On the SDEs and Scaling Rules for Adaptive Gradient
Algorithms" (NeurIPS 2022).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from iadeep.interference import memory_gib
from iadeep.jobtypes import JobType
from iadeep.training._report import JobInfo, JobReporter, Outcome, Progress
from iadeep.training._spec import WorkloadDefaults, defaults_of
from iadeep.training._task import DataSource, Task, build_task, seeded

__all__ = ["RunSettings", "RunResult", "run", "scaled_lr", "resolve_device", "CHECKPOINT_NAME"]

log = logging.getLogger("iadeep.training")

CHECKPOINT_NAME = "checkpoint.pt"
_LR_EXPONENT = {"sgd": 1.0, "adam": 0.5, "adadelta": 0.5}


@dataclass(frozen=True)
class RunSettings:
    """One training run. ``None`` fields take the workload's defaults (:mod:`._spec`).

    Attributes:
        model: workload name.
        batch_size: starting batch size.
        lr: learning rate at ``batch_size`` (the default is scaled from the defaults' batch size).
        max_epochs, max_steps: stop after this many epochs / steps in all (a resumed run counts
            the steps of the runs before it).
        target, patience: stop once the metric met ``target`` this many times.
        data_dir: dataset folder; ``None`` with ``synthetic`` false: fetched through the registry.
        synthetic: generated data of the real shapes (no dataset needed; measures speed only).
        tiny: keep only a few hundred samples (smoke runs).
        checkpoint_dir: where to checkpoint and resume (``None``: no checkpoints).
        checkpoint_every_steps: also checkpoint every this many steps (0: only at epoch ends
            and at the end of the run).
        device: ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        threads: CPU threads for torch (``None``: torch's default).
        seed: seeds the model's initialisation, the epoch permutations and synthetic data.
        pod_uid, namespace, name: the job's identity for reporting.
        mem_gib: GPU memory the job was given (GiB; reported in its job record); ``None``: the
            estimate of :func:`iadeep.interference.memory_gib` (what the Job template requests).
    """

    model: str
    batch_size: int | None = None
    lr: float | None = None
    max_epochs: int | None = None
    max_steps: int | None = None
    target: float | None = None
    patience: int | None = None
    data_dir: Path | None = None
    synthetic: bool = False
    tiny: bool = False
    checkpoint_dir: Path | None = None
    checkpoint_every_steps: int = 500
    device: str = "auto"
    threads: int | None = None
    seed: int = 0
    pod_uid: str = "local"
    namespace: str = "default"
    name: str = "local"
    mem_gib: float | None = None

    def __post_init__(self) -> None:
        defaults_of(self.model)  # an unknown workload fails here
        for name in ("batch_size", "max_epochs", "max_steps", "patience"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.checkpoint_every_steps < 0:
            raise ValueError("checkpoint_every_steps must be >= 0")
        if self.synthetic and self.data_dir is not None:
            raise ValueError("give either data_dir or synthetic, not both")
        if self.mem_gib is not None and not self.mem_gib > 0:
            raise ValueError(f"mem_gib must be > 0, got {self.mem_gib}")

    @property
    def defaults(self) -> WorkloadDefaults:
        return defaults_of(self.model)


@dataclass
class RunResult:
    """What a run did.

    Attributes:
        outcome: why it ended, at which step and epoch, the last metric.
        samples: samples trained in all; train_s: seconds in training steps (this process).
        metrics: ``(epoch, metric)`` after each evaluation (all runs, resumed ones included).
        batch_sizes: ``(step, batch_size)`` where each batch size came into effect.
        resumed_from_step: the checkpoint's step, or ``None`` for a fresh start.
        device: the torch device trained on.
    """

    outcome: Outcome
    samples: int
    train_s: float
    metrics: list[tuple[int, float]] = field(default_factory=list)
    batch_sizes: list[tuple[int, int]] = field(default_factory=list)
    resumed_from_step: int | None = None
    device: str = "cpu"


def scaled_lr(defaults: WorkloadDefaults, batch_size: int, epoch: int, base_lr: float | None = None) -> float:
    """Learning rate at ``batch_size`` in ``epoch`` (see the module docstring for the rule).

    Args:
        defaults: the workload's defaults (optimiser, batch size and rate they were set for).
        batch_size: current batch size (> 0).
        epoch: 0-based epoch.
        base_lr: rate at ``defaults.batch_size`` (default ``defaults.lr``).
    """
    k = _LR_EXPONENT[defaults.optimizer]
    lr0 = defaults.lr if base_lr is None else base_lr
    return lr0 * (batch_size / defaults.batch_size) ** k * defaults.lr_decay_per_epoch ** epoch


def resolve_device(name: str) -> torch.device:
    """``"auto"`` is CUDA when torch sees a GPU, else the CPU.

    Raises:
        ValueError: CUDA asked for but not available.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but torch sees no CUDA GPU")
    return device


def _optimizer(defaults: WorkloadDefaults, params, lr: float) -> torch.optim.Optimizer:  # noqa: ANN001
    if defaults.optimizer == "adam":
        # The fused kernel (CPU and CUDA): one pass over the parameters; about 8x faster than the
        # per-tensor loop for VGG-16's 134 M parameters on the CPU.
        return torch.optim.Adam(params, lr=lr, fused=True)
    if defaults.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


@dataclass
class _State:
    step: int = 0
    epoch: int = 0
    position: int = 0  # samples of the current epoch's permutation already trained
    samples: int = 0
    hits: int = 0
    batch_size: int = 0
    metrics: list[tuple[int, float]] = field(default_factory=list)
    batch_sizes: list[tuple[int, int]] = field(default_factory=list)


def _save(path: Path, settings: RunSettings, st: _State, task: Task, opt: torch.optim.Optimizer) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"model_name": settings.model, "state": vars(st), "model": task.model.state_dict(),
                "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, path)  # a crash leaves the previous checkpoint whole


def _load(path: Path, settings: RunSettings, task: Task, opt: torch.optim.Optimizer) -> _State | None:
    if not path.is_file():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is reported the same way
        raise ValueError(f"checkpoint {path} is unreadable ({type(exc).__name__}: {exc}); move it away to start over") from exc
    if ckpt.get("model_name") != settings.model:
        raise ValueError(f"checkpoint {path} is of workload {ckpt.get('model_name')!r}, not {settings.model!r}")
    task.model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
    st = _State(**ckpt["state"])
    st.metrics = [tuple(m) for m in st.metrics]  # type: ignore[misc]
    st.batch_sizes = [tuple(b) for b in st.batch_sizes]  # type: ignore[misc]
    return st


def _data_source(settings: RunSettings) -> DataSource:
    if settings.synthetic:
        return DataSource(None, settings.tiny, settings.seed)
    folder = settings.data_dir
    if folder is None:
        from iadeep.datasets import fetch

        folder = fetch(settings.defaults.dataset)
    return DataSource(Path(folder), settings.tiny, settings.seed)


def run(settings: RunSettings, reporter: JobReporter, *, stop: threading.Event | None = None) -> RunResult:
    """Train one workload until its target, its limits, or ``stop``.

    Args:
        settings: what to train and how long.
        reporter: where progress goes and the assigned batch size comes from.
        stop: set it (e.g. from a SIGTERM handler) to checkpoint and return after the current step.

    Returns:
        The :class:`RunResult`.

    Raises:
        ValueError: bad settings, CUDA asked for but absent, an unreadable checkpoint or one of
            another workload.
        WorkloadDataError: the dataset folder is missing files or holds corrupt ones.
        iadeep.datasets.DatasetError: the dataset could not be fetched.
    """
    d = settings.defaults
    if settings.threads:
        torch.set_num_threads(settings.threads)
    device = resolve_device(settings.device)
    torch.manual_seed(settings.seed)
    task = build_task(settings.model, _data_source(settings), device)
    start_bs = settings.batch_size or d.batch_size
    # A user-given rate is the rate at the starting batch size; store it as the rate at B0.
    base_lr = d.lr if settings.lr is None else settings.lr / (start_bs / d.batch_size) ** _LR_EXPONENT[d.optimizer]
    opt = _optimizer(d, task.model.parameters(), base_lr)
    ckpt_path = settings.checkpoint_dir / CHECKPOINT_NAME if settings.checkpoint_dir else None
    st = _load(ckpt_path, settings, task, opt) if ckpt_path else None
    resumed = st.step if st is not None else None
    if st is None:
        st = _State(batch_size=start_bs, batch_sizes=[(0, start_bs)])
    else:
        log.info("resuming %s from %s at step %d (epoch %d, sample %d)", settings.model, ckpt_path, st.step, st.epoch, st.position)
    max_epochs = settings.max_epochs or d.max_epochs
    target = d.target if settings.target is None else settings.target
    patience = settings.patience or d.patience
    mem = settings.mem_gib if settings.mem_gib is not None else memory_gib(JobType(d.gavel_family, start_bs))
    job = JobInfo(settings.pod_uid, settings.namespace, settings.name, settings.model, d.gavel_family, st.batch_size, mem)
    reporter.start(job)
    train_s, samples_here, reason, last_loss = 0.0, 0, "", float("nan")
    cuda = device.type == "cuda"

    def checkpoint() -> None:
        if ckpt_path is not None:
            _save(ckpt_path, settings, st, task, opt)

    task.model.train()
    while not reason:
        if st.epoch >= max_epochs:
            reason = "max_epochs"
            break
        task.start_epoch(st.epoch)
        order = seeded(settings.seed, 1, st.epoch).permutation(task.n_train)
        while st.position < task.n_train:
            if stop is not None and stop.is_set():
                reason = "stopped"
                break
            if settings.max_steps is not None and st.step >= settings.max_steps:
                reason = "max_steps"
                break
            assigned = reporter.assigned_batch_size()
            if assigned is not None and assigned > 0 and assigned != st.batch_size:
                log.info("step %d: batch size %d -> %d", st.step, st.batch_size, assigned)
                st.batch_size = assigned
                st.batch_sizes.append((st.step, assigned))
            idx = order[st.position:st.position + st.batch_size]
            for group in opt.param_groups:
                group["lr"] = scaled_lr(d, st.batch_size, st.epoch, base_lr)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = task.loss(task.batch(idx))
            loss.backward()
            if d.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(task.model.parameters(), d.grad_clip)
            opt.step()
            if cuda:
                torch.cuda.synchronize(device)
            train_s += time.perf_counter() - t0
            last_loss = float(loss.detach())
            st.position += len(idx)
            st.step += 1
            st.samples += len(idx)
            samples_here += len(idx)
            reporter.progress(Progress(st.step, st.epoch, st.samples, st.batch_size, train_s, last_loss))
            if settings.checkpoint_every_steps and st.step % settings.checkpoint_every_steps == 0:
                checkpoint()
        if reason:
            break
        metric = task.evaluate()
        st.metrics.append((st.epoch, metric))
        met = metric >= target if d.higher_is_better else metric <= target
        st.hits += int(met)
        log.info("epoch %d: %s %.4f (target %s, met %d/%d)", st.epoch, d.metric, metric, target, st.hits, patience)
        st.epoch += 1
        st.position = 0
        if st.hits >= patience:
            reason = "target"
    checkpoint()
    outcome = Outcome(reason, st.step, st.epoch, st.metrics[-1][1] if st.metrics else None)
    reporter.finish(outcome)
    return RunResult(outcome, st.samples, train_s, list(st.metrics), list(st.batch_sizes), resumed, str(device))


def with_defaults(settings: RunSettings) -> RunSettings:
    """``settings`` with the workload's batch size filled in (for display)."""
    return replace(settings, batch_size=settings.batch_size or settings.defaults.batch_size)
