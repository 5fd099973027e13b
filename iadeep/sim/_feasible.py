"""Which jobs can ever run on a cluster: the check the simulator and the experiment share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.sim._config import ClusterSpec

__all__ = ["feasibility", "gpu_model_mask"]


def gpu_model_mask(spec: str, gpu_models: np.ndarray) -> np.ndarray:
    """GPUs whose model is one of ``spec``'s (``|``-separated, openb's ``gpu_spec``); all for ``""``.

    Args:
        spec: e.g. ``"V100M16|V100M32"``; ``""`` = any model.
        gpu_models: model name of each GPU, shape ``(G,)``.

    Returns:
        bool array, shape ``(G,)``.
    """
    if not spec:
        return np.ones(len(gpu_models), dtype=bool)
    return np.isin(gpu_models, [s.strip() for s in spec.split("|") if s.strip()])


def feasibility(jobs: pd.DataFrame, model: InterferenceModel, cluster: ClusterSpec) -> np.ndarray:
    """Why each job can never run on ``cluster`` (``""`` when it can).

    A job is ``"wider_than_cluster"`` when it needs more GPUs than the cluster has GPUs of a
    model it accepts (``gpu_spec``; any model when empty), and ``"exceeds_gpu_memory"`` when its
    memory estimate (:attr:`InterferenceModel.mem_gib` of its submitted type) is above every
    such GPU's memory. Shares (``gpu_milli`` <= 1000) always fit an empty GPU.

    Args:
        jobs: job table with ``num_gpus``, ``model``, ``batch_size`` and optionally ``gpu_spec``.

    Returns:
        object array of reason strings, shape ``(n_jobs,)``.
    """
    _, _, mem, models = cluster.gpu_arrays()
    n = len(jobs)
    out = np.full(n, "", dtype=object)
    specs = jobs["gpu_spec"].fillna("").astype(str).to_numpy() if "gpu_spec" in jobs.columns else np.full(n, "")
    need = jobs["num_gpus"].to_numpy(dtype=np.int64)
    type_mem: dict[tuple[str, int], float] = {}
    for key in set(zip(jobs["model"].to_numpy(), jobs["batch_size"].to_numpy(dtype=np.int64))):
        type_mem[(key[0], int(key[1]))] = float(model.mem_gib[model.type_id(JobType(key[0], int(key[1])))])
    job_mem = np.array([type_mem[(m, int(b))] for m, b in zip(jobs["model"].to_numpy(), jobs["batch_size"].to_numpy())])
    by_spec: dict[str, tuple[int, float]] = {}
    for spec in set(specs.tolist()):
        ok = gpu_model_mask(spec, models)
        by_spec[spec] = (int(ok.sum()), float(mem[ok].max()) if ok.any() else 0.0)
    count = np.array([by_spec[s][0] for s in specs], dtype=np.int64)
    biggest = np.array([by_spec[s][1] for s in specs], dtype=np.float64)
    out[job_mem > biggest + 1e-9] = "exceeds_gpu_memory"
    out[need > count] = "wider_than_cluster"
    return out
