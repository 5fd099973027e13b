"""VGG-16 on CIFAR-10 (Simonyan and Zisserman, ICLR 2015): torchvision's definition, trained from scratch."""

from __future__ import annotations

import torch
import torchvision

from iadeep.training._task import DataSource, Task
from iadeep.training._vision import ImageClassification

__all__ = ["build"]


def build(source: DataSource, device: torch.device) -> Task:
    """VGG-16 (138 M parameters at 1,000 classes; 134 M at 10) on CIFAR-10."""
    return ImageClassification(lambda k: torchvision.models.vgg16(weights=None, num_classes=k), 10, source, device)
