"""``iadeep dev``: a local Kubernetes control plane with fake GPU nodes.

``cluster up`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on
127.0.0.1 (random ports) and returns once everything is ready, leaving the processes running in
the background (``--foreground`` keeps them attached until Ctrl-C instead). Its certificates,
data, logs and kubeconfig live in a run directory under the user's state directory
(``$IADEEP_DEV_STATE_DIR`` overrides it), one per ``--name``. ``cluster down`` stops it and
deletes the run directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from iadeep.dev._errors import ControlPlaneError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
cluster_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Start, inspect and stop a local cluster.")
app.add_typer(cluster_app, name="cluster")

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)

NameOpt = Annotated[str, typer.Option("--name", help="Cluster name (one run directory each).")]


def state_root() -> Path:
    env = os.environ.get("IADEEP_DEV_STATE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_state_dir

    return Path(user_state_dir("iadeep")) / "dev-clusters"


def run_dir(name: str) -> Path:
    return state_root() / name


def _read_state(name: str) -> dict[str, Any] | None:
    path = run_dir(name) / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(state: dict[str, Any]) -> dict[str, bool]:
    from iadeep._host._procs import signal_group

    return {name: signal_group(p["pid"], 0) for name, p in state.get("processes", {}).items()}


def _fail(msg: str) -> typer.Exit:
    _err.print(f"[bold red]error:[/] {msg}")
    return typer.Exit(code=1)


def _stop(name: str) -> list[str]:
    from iadeep._host._procs import stop_detached

    state = _read_state(name)
    stopped: list[str] = []
    if state is not None:
        for comp, proc in reversed(list(state.get("processes", {}).items())):
            if stop_detached(int(proc["pid"]), proc["exe"]):
                stopped.append(comp)
    return stopped


@cluster_app.command("up")
def up_command(
    name: NameOpt = "default",
    nodes: Annotated[int, typer.Option("--nodes", min=0, help="Fake GPU nodes to create.")] = 2,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1, help="GPUs on each node.")] = 4,
    gpu_mem_gib: Annotated[int, typer.Option("--gpu-mem-gib", min=1, help="Memory of each GPU, GiB.")] = 32,
    scheduler_config: Annotated[
        Path | None,
        typer.Option(
            "--scheduler-config",
            exists=True,
            dir_okay=False,
            help="KubeSchedulerConfiguration YAML (its clientConnection.kubeconfig is filled in).",
        ),
    ] = None,
    foreground: Annotated[
        bool, typer.Option("--foreground/--detach", help="Stay attached until Ctrl-C, or return once ready.")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for readiness.")] = 60.0,
) -> None:
    """Start a control plane with kwok GPU nodes; prints the kubeconfig path."""
    from iadeep.dev._cluster import ControlPlane

    state = _read_state(name)
    if state is not None and any(_alive(state).values()):
        raise _fail(f"cluster {name!r} is already up (KUBECONFIG={state['kubeconfig']}); run `cluster down` first")
    directory = run_dir(name)
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_mem_gib=gpu_mem_gib,
        scheduler_config=scheduler_config,
        workdir=directory,
        die_with_parent=foreground,
        ready_timeout=timeout,
    )
    try:
        cp.start()
    except ControlPlaneError as exc:
        raise _fail(f"{exc}\n(logs: {directory / 'logs'})") from None
    info = cp.detach() if not foreground else cp.state()
    info.update(name=name, nodes=nodes, gpus_per_node=gpus_per_node, gpu_mem_gib=gpu_mem_gib, detached=not foreground)
    (directory / "state.json").write_text(json.dumps(info, indent=2))
    _out.print(f"cluster {name!r} ready in {cp.timings['ready']:.1f}s: {cp.server}, {nodes} kwok node(s)")
    _out.print(f"logs: {cp.log_dir}")
    _out.print(f"export KUBECONFIG={cp.kubeconfig}")
    if not foreground:
        _out.print(f"stop it with: iadeep dev cluster down --name {name}")
        return
    _out.print("running in the foreground; Ctrl-C stops it")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            dead = [n for n, p in cp.procs.items() if not p.alive()]
            if dead:
                _err.print(f"[bold red]{', '.join(dead)} exited[/]; see {cp.log_dir}")
                raise typer.Exit(code=1)
    finally:
        cp.keep_workdir = False
        cp.stop()
        _out.print(f"cluster {name!r} stopped")


@cluster_app.command("down")
def down_command(
    name: NameOpt = "default",
    keep: Annotated[bool, typer.Option("--keep", help="Keep the run directory (logs, data).")] = False,
) -> None:
    """Stop a cluster started by ``cluster up`` and delete its run directory."""
    directory = run_dir(name)
    if not directory.exists():
        _out.print(f"cluster {name!r} is not up")
        return
    stopped = _stop(name)
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)
    _out.print(f"cluster {name!r} down" + (f" (stopped {', '.join(stopped)})" if stopped else ""))


@cluster_app.command("status")
def status_command(name: NameOpt = "default") -> None:
    """Show whether a cluster is up, its components and its kubeconfig. Exit 1 when it is not up."""
    state = _read_state(name)
    if state is None:
        _out.print(f"cluster {name!r} is not up")
        raise typer.Exit(code=1)
    alive = _alive(state)
    for comp, ok in alive.items():
        _out.print(f"{comp:<24} {'running' if ok else 'STOPPED'} (pid {state['processes'][comp]['pid']})")
    _out.print(f"export KUBECONFIG={state['kubeconfig']}")
    if not all(alive.values()):
        raise typer.Exit(code=1)
