"""SqueezeNet 1.1 on CIFAR-10 (Iandola et al. 2016; version 1.1 as in the seed): torchvision's definition."""

from __future__ import annotations

import torch
import torchvision

from iadeep.training._task import DataSource, Task
from iadeep.training._vision import ImageClassification

__all__ = ["build"]


def build(source: DataSource, device: torch.device) -> Task:
    """SqueezeNet 1.1 (1.2 M parameters) on CIFAR-10."""
    return ImageClassification(lambda k: torchvision.models.squeezenet1_1(weights=None, num_classes=k), 10, source, device)
