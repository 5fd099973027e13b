"""Image classification on CIFAR-10/100 with a torchvision model (shared by vgg16, resnet50, squeezenet).

Inputs are the 32x32 images, scaled to [0, 1] and normalised per channel with the mean and
standard deviation of the training split actually loaded (computed, not copied constants). No
augmentation, as in the seed. Metric: top-1 accuracy on the test split (fraction).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from iadeep.training._data import ImageData, load_cifar
from iadeep.training._task import TINY_EVAL, TINY_TRAIN, DataSource, Task, seeded

__all__ = ["ImageClassification", "image_splits"]

_EVAL_CHUNK = 256


def image_splits(source: DataSource, classes: int) -> tuple[ImageData, ImageData]:
    """CIFAR train and test splits from ``source`` (synthetic: random images of the real shape)."""
    if source.synthetic:
        rng = seeded(source.seed, classes)
        n_train, n_eval = (TINY_TRAIN, TINY_EVAL) if source.tiny else (50_000, 10_000)

        def make(n: int) -> ImageData:
            return ImageData(rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, classes, n))

        return make(n_train), make(n_eval)
    assert source.folder is not None
    train, test = load_cifar(source.folder, classes)
    if source.tiny:
        train = ImageData(train.images[:TINY_TRAIN], train.labels[:TINY_TRAIN])
        test = ImageData(test.images[:TINY_EVAL], test.labels[:TINY_EVAL])
    return train, test


class ImageClassification(Task):
    """A classifier over CIFAR images."""

    def __init__(self, make_model: Callable[[int], torch.nn.Module], classes: int, source: DataSource,
                 device: torch.device) -> None:
        self.train_data, self.test_data = image_splits(source, classes)
        self.device = device
        pixels = self.train_data.images.astype(np.float32) / 255.0
        self.mean = torch.tensor(pixels.mean(axis=(0, 2, 3)), device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(pixels.std(axis=(0, 2, 3)) + 1e-6, device=device).view(1, 3, 1, 1)
        self.model = make_model(classes).to(device)
        self.n_train = len(self.train_data.labels)

    def _inputs(self, images: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.device).float().div_(255.0)
        return (x - self.mean) / self.std

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._inputs(self.train_data.images[indices])
        y = torch.from_numpy(self.train_data.labels[indices]).to(self.device)
        return x, y

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def evaluate(self) -> float:
        self.model.eval()
        correct = 0
        with torch.no_grad():
            for start in range(0, len(self.test_data.labels), _EVAL_CHUNK):
                x = self._inputs(self.test_data.images[start:start + _EVAL_CHUNK])
                y = torch.from_numpy(self.test_data.labels[start:start + _EVAL_CHUNK]).to(self.device)
                correct += int((self.model(x).argmax(dim=1) == y).sum())
        self.model.train()
        return correct / len(self.test_data.labels)
