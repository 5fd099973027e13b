"""``iadeep deviceplugin``: run the kubelet device plugin (mounted by :mod:`iadeep.cli`).

Flags override the ``IADEEP_DEVICEPLUGIN_*`` environment (see :class:`DevicePluginSettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app", "run"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _group() -> None:
    """The kubelet device plugin (a command group even with one command)."""


def _kube_client(settings: object) -> object:
    """The Kubernetes API client of ``settings.kube``.

    Raises:
        KubeConfigError: the configuration cannot be loaded (the message names the kubeconfig or
            the service account, the reason, and the settings to use).
    """
    from kubernetes import client

    from iadeep._kube import KubeConfigError, load_configuration
    from iadeep.deviceplugin._settings import DevicePluginSettings

    assert isinstance(settings, DevicePluginSettings)
    try:
        cfg = load_configuration(in_cluster=settings.kube.in_cluster, kubeconfig=settings.kube.kubeconfig)
    except KubeConfigError as exc:
        raise KubeConfigError(f"{exc}; set --kubeconfig (IADEEP_DEVICEPLUGIN_KUBE__KUBECONFIG) or --in-cluster") from None
    return client.ApiClient(cfg)


def run(settings: object) -> None:
    """Serve until interrupted.

    Raises:
        typer.Exit: (code 2) an unusable configuration (no NVML without ``--backend emulated``,
            no kubeconfig), with a one-line message.
    """
    from iadeep._climain import one_line
    from iadeep._kube import KubeConfigError
    from iadeep._serving import configure_logging, serve_http
    from iadeep.deviceplugin._allocate import KubernetesPodApi
    from iadeep.deviceplugin._gpus import EmulatedBackend, NvmlBackend
    from iadeep.deviceplugin._service import DevicePluginService
    from iadeep.deviceplugin._settings import DevicePluginSettings
    from iadeep.state import EtcdStateStore

    assert isinstance(settings, DevicePluginSettings)
    configure_logging(settings.log_level)
    try:
        if settings.backend == "emulated":
            e = settings.emulated
            backend: object = EmulatedBackend(settings.node, e.count, e.mem_gib, e.model, e.state_file)
        else:
            backend = NvmlBackend()
        pods = KubernetesPodApi(_kube_client(settings), settings.mem_resource, settings.count_resource)
        store = EtcdStateStore(settings.etcd)
        settings.socket_dir.mkdir(parents=True, exist_ok=True)
    except KubeConfigError as exc:  # the message names the kubeconfig and the settings, as the extender's
        typer.echo(f"iadeep deviceplugin: {exc}", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # noqa: BLE001 - one line, no traceback
        typer.echo(f"iadeep deviceplugin: cannot start: {type(exc).__name__}: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    service = DevicePluginService(settings, backend=backend, store=store, pods=pods).start()  # type: ignore[arg-type]
    # SIGTERM (the kubelet stopping the pod): the sockets are removed, then the process exits 0
    serve_http(service.app(), host=settings.host, port=settings.port, on_stop=service.stop)


@app.command("serve")
def serve(
    node: Annotated[str | None, typer.Option(help="This node's name (IADEEP_DEVICEPLUGIN_NODE).")] = None,
    socket_dir: Annotated[Path | None, typer.Option(help="The kubelet's device-plugin folder.")] = None,
    backend: Annotated[str | None, typer.Option(help="nvml (default) or emulated.")] = None,
    emulated_count: Annotated[int | None, typer.Option(help="Emulated GPUs.")] = None,
    emulated_mem_gib: Annotated[int | None, typer.Option(help="Memory of each emulated GPU (GiB).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default: $KUBECONFIG, ~/.kube/config).")] = None,
    in_cluster: Annotated[bool, typer.Option(help="Use the pod's service account.")] = False,
    gpu_model: Annotated[str | None, typer.Option(help="GPU model name to publish (default: NVML's or the emulated one).")] = None,
    host: Annotated[str | None, typer.Option(help="Health/metrics listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Health/metrics port (default 8892).")] = None,
    log_level: Annotated[str | None, typer.Option(help="Logging level (default info).")] = None,
) -> None:
    """Advertise the node's GPUs to the kubelet and allocate them to the pods the extender bound."""
    from iadeep._serving import settings_from
    from iadeep.deviceplugin._settings import DevicePluginSettings

    data: dict[str, object] = {k: v for k, v in {"node": node, "socket_dir": socket_dir, "backend": backend,
                                                 "gpu_model": gpu_model, "host": host, "port": port,
                                                 "log_level": log_level}.items() if v is not None}
    emulated = {k: v for k, v in {"count": emulated_count, "mem_gib": emulated_mem_gib}.items() if v is not None}
    if emulated:
        data["emulated"] = emulated
    if kubeconfig or in_cluster:
        data["kube"] = {"kubeconfig": kubeconfig, "in_cluster": in_cluster}
    run(settings_from(DevicePluginSettings, data, "iadeep deviceplugin"))
