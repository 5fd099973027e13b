"""What the runner trains: a model, indexable training samples and an evaluation (torch).

Every workload module (``_vgg16``, ``_resnet50``, ``_squeezenet``, ``_lstm``, ``_neumf``) has a
``build(source, device) -> Task``. Training samples are addressed by index so that the runner can
change the batch size at any step boundary and resume exactly from a checkpoint: an epoch is a
permutation of ``range(task.n_train)`` and a step takes the next ``batch_size`` indices of it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iadeep.training._spec import defaults_of

__all__ = ["DataSource", "Task", "build_task", "TINY_TRAIN", "TINY_EVAL"]

#: Training and evaluation samples kept in tiny-input mode (smoke runs, CI, the CPU profiler).
TINY_TRAIN = 512
TINY_EVAL = 128


@dataclass(frozen=True)
class DataSource:
    """Where a task's data comes from.

    Attributes:
        folder: the dataset folder (see :mod:`iadeep.training._data`); ``None``: synthetic data
            of the real shapes and value ranges (for smoke runs and profiling, which measure
            speed, not learning).
        tiny: keep only :data:`TINY_TRAIN` training and :data:`TINY_EVAL` evaluation samples.
        seed: seed of the synthetic data and of the per-epoch sampling.
    """

    folder: Path | None = None
    tiny: bool = False
    seed: int = 0

    @property
    def synthetic(self) -> bool:
        return self.folder is None


class Task(ABC):
    """A model with its data.

    Attributes:
        model: the ``torch.nn.Module`` being trained (already on the device).
        n_train: training samples per epoch (> 0).
    """

    model: torch.nn.Module
    n_train: int

    def start_epoch(self, epoch: int) -> None:  # noqa: B027 - optional hook
        """Called before an epoch's first step (and on resume): e.g. NeuMF draws new negatives."""

    @abstractmethod
    def batch(self, indices: np.ndarray) -> Any:
        """The training batch of sample ``indices`` (shape ``(batch,)``), on the device."""

    @abstractmethod
    def loss(self, batch: Any) -> torch.Tensor:
        """Scalar training loss of ``batch`` (the model in training mode)."""

    @abstractmethod
    def evaluate(self) -> float:
        """The workload's metric on its evaluation split (see :class:`WorkloadDefaults`)."""


def build_task(model: str, source: DataSource, device: torch.device) -> Task:
    """Build workload ``model``'s task on ``device``.

    Raises:
        ValueError: unknown model.
        WorkloadDataError: the dataset folder is missing files or holds corrupt ones.
    """
    defaults_of(model)  # the error for an unknown name
    module = importlib.import_module(f"iadeep.training._{model}")
    return module.build(source, device)


def seeded(seed: int, *salt: int) -> np.random.Generator:
    """A generator for ``seed`` and a tuple of integers (e.g. the epoch)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *salt]))
