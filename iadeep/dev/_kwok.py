"""Fake GPU nodes and the kwok stages that drive them.

kwok plays the kubelet of every node annotated ``kwok.x-k8s.io/node: fake``: it keeps the node's
lease fresh and moves pods through the lifecycle described by the stages below. Our stages:

* ``iadeep-node-ready``: a new node becomes Ready (capacity and addresses are set at creation);
* ``iadeep-node-heartbeat``: refresh the node's conditions every 5-5.5 min, the kubelet's default
  ``nodeStatusReportFrequency`` (5m, KubeletConfiguration reference): the node's health is its
  lease, which kwok renews (``--node-lease-duration-seconds``); every ~20 s, 1,000 nodes would
  write 50 node statuses per second into a 2-core machine's API server;
* ``iadeep-pod-running``: a bound pod becomes Running and Ready;
* ``iadeep-pod-succeeded``: a Running pod owned by a Job succeeds after
  ``iadeep.io/fake-run-duration`` (a Go duration, e.g. ``"30s"``; default 1 s), unless it is
  annotated ``iadeep.io/emulated``: the GPU emulator (``iadeep emulator serve``) completes those
  itself through the ``pods/status`` subresource when their emulated work is done (a stage acts
  only on the pods its selector matches; any controller may write the status of the others);
* ``iadeep-pod-failed``: same, but a pod annotated ``iadeep.io/fake-exit-code`` (non-zero) fails;
* ``iadeep-pod-delete``: a pod being deleted is removed at once (there is no container to stop).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GPU_MEM_RESOURCE = "iadeep.io/gpu-mem"
"""Extended resource: GPU memory on the node, in GiB units (one unit = 1 GiB)."""
GPU_COUNT_RESOURCE = "iadeep.io/gpu-count"
"""Extended resource: number of GPU devices on the node."""

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"
FAKE_RUN_DURATION_ANNOTATION = "iadeep.io/fake-run-duration"
FAKE_EXIT_CODE_ANNOTATION = "iadeep.io/fake-exit-code"
EMULATED_ANNOTATION = "iadeep.io/emulated"

NODE_LABELS_GPU = "iadeep.io/gpu-node"
NODE_LABEL_GPU_COUNT = "iadeep.io/gpu-count"
NODE_LABEL_GPU_MEM = "iadeep.io/gpu-mem-gib"
NODE_LABEL_GPU_MODEL = "iadeep.io/gpu-model"
NODE_ANNOTATION_GPUS = "iadeep.io/gpus"


@dataclass
class NodeSpec:
    """One fake GPU node. ``gpu_mem_gib`` is per device; the node advertises
    ``gpus * gpu_mem_gib`` units of :data:`GPU_MEM_RESOURCE` and ``gpus`` of :data:`GPU_COUNT_RESOURCE`."""

    name: str
    gpus: int = 4
    gpu_mem_gib: int = 32
    gpu_model: str = "fake-v100-32gb"
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        """The Node object (status included: the apiserver keeps a node's status on create)."""
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "1Ti",
            GPU_MEM_RESOURCE: str(self.gpus * self.gpu_mem_gib),
            GPU_COUNT_RESOURCE: str(self.gpus),
        }
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            NODE_LABELS_GPU: "true",
            NODE_LABEL_GPU_COUNT: str(self.gpus),
            NODE_LABEL_GPU_MEM: str(self.gpu_mem_gib),
            NODE_LABEL_GPU_MODEL: self.gpu_model,
            **self.labels,
        }
        devices = [
            {"index": i, "uuid": f"GPU-{self.name}-{i}", "memGiB": self.gpu_mem_gib, "model": self.gpu_model}
            for i in range(self.gpus)
        ]
        annotations = {
            KWOK_NODE_ANNOTATION: "fake",
            "node.alpha.kubernetes.io/ttl": "0",
            NODE_ANNOTATION_GPUS: json.dumps(devices, separators=(",", ":")),
            **self.annotations,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": annotations},
            "spec": {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "addresses": [{"type": "Hostname", "address": self.name}],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                    "containerRuntimeVersion": "kwok",
                    "kernelVersion": "fake",
                    "osImage": "iadeep fake GPU node",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        }


def gpu_nodes(
    count: int,
    *,
    prefix: str = "gpu-node-",
    start: int = 0,
    gpus: int = 4,
    gpu_mem_gib: int = 32,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> list[NodeSpec]:
    """``count`` identical node specs named ``{prefix}{start}``, ``{prefix}{start+1}``, ..."""
    return [
        NodeSpec(
            name=f"{prefix}{i}",
            gpus=gpus,
            gpu_mem_gib=gpu_mem_gib,
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
        )
        for i in range(start, start + count)
    ]


_NODE_CONDITIONS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

_POD_FINISHED = """\
{{ $now := Now }}
{{ $root := . }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: PodCompleted
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: PodCompleted
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: @EXIT_CODE@
      reason: @REASON@
      startedAt: {{ $root.status.startTime | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: @PHASE@
"""

_EXIT_CODE_JQ = f'.metadata.annotations["{FAKE_EXIT_CODE_ANNOTATION}"]'
_EXIT_CODE_TEMPLATE = '{{ index $root.metadata.annotations "%s" }}' % FAKE_EXIT_CODE_ANNOTATION
_READY_JQ = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_RUN_DELAY = {
    "durationMilliseconds": 1000,
    "durationFrom": {"jq": {"expression": f'.metadata.annotations["{FAKE_RUN_DURATION_ANNOTATION}"]'}},
}


def _stage(name: str, kind: str, match: list[dict[str, Any]], next_: dict[str, Any], delay: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
    }
    if delay:
        spec["delay"] = delay
    spec["next"] = next_
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status_patch(template: str) -> dict[str, Any]:
    return {"patches": [{"subresource": "status", "root": "status", "template": template}]}


def stages() -> list[dict[str, Any]]:
    """The kwok Stage objects described in the module docstring."""
    finished_ok = _POD_FINISHED.replace("@EXIT_CODE@", "0").replace("@REASON@", "Completed").replace("@PHASE@", "Succeeded")
    finished_err = (
        _POD_FINISHED.replace("@EXIT_CODE@", _EXIT_CODE_TEMPLATE).replace("@REASON@", "Error").replace("@PHASE@", "Failed")
    )
    return [
        _stage(
            "iadeep-node-ready",
            "Node",
            [{"key": _READY_JQ, "operator": "NotIn", "values": ["True"]}],
            _status_patch(_NODE_CONDITIONS + "phase: Running\n"),
        ),
        _stage(
            "iadeep-node-heartbeat",
            "Node",
            [{"key": _READY_JQ, "operator": "In", "values": ["True"]}],
            _status_patch(_NODE_CONDITIONS),
            delay={"durationMilliseconds": 300000, "jitterDurationMilliseconds": 330000},
        ),
        _stage(
            "iadeep-pod-running",
            "Pod",
            [
                _NOT_DELETED,
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": _READY_JQ, "operator": "NotIn", "values": ["True"]},
            ],
            _status_patch(_POD_RUNNING),
        ),
        _stage(
            "iadeep-pod-succeeded",
            "Pod",
            [
                _NOT_DELETED,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
                {"key": _EXIT_CODE_JQ, "operator": "DoesNotExist"},
                {"key": f'.metadata.annotations["{EMULATED_ANNOTATION}"]', "operator": "DoesNotExist"},
            ],
            _status_patch(finished_ok),
            delay=_RUN_DELAY,
        ),
        _stage(
            "iadeep-pod-failed",
            "Pod",
            [
                _NOT_DELETED,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": _EXIT_CODE_JQ, "operator": "Exists"},
            ],
            _status_patch(finished_err),
            delay=_RUN_DELAY,
        ),
        _stage(
            "iadeep-pod-delete",
            "Pod",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"delete": True},
        ),
    ]


def kwok_config_yaml() -> str:
    """A multi-document kwok configuration: just our stages."""
    import yaml

    return yaml.safe_dump_all(stages(), sort_keys=False)
