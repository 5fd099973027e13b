"""Co-location profiler: isolated and pairwise throughputs of the workloads on one device.

For every (workload, batch size) it measures steps/s alone on the device, then for every
unordered pair (a pair with itself included) both jobs' steps/s while they train at the same
time, as two processes sharing the device (each with its own CUDA context, as two pods do).
Each worker builds its job, warms up, reports ready; the coordinator starts both measurement
windows together; each counts the steps it completes in ``window_s`` seconds.

The result is written in the schema of Gavel's ``simulation_throughputs.json`` (see
:mod:`iadeep.interference._gavel`), under a GPU-type key of its own (``cpu``, or the CUDA device
name such as ``nvidia-h200``), with the jobs named by the Gavel family each workload stands for
(:mod:`._spec`); ``iadeep experiment run --throughputs FILE --gpu-type KEY`` and the extender's
``--throughputs-file`` read it instead of the published measurements. A pair that runs out of
device memory is written as ``[0, 0]`` (Gavel's "does not fit"). Metadata (device, versions,
window, peak device memory per job type in GiB on CUDA) go under the top-level key
``"iadeep_profile"``, which readers of the Gavel schema ignore.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing as mp
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iadeep.jobtypes import MEASURED_BATCH_SIZES, JobType
from iadeep.training._spec import defaults_of

__all__ = ["ProfileSettings", "ProfileResult", "profile", "PROFILE_MODELS", "default_gpu_type", "METADATA_KEY"]

log = logging.getLogger("iadeep.training")

#: One workload per Gavel family of the ``iadeep`` mix (vgg16 is measured as ResNet-50 too).
PROFILE_MODELS = ("resnet50", "squeezenet", "lstm", "neumf")
METADATA_KEY = "iadeep_profile"


@dataclass(frozen=True)
class ProfileSettings:
    """What to profile and how.

    Attributes:
        models: workloads; no two may stand for the same Gavel family.
        batch_sizes: per workload; default the batch sizes Gavel measured for its family (the
            tuner and the simulator choose among them).
        window_s: seconds each measurement window lasts.
        warmup_steps: steps before a window (CUDA kernels selected, caches warm).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        threads: torch CPU threads per worker process.
        synthetic: generated inputs of the real shapes (throughput does not depend on content);
            else ``data_dir`` holds one folder per dataset.
        tiny: tiny-input mode (a few hundred samples; CPU smoke runs and tests).
        data_dir: folder with ``<dataset>/`` subfolders when not synthetic.
        gpu_type: key of the table in the output; default :func:`default_gpu_type`.
    """

    models: tuple[str, ...] = PROFILE_MODELS
    batch_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    window_s: float = 10.0
    warmup_steps: int = 5
    device: str = "auto"
    threads: int = 1
    synthetic: bool = True
    tiny: bool = False
    data_dir: Path | None = None
    gpu_type: str | None = None

    def job_types(self) -> list[tuple[str, int, JobType]]:
        """``(workload, batch size, Gavel job type)`` to profile, in order.

        Raises:
            ValueError: unknown workload, two workloads of one family, a batch size < 1.
        """
        out, families = [], {}
        for model in self.models:
            fam = defaults_of(model).gavel_family
            if fam in families:
                raise ValueError(f"{model} and {families[fam]} both stand for {fam}: profile one of them")
            families[fam] = model
            sizes = self.batch_sizes.get(model) or MEASURED_BATCH_SIZES[fam]
            for bs in sizes:
                if bs < 1:
                    raise ValueError(f"{model}: batch size must be >= 1, got {bs}")
                out.append((model, bs, JobType(fam, bs)))
        return out


@dataclass
class ProfileResult:
    """Measured steps/s: ``isolated[type]`` and ``colocated[(a, b)] = (a's, b's)`` (0, 0 when OOM)."""

    gpu_type: str
    isolated: dict[JobType, float]
    colocated: dict[tuple[JobType, JobType], tuple[float, float]]
    peak_mem_gib: dict[JobType, float]
    metadata: dict[str, Any]

    def to_gavel(self) -> dict[str, Any]:
        """The JSON document (Gavel's schema plus the metadata key)."""
        table: dict[str, dict[str, Any]] = {}
        types = sorted(self.isolated)
        for a in types:
            entry: dict[str, Any] = {"null": self.isolated[a]}
            for b in types:
                own, other = self.colocated[(a, b)] if (a, b) in self.colocated else self.colocated[(b, a)][::-1]
                entry[b.gavel_key()] = [own, other]
            table[a.gavel_key()] = entry
        meta = dict(self.metadata, peak_mem_gib={t.name: m for t, m in self.peak_mem_gib.items()})
        return {self.gpu_type: table, METADATA_KEY: meta}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_gavel(), indent=1, sort_keys=True) + "\n")
        return path


def default_gpu_type(device: str) -> str:
    """``"cpu"``, or the CUDA device's name in lower case with dashes (e.g. ``"nvidia-h200"``)."""
    import torch

    from iadeep.training._runner import resolve_device

    dev = resolve_device(device)
    if dev.type != "cuda":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(dev).lower()).strip("-")


def _worker(conn: Any, device: str, threads: int, synthetic: bool, tiny: bool, data_dir: str | None) -> None:
    """A measuring process: builds jobs on request, warms up, measures one window per ``go``."""
    import numpy as np
    import torch

    from iadeep.training._runner import _optimizer, resolve_device, scaled_lr
    from iadeep.training._task import DataSource, build_task

    torch.set_num_threads(threads)
    dev = resolve_device(device)
    tasks: dict[str, Any] = {}
    while True:
        msg = conn.recv()
        if msg is None:
            return
        model, bs, warmup, window_s = msg
        try:
            d = defaults_of(model)
            if model not in tasks:
                folder = None if synthetic else Path(data_dir or ".") / d.dataset
                torch.manual_seed(0)
                tasks[model] = build_task(model, DataSource(folder, tiny, 0), dev)
            task = tasks[model]
            opt = _optimizer(d, task.model.parameters(), scaled_lr(d, bs, 0))
            rng = np.random.default_rng(0)

            def step() -> None:
                idx = rng.integers(0, task.n_train, bs)
                opt.zero_grad(set_to_none=True)
                task.loss(task.batch(idx)).backward()
                opt.step()

            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            for _ in range(warmup):
                step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            conn.send(("ready",))
            if conn.recv() != "go":  # the partner did not fit: no window
                continue
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < window_s:
                step()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                steps += 1
            elapsed = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0
            del opt
            conn.send(("done", steps / elapsed, peak))
        except torch.cuda.OutOfMemoryError:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            conn.send(("oom",))


class _Pool:
    """Two worker processes, forked from a fork server that imported torch once and never
    initialised CUDA (a process that has cannot be forked)."""

    def __init__(self, s: ProfileSettings) -> None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "iadeep.training._runner", "iadeep.training._task"])
        self.conns, self.procs = [], []
        for _ in range(2):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, s.device, s.threads, s.synthetic, s.tiny,
                                                     str(s.data_dir) if s.data_dir else None), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def measure(self, jobs: list[tuple[str, int]], warmup: int, window_s: float) -> list[tuple[float, float]] | None:
        """Steps/s and peak GiB of each job while they run together; ``None`` when one ran out of memory."""
        used = self.conns[: len(jobs)]
        for conn, (model, bs) in zip(used, jobs):
            conn.send((model, bs, warmup, window_s))
        replies = [conn.recv() for conn in used]
        if any(r[0] == "oom" for r in replies):
            for conn, r in zip(used, replies):
                if r[0] == "ready":
                    conn.send("skip")
            return None
        for conn in used:
            conn.send("go")
        done = [conn.recv() for conn in used]
        if any(r[0] == "oom" for r in done):
            return None
        return [(r[1], r[2]) for r in done]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def profile(settings: ProfileSettings, progress: Callable[[str, int, int], None] | None = None) -> ProfileResult:
    """Measure isolated and pairwise throughputs of ``settings``' job types.

    Args:
        settings: what to profile.
        progress: called with (description, done, total) after each measurement.

    Raises:
        ValueError: bad settings (see :meth:`ProfileSettings.job_types`); CUDA asked for but absent.
        iadeep.training.WorkloadDataError: a dataset folder is missing or corrupt (not synthetic).
    """
    import torch

    jobs = settings.job_types()
    gpu_type = settings.gpu_type or default_gpu_type(settings.device)
    pairs = list(itertools.combinations_with_replacement(range(len(jobs)), 2))
    total, done = len(jobs) + len(pairs), 0
    isolated: dict[JobType, float] = {}
    peak: dict[JobType, float] = {}
    colocated: dict[tuple[JobType, JobType], tuple[float, float]] = {}
    pool = _Pool(settings)
    started = time.time()
    try:
        for model, bs, jt in jobs:
            res = pool.measure([(model, bs)], settings.warmup_steps, settings.window_s)
            done += 1
            if res is None:
                log.warning("%s does not fit on %s alone: left out", jt.name, gpu_type)
            else:
                isolated[jt], peak[jt] = res[0]
            if progress:
                progress(f"{model} bs {bs} alone", done, total)
        for i, j in pairs:
            (ma, ba, a), (mb, bb, b) = jobs[i], jobs[j]
            res = None
            if a in isolated and b in isolated:
                res = pool.measure([(ma, ba), (mb, bb)], settings.warmup_steps, settings.window_s)
            done += 1
            if a in isolated and b in isolated:
                colocated[(a, b)] = (0.0, 0.0) if res is None else (res[0][0], res[1][0])
            if progress:
                progress(f"{ma} bs {ba} + {mb} bs {bb}", done, total)
    finally:
        pool.close()
    meta = {"device": settings.device, "gpu_type": gpu_type, "torch": torch.__version__, "window_s": settings.window_s,
            "warmup_steps": settings.warmup_steps, "threads_per_worker": settings.threads, "synthetic": settings.synthetic,
            "tiny": settings.tiny, "workloads": {jt.name: m for m, _, jt in jobs},
            "started_at": started, "seconds": time.time() - started}
    if not isolated:
        raise ValueError(f"no job type fits on {gpu_type}: nothing to write")
    return ProfileResult(gpu_type, isolated, colocated, peak, meta)
