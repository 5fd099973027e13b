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
node_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="A real node (containerd + runc + kubelet, as root) joined to a local cluster.",
)
app.add_typer(node_app, name="node")

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
    from iadeep._host import signal_group

    return {name: signal_group(p["pid"], 0) for name, p in state.get("processes", {}).items()}


def _fail(msg: str) -> typer.Exit:
    _err.print(f"[bold red]error:[/] {msg}")
    return typer.Exit(code=1)


def _stop(name: str) -> list[str]:
    from iadeep._host import stop_detached

    state = _read_state(name)
    stopped: list[str] = []
    if state is not None and state.get("node"):
        _stop_node(state)
        stopped.append("node")
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
    real_node: Annotated[
        bool,
        typer.Option("--real-node", help="Also start a real node (see `iadeep dev node up`; needs root)."),
    ] = False,
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
    node = None
    if real_node:
        from iadeep.dev._node import Node

        node = Node.for_control_plane(cp, die_with_parent=foreground)
        try:
            node.start()
            _import_images(node)
        except ControlPlaneError as exc:
            cp.keep_workdir = False
            cp.stop()
            raise _fail(f"{exc}\n(logs: {directory / 'logs'})") from None
    info = cp.detach() if not foreground else cp.state()
    info.update(name=name, nodes=nodes, gpus_per_node=gpus_per_node, gpu_mem_gib=gpu_mem_gib, detached=not foreground)
    if node is not None:
        info["node"] = node.detach() if not foreground else node.state()
        if not foreground:
            cp.stop_hooks.clear()
    (directory / "state.json").write_text(json.dumps(info, indent=2))
    _out.print(f"cluster {name!r} ready in {cp.timings['ready']:.1f}s: {cp.server}, {nodes} kwok node(s)")
    if node is not None:
        _out.print(f"real node {node.name!r} Ready in {node.timings['ready']:.1f}s (kubelet on 127.0.0.1:{node.ports['kubelet']})")
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


# -- the real node ----------------------------------------------------------------------------


def _import_images(node: Any) -> None:
    from iadeep.dev._images import images_archive

    archive = images_archive(required=False)
    if archive is None:
        _out.print("no images built for this source tree (`make images`); the node has only its pause image")
        return
    names = node.import_images([archive])
    _out.print(f"imported {archive.name}: {', '.join(n for n in names if not n.startswith('sha256:'))}")


def _stop_node(state: dict[str, Any]) -> dict[str, int]:
    from iadeep.dev._node import teardown_detached

    return teardown_detached(state["node"])


@node_app.command("up")
def node_up_command(
    name: NameOpt = "default",
    node_name: Annotated[str, typer.Option("--node-name", help="The Node object's name.")] = "iadeep-node",
    images: Annotated[
        bool, typer.Option("--images/--no-images", help="Import the images of `make images` when built.")
    ] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the node to be Ready.")] = 120.0,
) -> None:
    """Start containerd and a kubelet as a real node of cluster NAME (started by ``cluster up``)."""
    from iadeep.dev._node import Node

    state = _read_state(name)
    if state is None or not all(_alive(state).values()):
        raise _fail(f"cluster {name!r} is not up; start it with `iadeep dev cluster up --name {name}`")
    if state.get("node"):
        raise _fail(f"cluster {name!r} already has a real node ({state['node']['name']}); `node down` first")
    workdir = Path(state["workdir"])
    node = Node(
        server=state["server"],
        pki_dir=workdir / "pki",
        admin_kubeconfig=Path(state["kubeconfig"]),
        workdir=workdir / f"node-{node_name}",
        log_dir=workdir / "logs",
        name=node_name,
        die_with_parent=False,
        ready_timeout=timeout,
    )
    try:
        node.start()
        if images:
            _import_images(node)
    except ControlPlaneError as exc:
        node.stop()
        raise _fail(f"{exc}\n(logs: {workdir / 'logs'})") from None
    state["node"] = node.detach()
    (workdir / "state.json").write_text(json.dumps(state, indent=2))
    _out.print(f"node {node_name!r} Ready in {node.timings['ready']:.1f}s; logs: {workdir / 'logs'}")
    _out.print(f"stop it with: iadeep dev node down --name {name}")


@node_app.command("status")
def node_status_command(name: NameOpt = "default") -> None:
    """Show the real node's processes and its Ready condition. Exit 1 when it is not up."""
    from iadeep._host import signal_group

    state = _read_state(name)
    node = (state or {}).get("node")
    if not node:
        _out.print(f"cluster {name!r} has no real node")
        raise typer.Exit(code=1)
    ok = True
    for comp, proc in node["processes"].items():
        alive = signal_group(int(proc["pid"]), 0)
        ok &= alive
        _out.print(f"{comp:<12} {'running' if alive else 'STOPPED'} (pid {proc['pid']})")
    try:
        from kubernetes import client
        from kubernetes import config as k8s_config

        api = client.CoreV1Api(k8s_config.new_client_from_config(config_file=state["kubeconfig"]))  # type: ignore[index]
        conds = {c.type: c for c in api.read_node(node["name"]).status.conditions or []}
        ready = conds.get("Ready")
        _out.print(f"node {node['name']}: Ready={ready.status if ready else '?'} ({ready.message if ready else ''})")
        ok &= ready is not None and ready.status == "True"
    except Exception as exc:  # noqa: BLE001 - status reports whatever it can
        _out.print(f"node {node['name']}: cannot read it from the API ({exc})")
        ok = False
    if not ok:
        raise typer.Exit(code=1)


@node_app.command("down")
def node_down_command(name: NameOpt = "default") -> None:
    """Stop the real node: kubelet, containerd, every container; unmount; remove its cgroups."""
    state = _read_state(name)
    if not state or not state.get("node"):
        _out.print(f"cluster {name!r} has no real node")
        return
    result = _stop_node(state)
    node = state.pop("node")
    (run_dir(name) / "state.json").write_text(json.dumps(state, indent=2))
    _out.print(f"node {node['name']!r} down ({result['killed']} process(es) killed, {result['unmounted']} mount(s) removed)")


@app.command("deploy")
def deploy_command(name: NameOpt = "default") -> None:
    """Deploy every component (k8s/local: extender + iadeep-scheduler, device plugin, coordinator,
    tuner; local images, emulated GPUs) onto cluster NAME's real node and wait until it is ready."""
    from iadeep.datasets import fetch
    from iadeep.dev._binaries import find_binaries
    from iadeep.dev._deploy import deploy_local, find_kubectl, local_scheduler_tag
    from iadeep.dev._images import kube_scheduler_image
    from iadeep.dev._node import Node

    state = _read_state(name)
    if state is None or not state.get("node"):
        raise _fail(f"cluster {name!r} has no real node; `iadeep dev cluster up --real-node --name {name}`")
    node_state = state["node"]
    workdir = Path(state["workdir"])
    node = Node(
        server=state["server"], pki_dir=workdir / "pki", admin_kubeconfig=Path(state["kubeconfig"]),
        workdir=Path(node_state["workdir"]), log_dir=workdir / "logs", name=node_state["name"],
    )  # fmt: skip
    try:
        find_kubectl()
        archive = node.paths.images / "kube-scheduler.tar"
        kube_scheduler_image(find_binaries().kube_scheduler, local_scheduler_tag(), archive)
        _import_images(node)
        node.import_images([archive])
        gavel = fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json"
        result = deploy_local(kubeconfig=Path(state["kubeconfig"]), etcd_endpoints=f"http://127.0.0.1:{state['ports']['etcd']}",
                              throughputs_file=gavel, workdir=node.paths.root)
    except ControlPlaneError as exc:
        raise _fail(str(exc)) from None
    for line in result["applied"]:
        _out.print(line)
    for workload, status in result["ready"].items():
        _out.print(f"{workload}: {status}")
    cluster = result["cluster"]
    _out.print(f"extender: {cluster.url('extender', '/iadeep')} (readyz: {cluster.url('extender', '/readyz')}); "
               f"rendered in {result['dir']}")
