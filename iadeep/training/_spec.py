"""The training workloads' defaults: one table, the same for every policy, importable without torch.

The defaults are those of the seed system's benchmark scripts (IADeep artifact,
``benchmarks/workloads/*.py``): batch size, optimiser, learning rate and per-epoch decay, target
metric and patience (the run stops once the target has been met ``patience`` times, or at
``max_epochs``). Two departures, both applied to every policy alike:

* No workload starts from pretrained weights (the seed loaded ImageNet weights for its own runs
  only, which biased the comparison).
* The LSTM's Adadelta runs at its usual learning rate 1.0 (Zeiler 2012 defines the method without
  one; PyTorch's default) instead of the seed's 100.

Gavel family: the model family of the published measurements each workload stands for in the
simulator (the ``iadeep`` mix of :mod:`iadeep.traces`); the profiler writes its measurements
under these names so that the simulator and the extender read them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkloadDefaults", "DEFAULTS", "MODELS", "defaults_of"]


@dataclass(frozen=True)
class WorkloadDefaults:
    """How one workload trains by default.

    Attributes:
        model: workload name (``iadeep bench-job MODEL``).
        dataset: registry name of its dataset.
        batch_size: samples per step (sequences for the LSTM, user-item pairs for NeuMF).
        optimizer: ``"adam"``, ``"adadelta"`` or ``"sgd"``.
        lr: learning rate at ``batch_size``.
        lr_decay_per_epoch: factor applied to the learning rate after every epoch (the seed's
            ``StepLR(step_size=1, gamma)``; 1.0 = none).
        metric: ``"top1"`` (test accuracy, fraction), ``"perplexity"`` (validation, per
            character) or ``"hr@10"`` (hit ratio at 10 among 100 candidates).
        target: the metric value that counts as reached.
        higher_is_better: direction of ``metric``.
        patience: evaluations at or past ``target`` before the run stops.
        max_epochs: the run stops here in any case.
        gavel_family: model family of the interference measurements it stands for.
        grad_clip: gradient-norm clip (``None``: none).
    """

    model: str
    dataset: str
    batch_size: int
    optimizer: str
    lr: float
    lr_decay_per_epoch: float
    metric: str
    target: float
    higher_is_better: bool
    patience: int
    max_epochs: int
    gavel_family: str
    grad_clip: float | None = None


DEFAULTS: dict[str, WorkloadDefaults] = {
    d.model: d
    for d in (
        WorkloadDefaults("vgg16", "cifar-10", 512, "adam", 1e-3, 0.7, "top1", 0.80, True, 10, 300, "ResNet-50"),
        WorkloadDefaults("resnet50", "cifar-100", 1024, "adam", 1e-3, 0.7, "top1", 0.578, True, 10, 300, "ResNet-50"),
        WorkloadDefaults("squeezenet", "cifar-10", 512, "adam", 1e-3, 1.0, "top1", 0.74, True, 10, 300, "ResNet-18"),
        WorkloadDefaults("lstm", "wikitext-2", 256, "adadelta", 1.0, 1.0, "perplexity", 4.0, False, 10, 300, "LM",
                         grad_clip=0.1),
        WorkloadDefaults("neumf", "movielens-1m", 1024, "adam", 1e-3, 1.0, "hr@10", 0.69, True, 10, 4000,
                         "Recommendation"),
    )
}

#: Workload names, in the order the seed listed them.
MODELS: tuple[str, ...] = tuple(DEFAULTS)


def defaults_of(model: str) -> WorkloadDefaults:
    """The defaults of ``model``.

    Raises:
        ValueError: unknown model (the message lists the known ones).
    """
    try:
        return DEFAULTS[model]
    except KeyError:
        raise ValueError(f"unknown workload {model!r}; known: {', '.join(MODELS)}") from None
