"""Training workloads: real DL jobs, their datasets, Kubernetes Job templates and a co-location profiler.

Five workloads (vgg16, resnet50, squeezenet on CIFAR; an LSTM language model on WikiText-2;
NeuMF on MovieLens-1M) share one runner (:func:`run`) that reports through a
:class:`JobReporter`, follows the assigned batch size at step boundaries, checkpoints and
resumes. ``iadeep bench-job MODEL`` runs one; ``iadeep profile`` measures co-location
throughputs in the schema the interference model reads; :func:`render_job` makes the Kubernetes
Job for a trace job.

This package imports its parts lazily: the defaults, the dataset loaders and the Job templates
work without the ``workloads`` extra (no torch); :func:`run` and :func:`profile` need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iadeep.training._data import (
        ImageData,
        Ratings,
        WorkloadDataError,
        load_cifar,
        load_movielens_ratings,
        load_wikitext2,
    )
    from iadeep.training._jobs import (
        JobTemplateSettings,
        VolumeSettings,
        job_manifest,
        job_name,
        render_job,
        render_trace_jobs,
    )
    from iadeep.training._profile import ProfileResult, ProfileSettings, profile
    from iadeep.training._report import JobInfo, JobReporter, LogReporter, Outcome, Progress, StateReporter
    from iadeep.training._runner import RunResult, RunSettings, run, scaled_lr
    from iadeep.training._spec import DEFAULTS, MODELS, WorkloadDefaults, defaults_of

__all__ = [
    "DEFAULTS",
    "MODELS",
    "ImageData",
    "JobInfo",
    "JobReporter",
    "JobTemplateSettings",
    "LogReporter",
    "Outcome",
    "ProfileResult",
    "ProfileSettings",
    "Progress",
    "Ratings",
    "RunResult",
    "RunSettings",
    "StateReporter",
    "VolumeSettings",
    "WorkloadDataError",
    "WorkloadDefaults",
    "defaults_of",
    "job_manifest",
    "job_name",
    "load_cifar",
    "load_movielens_ratings",
    "load_wikitext2",
    "profile",
    "render_job",
    "render_trace_jobs",
    "run",
    "scaled_lr",
]

_LAZY = {
    **dict.fromkeys(("ImageData", "Ratings", "WorkloadDataError", "load_cifar", "load_movielens_ratings", "load_wikitext2"),
                    "iadeep.training._data"),
    **dict.fromkeys(("JobTemplateSettings", "VolumeSettings", "job_manifest", "job_name", "render_job", "render_trace_jobs"),
                    "iadeep.training._jobs"),
    **dict.fromkeys(("ProfileResult", "ProfileSettings", "profile"), "iadeep.training._profile"),
    **dict.fromkeys(("JobInfo", "JobReporter", "LogReporter", "Outcome", "Progress", "StateReporter"), "iadeep.training._report"),
    **dict.fromkeys(("RunResult", "RunSettings", "run", "scaled_lr"), "iadeep.training._runner"),
    **dict.fromkeys(("DEFAULTS", "MODELS", "WorkloadDefaults", "defaults_of"), "iadeep.training._spec"),
}


def __getattr__(name: str) -> Any:
    """Every name is imported on first use: torch only for those that need it, and the profiler's
    worker processes import no more than they train with."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'iadeep.training' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
