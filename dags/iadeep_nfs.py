"""Airflow DAG ``iadeep_nfs``: the dataset folder exported over NFS and claimed in the cluster.

::

    export_config -> verify_export -> volume

- ``export_config``: writes nfs-ganesha's configuration exporting ``<dataset dir>/datasets`` (the
  registry's cache, Variable ``iadeep_dataset_dir``) as NFSv4 pseudo path ``pseudo`` on
  ``server:port`` to ``ganesha_conf`` (default ``<dataset dir>/ganesha.conf``); the server
  (``ganesha.nfsd -f <file>``, a service of the host or the compose stack) reads it. With a
  running server whose pid is in ``ganesha_pid_file``, it is sent SIGHUP to reload its exports.
- ``verify_export``: a probe file written into the folder reads back over NFS (libnfs's
  ``nfs-ls``/``nfs-cat``: no mount needed); the task fails when the export is unreachable.
- ``volume``: a ReadOnlyMany NFS PersistentVolume for the export and the claim ``claim`` in the
  Jobs' namespace (Connection ``iadeep_cluster``), bound statically; the trace Jobs mount it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task


@dag(dag_id="iadeep_nfs", schedule=None, catchup=False, tags=["iadeep", "nfs", "datasets"], doc_md=__doc__,
     params={
         "server": Param("127.0.0.1", type="string", description="NFS server address as clients (nodes) reach it."),
         "port": Param(2049, type="integer", minimum=1, maximum=65535, description="NFS port of the server."),
         "pseudo": Param("/datasets", type="string", pattern="^/", description="NFSv4 pseudo path of the export."),
         "claim": Param("iadeep-datasets", type="string", pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                        description="Name of the PersistentVolume and its claim."),
         "ganesha_conf": Param(None, type=["null", "string"], description="Where to write ganesha's configuration."),
         "ganesha_pid_file": Param(None, type=["null", "string"], description="A running ganesha's pid file (reloaded)."),
     }, default_args={"retries": 1, "retry_delay": timedelta(seconds=20)})
def iadeep_nfs() -> None:
    """NFS export of the dataset folder and its PV/PVC (see the module docstring)."""

    def export_of(params: dict[str, Any]) -> Any:
        from pathlib import Path

        from iadeep.orchestration import NfsExport
        from iadeep.orchestration import dataset_dir

        root = Path(dataset_dir()) / "datasets"
        root.mkdir(parents=True, exist_ok=True)
        return NfsExport(path=str(root), server=params["server"], port=int(params["port"]), pseudo=params["pseudo"])

    @task
    def export_config(params: dict[str, Any] | None = None) -> dict[str, str]:
        import os
        import signal
        from pathlib import Path

        from iadeep.orchestration import ganesha_config

        export = export_of(params)
        conf = Path(params["ganesha_conf"] or Path(export.path).parent / "ganesha.conf")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(ganesha_config(export, state_dir=conf.parent / "ganesha-state"))
        reloaded = False
        if params["ganesha_pid_file"] and Path(params["ganesha_pid_file"]).is_file():
            os.kill(int(Path(params["ganesha_pid_file"]).read_text().split()[0]), signal.SIGHUP)
            reloaded = True
        return {"config": str(conf), "path": export.path, "url": export.url(), "reloaded": str(reloaded)}

    @task
    def verify_export(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from iadeep.orchestration import check_export

        return check_export(export_of(params))

    @task
    def volume(params: dict[str, Any] | None = None) -> str:
        from iadeep.orchestration import apply_volume, ensure_namespace
        from iadeep.orchestration import api_for, cluster_ref

        ref = cluster_ref()
        api = api_for(ref)
        try:
            ensure_namespace(api, ref["namespace"])
            return apply_volume(api, export_of(params), name=params["claim"], namespace=ref["namespace"])
        finally:
            api.close()

    export_config() >> verify_export() >> volume()


iadeep_nfs()
