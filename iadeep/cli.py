"""The ``iadeep`` command: one entry point, thin sub-commands that parse flags and call a ``run()``.

Configuration errors (a bad option, a bad ``IADEEP_*`` setting, a bad experiment parameter) end
the command with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from iadeep._climain import run_cli

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _mount() -> None:
    """Attach the sub-command groups (each lives beside the code it drives)."""
    from iadeep.datasets._cli import app as datasets_app

    app.add_typer(datasets_app, name="datasets", help="List, fetch and verify the registered datasets.")
    from iadeep.experiment._cli import app as experiment_app

    app.add_typer(experiment_app, name="experiment", help="Trace-driven experiments: replay a trace against policies.")
    from iadeep.report._interference_cli import app as interference_app

    app.add_typer(interference_app, name="interference", help="Quality of the interference model and its learner.")
    from iadeep.state._cli import app as etcd_app

    app.add_typer(etcd_app, name="etcd", help="A local etcd for the live services (data under the user's state dir).")
    from iadeep.extender._cli import app as extender_app

    app.add_typer(extender_app, name="extender", help="The kube-scheduler extender service.")
    from iadeep.tuner._cli import app as tuner_app

    app.add_typer(tuner_app, name="tuner", help="The batch-size tuner service (optuna studies over HTTP).")
    from iadeep.coordinator._cli import app as coordinator_app

    app.add_typer(coordinator_app, name="coordinator", help="The per-node coordinator (tuning sessions).")
    from iadeep.deviceplugin._cli import app as deviceplugin_app

    app.add_typer(deviceplugin_app, name="deviceplugin", help="The kubelet device plugin (GPU memory and GPUs).")
    from iadeep.emulator._cli import app as emulator_app

    app.add_typer(emulator_app, name="emulator", help="Emulated GPUs for kwok nodes, driven by the interference model.")
    from iadeep.dev._cli import app as dev_app

    app.add_typer(dev_app, name="dev", help="Local development cluster (etcd, kube-apiserver, kube-scheduler, kwok).")
    from iadeep.training._cli import bench_job_cmd, profile_cmd

    app.command("bench-job", help="Train one workload (vgg16, resnet50, squeezenet, lstm, neumf); needs the workloads extra.")(bench_job_cmd)
    app.command("profile", help="Measure co-location throughputs of the workloads; needs the workloads extra.")(profile_cmd)


_mount()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``iadeep`` command (the console script); return its exit code.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success; 2 for a configuration error (one line on stderr, see
        :func:`iadeep._climain.run_cli`); the command's own code otherwise.
    """
    return run_cli(app, argv, prog_name="iadeep")


if __name__ == "__main__":
    sys.exit(main())
