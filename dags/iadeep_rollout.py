"""Airflow DAG ``iadeep_rollout``: deploy (or update) the middleware's components.

::

    render -> apply -> wait_ready

- ``render`` (``method: kustomize``, the default): ``k8s/extender`` and ``k8s/node`` through
  ``kubectl kustomize``, keeping the chosen ``components`` (extender = extender + the
  ``iadeep-scheduler`` profile; deviceplugin, coordinator, tuner) with image ``image:tag``; written to ``manifests.yaml`` in the runs folder.
  With ``local``: ``k8s/local`` instead (the local cluster's real node: local images, emulated
  GPUs, host network), with the ports and addresses the cluster gives at run time (the API server
  from the ``iadeep_cluster`` kubeconfig, etcd from the ``iadeep_etcd`` Connection, a free loopback
  port per service, Gavel's measurements from the dataset folder) written over it.
- ``apply``: ``kubectl apply --server-side`` (idempotent) with the ``iadeep_cluster`` Connection's kubeconfig;
  with ``local``, the real node is labelled a GPU node first (the device plugin's DaemonSet selects it).
- ``wait_ready``: every Deployment/DaemonSet rolled out (all replicas updated and ready) or fail
  after ``timeout_s`` naming what is not ready.

With ``method: helm`` the same three steps go through the chart ``charts/iadeep`` instead
(:func:`iadeep.orchestration.template`, :func:`~iadeep.orchestration.upgrade_install`): ``render`` writes the release's values (``values.yaml``; with
``local``, :func:`~iadeep.orchestration.local_values` of the cluster) and ``helm template``'s objects
(``manifests.yaml``, for ``wait_ready``); ``apply`` is ``helm upgrade --install`` of release
``iadeep`` in ``iadeep-system``. A release holds every component: ``components`` chooses which
get ``image:tag``, the others keep the image the installed release gives them. Helm is
``$IADEEP_HELM``, the one ``make helm`` built, or ``helm`` on ``PATH``.

Trigger with ``{"components": ["extender"], "tag": "0.1.1"}`` to deploy one component by hand.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task


@dag(dag_id="iadeep_rollout", schedule=None, catchup=False, tags=["iadeep", "deploy"], doc_md=__doc__,
     params={
         "components": Param(["extender", "deviceplugin", "coordinator", "tuner"], type="array", minItems=1, uniqueItems=True,
                             items={"type": "string", "enum": ["extender", "deviceplugin", "coordinator", "tuner"]},
                             description="Components to deploy."),
         "image": Param("ghcr.io/iadeep/iadeep", type="string", description="Image of the middleware's services."),
         "tag": Param("0.1.0", type="string", minLength=1, description="Image tag."),
         "scheduler_image": Param(None, type=["null", "string"],
                                  description="kube-scheduler image of iadeep-scheduler; null = as committed."),
         "timeout_s": Param(300, type="number", exclusiveMinimum=0, description="Readiness deadline (s)."),
         "local": Param(False, type="boolean",
                        description="Onto the local cluster's real node (k8s/local with the cluster's own ports; image/tag unused)."),
         "method": Param("kustomize", type="string", enum=["kustomize", "helm"],
                         description="kustomize: k8s/ through kubectl; helm: the chart charts/iadeep (release iadeep)."),
     }, default_args={"retries": 1})
def iadeep_rollout() -> None:
    """Render, apply and wait (see the module docstring)."""

    @task
    def render(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        import re
        from pathlib import Path

        import yaml

        from iadeep.orchestration import render as render_docs
        from iadeep.orchestration import dataset_dir, variable_path

        out = Path(variable_path("iadeep_runs_dir", "runs")) / "rollout" / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual")
        out.mkdir(parents=True, exist_ok=True)
        kustomization = cluster = None
        if params["local"]:
            from iadeep.datasets import fetch
            from iadeep.orchestration import prepare_local_rollout
            from iadeep.orchestration import cluster_ref, etcd_ref

            gavel = fetch("gavel-throughputs", progress=False, cache_dir=dataset_dir())
            etcd = etcd_ref()
            cluster, kustomization = prepare_local_rollout(out, kubeconfig=cluster_ref()["kubeconfig"], etcd_endpoints=etcd["endpoint"],
                                                           etcd_prefix=etcd["prefix"], throughputs_file=gavel / "simulation_throughputs.json")
        if params["method"] == "helm":
            from iadeep.orchestration import local_values, release_values, rollout_values, template
            from iadeep.orchestration import cluster_ref

            local = params["local"]
            values = rollout_values(list(params["components"]), image=None if local else params["image"],
                                    tag=None if local else params["tag"], scheduler_image=params["scheduler_image"],
                                    base=local_values(cluster) if cluster else None,
                                    current=release_values(kubeconfig=cluster_ref()["kubeconfig"]))
            (out / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
            docs = template(values)
        else:
            docs = render_docs(list(params["components"]), image=params["image"], tag=params["tag"],
                               scheduler_image=params["scheduler_image"], kustomization=kustomization)
        (out / "manifests.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return str(out / "manifests.yaml")

    @task
    def apply(manifests: str, params: dict[str, Any] | None = None) -> list[str]:
        from pathlib import Path

        import yaml

        from iadeep.orchestration import apply as kubectl_apply
        from iadeep.orchestration import label_real_nodes
        from iadeep.orchestration import api_for, cluster_ref

        if params["local"]:
            api = api_for(cluster_ref())
            try:
                label_real_nodes(api)
            finally:
                api.close()
        if params["method"] == "helm":
            from iadeep.orchestration import upgrade_install

            values = yaml.safe_load((Path(manifests).parent / "values.yaml").read_text()) or {}
            return upgrade_install(values, kubeconfig=cluster_ref()["kubeconfig"], timeout_s=float(params["timeout_s"])).splitlines()
        return kubectl_apply(list(yaml.safe_load_all(Path(manifests).read_text())), kubeconfig=cluster_ref()["kubeconfig"])

    @task
    def wait_ready(manifests: str, params: dict[str, Any] | None = None) -> dict[str, str]:
        from pathlib import Path

        import yaml

        from iadeep.orchestration import wait_ready as wait
        from iadeep.orchestration import api_for, cluster_ref

        api = api_for(cluster_ref())
        try:
            return wait(api, list(yaml.safe_load_all(Path(manifests).read_text())), timeout_s=float(params["timeout_s"]))
        finally:
            api.close()

    manifests = render()
    apply(manifests) >> wait_ready(manifests)


iadeep_rollout()
