"""The dataset folder over NFS: nfs-ganesha's export, the PersistentVolume/Claim, a reachability check.

There is no kernel NFS here (or in most CI containers); the server is nfs-ganesha in user space
(VFS backend, NFSv4 only) and the checks use libnfs's user-space clients (``nfs-ls``,
``nfs-cat`` from Debian's ``libnfs-utils``), so nothing is mounted on the host.
Configuration syntax: nfs-ganesha's ``ganesha-config(8)`` / ``ganesha-export-config(8)``; NFS URL
form: libnfs's README (``nfs://server/path?version=4&nfsport=N``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NfsExport", "ganesha_config", "volume_manifests", "apply_volume", "check_export"]


@dataclass(frozen=True)
class NfsExport:
    """One export of the dataset folder.

    Attributes:
        path: the folder exported (the dataset cache, ``iadeep_dataset_dir``).
        server: the server's address as clients reach it (loopback in development).
        port: its NFS port (2049 is the standard one).
        pseudo: the NFSv4 pseudo path clients mount (``/datasets``).
        export_id: ganesha's Export_Id (1..65535, unique per server).
    """

    path: str
    server: str = "127.0.0.1"
    port: int = 2049
    pseudo: str = "/datasets"
    export_id: int = 1

    def url(self, sub: str = "") -> str:
        """libnfs URL of ``sub`` under the export (libnfs takes a non-standard port as ``nfsport=``)."""
        port = "" if self.port == 2049 else f"&nfsport={self.port}"
        return f"nfs://{self.server}{self.pseudo.rstrip('/')}/{sub.lstrip('/')}?version=4{port}"


def ganesha_config(export: NfsExport, *, state_dir: str | Path, read_only: bool = False) -> str:
    """An nfs-ganesha configuration serving ``export`` (NFSv4 over TCP, bound to ``export.server``).

    Args:
        state_dir: writable folder for ganesha's recovery state and pid (per server).
        read_only: export read-only (``Access_Type = RO``).
    """
    state = Path(state_dir)
    return f"""# written by iadeep.orchestration (iadeep_nfs)
NFS_CORE_PARAM {{
    Protocols = 4;
    NFS_Port = {export.port};
    Bind_addr = {export.server};
    Enable_NLM = false;
    Enable_RQUOTA = false;
}}
NFSV4 {{
    RecoveryRoot = "{state / 'recovery'}";
    Grace_Period = 1;
    Lease_Lifetime = 1;
    Graceless = true;
}}
EXPORT_DEFAULTS {{
    SecType = sys;
}}
EXPORT {{
    Export_Id = {export.export_id};
    Path = "{export.path}";
    Pseudo = "{export.pseudo}";
    Protocols = 4;
    Transports = TCP;
    Access_Type = {'RO' if read_only else 'RW'};
    Squash = No_Root_Squash;
    FSAL {{
        Name = VFS;
    }}
}}
"""


def volume_manifests(export: NfsExport, *, name: str, namespace: str, capacity_gib: int = 10) -> list[dict[str, Any]]:
    """A ``ReadOnlyMany`` NFS PersistentVolume for the export and the claim bound to it (static
    binding: ``storageClassName: ""`` and ``volumeName``), as in the Kubernetes NFS volume docs."""
    labels = {"app.kubernetes.io/part-of": "iadeep", "iadeep.io/volume": name}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels},
          "spec": {"capacity": {"storage": f"{capacity_gib}Gi"}, "accessModes": ["ReadOnlyMany"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                   "mountOptions": ["nfsvers=4", f"port={export.port}"],
                   "nfs": {"server": export.server, "path": export.pseudo, "readOnly": True}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": namespace, "labels": labels},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": name,
                    "resources": {"requests": {"storage": f"{capacity_gib}Gi"}}}}
    return [pv, pvc]


def apply_volume(api: Any, export: NfsExport, *, name: str, namespace: str, wait_s: float = 30.0) -> str:
    """Create (or replace the spec of) the PV and PVC; wait until the claim is ``Bound``.

    Returns:
        the claim's phase.

    Raises:
        TimeoutError: the claim did not bind within ``wait_s`` (a PV of the same name with another spec?).
    """
    import time

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    pv, pvc = volume_manifests(export, name=name, namespace=namespace)
    for create, body in ((core.create_persistent_volume, pv),
                         (lambda b: core.create_namespaced_persistent_volume_claim(namespace, b), pvc)):
        try:
            create(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + wait_s
    while True:
        phase = core.read_namespaced_persistent_volume_claim(name, namespace).status.phase
        if phase == "Bound" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if phase != "Bound":
        raise TimeoutError(f"PersistentVolumeClaim {namespace}/{name} is {phase} after {wait_s:.0f}s")
    return phase


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} not found: install Debian's libnfs-utils (tools/node/deps.sh does)")
    return path


def check_export(export: NfsExport, *, timeout_s: float = 30.0) -> dict[str, Any]:
    """Write a probe file into the exported folder, read it back over NFS (``nfs-cat``), remove it.

    Returns:
        ``{"listing": names at the export's root (nfs-ls), "probe": file name, "bytes": n}``.

    Raises:
        RuntimeError: the export is unreachable or the bytes read back differ (the message has the
            client's error output).
    """
    root = Path(export.path)
    probe = f".iadeep-nfs-probe-{uuid.uuid4().hex[:8]}"
    payload = f"iadeep probe {uuid.uuid4().hex}\n".encode()
    (root / probe).write_bytes(payload)
    try:
        try:
            ls = subprocess.run([_tool("nfs-ls"), export.url()], capture_output=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"nfs-ls {export.url()}: no answer within {timeout_s:.0f}s") from None
        if ls.returncode != 0:
            raise RuntimeError(f"nfs-ls {export.url()} failed ({ls.returncode}): {ls.stderr.decode(errors='replace')}")
        cat = subprocess.run([_tool("nfs-cat"), export.url(probe)], capture_output=True, timeout=timeout_s, check=False)
        if cat.returncode != 0 or cat.stdout != payload:
            raise RuntimeError(f"nfs-cat {export.url(probe)} returned {cat.returncode} and {len(cat.stdout)} bytes "
                               f"(expected {len(payload)}): {cat.stderr.decode(errors='replace')}")
    finally:
        os.unlink(root / probe)
    names = [line.split()[-1] for line in ls.stdout.decode(errors="replace").splitlines() if line.strip()]
    return {"listing": [n for n in names if n not in (".", "..", probe)], "probe": probe, "bytes": len(payload)}
