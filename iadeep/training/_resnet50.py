"""ResNet-50 on CIFAR-100 (He et al., CVPR 2016): torchvision's definition, trained from scratch."""

from __future__ import annotations

import torch
import torchvision

from iadeep.training._task import DataSource, Task
from iadeep.training._vision import ImageClassification

__all__ = ["build"]


def build(source: DataSource, device: torch.device) -> Task:
    """ResNet-50 (25.6 M parameters at 1,000 classes) on CIFAR-100."""
    return ImageClassification(lambda k: torchvision.models.resnet50(weights=None, num_classes=k), 100, source, device)
