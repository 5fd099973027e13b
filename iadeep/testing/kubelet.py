"""A kubelet peer for device-plugin tests: a real gRPC ``Registration`` server on
``<socket dir>/kubelet.sock`` (API v1beta1) that records registrations, and clients of the
registered plugins' ``DevicePlugin`` services, as the kubelet's device manager uses them.

``restart()`` does what a kubelet restart does to the folder: the old socket goes, the plugins'
sockets are removed, a new ``kubelet.sock`` appears.
"""

from __future__ import annotations

import queue
from concurrent import futures
from pathlib import Path

import grpc

from iadeep.deviceplugin import load_api_stubs

__all__ = ["KubeletPeer"]

pb2, pb2_grpc = load_api_stubs()


class _Registration(pb2_grpc.RegistrationServicer):  # type: ignore[misc,name-defined]
    def __init__(self, peer: KubeletPeer) -> None:
        self.peer = peer

    def Register(self, request, context):  # noqa: N802 - gRPC method name
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        self.peer.registrations.put(request)
        return pb2.Empty()


class KubeletPeer:
    """The kubelet's side of the device-plugin API in a folder.

    Attributes:
        registrations: ``RegisterRequest`` messages received, in order.
    """

    def __init__(self, socket_dir: Path) -> None:
        self.socket_dir = socket_dir
        socket_dir.mkdir(parents=True, exist_ok=True)
        self.socket = socket_dir / "kubelet.sock"
        self.registrations: queue.Queue = queue.Queue()
        self._server: grpc.Server | None = None
        self._channels: list[grpc.Channel] = []

    def start(self) -> KubeletPeer:
        self.socket.unlink(missing_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(2)
            self._server = None
        self.socket.unlink(missing_ok=True)
        for c in self._channels:
            c.close()
        self._channels.clear()

    def restart(self) -> None:
        """As a kubelet restart: the device-plugin folder is emptied, a new kubelet.sock appears."""
        self.stop()
        for f in self.socket_dir.glob("*.sock"):
            f.unlink(missing_ok=True)
        self.start()

    def registration(self, timeout_s: float = 30.0):
        """The next ``RegisterRequest`` (raises ``queue.Empty`` after ``timeout_s``)."""
        return self.registrations.get(timeout=timeout_s)

    def plugin(self, endpoint: str):
        """A ``DevicePluginStub`` on the plugin that registered ``endpoint``."""
        channel = grpc.insecure_channel(f"unix://{self.socket_dir / endpoint}")
        self._channels.append(channel)
        return pb2_grpc.DevicePluginStub(channel)
