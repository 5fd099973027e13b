"""The real node's configuration files, image archives and the local overlay, checked as data
(the end-to-end tests run them for real)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import tarfile
import tomllib
from pathlib import Path

import yaml

from iadeep.dev._deploy import LocalDeployment, render_local_overlay
from iadeep.dev._nodeconfig import NodePaths, cni_conflist, containerd_config, kubelet_config
from iadeep.dev._oci import ImageFile, write_image_archive

REPO = Path(__file__).resolve().parents[2]


def _addresses(text: str) -> set[str]:
    return set(re.findall(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", text))


def test_containerd_config_is_toml_on_loopback_and_unix_sockets(tmp_path: Path) -> None:
    paths = NodePaths(tmp_path)
    text = containerd_config(paths, runc=Path("/usr/sbin/runc"), cni_bin_dir=Path("/usr/lib/cni"), sandbox_image="localhost/x/pause:1")
    cfg = tomllib.loads(text)
    assert cfg["version"] == 2
    assert cfg["grpc"]["address"] == str(paths.containerd_socket)
    assert cfg["debug"]["address"] == "" and cfg["metrics"]["address"] == ""
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "localhost/x/pause:1"
    assert cri["stream_server_address"] == "127.0.0.1"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is False and runc["options"]["Root"].startswith(str(tmp_path))
    assert cri["cni"]["conf_dir"] == str(paths.cni_conf_dir)
    for key in ("root", "state"):
        assert cfg[key].startswith(str(tmp_path))
    assert all(ipaddress.ip_address(a).is_loopback for a in _addresses(text))


def test_the_only_cni_network_is_loopback() -> None:
    conf = json.loads(cni_conflist())
    assert [p["type"] for p in conf["plugins"]] == ["loopback"]


def test_kubelet_config_serves_on_loopback_and_allows_cgroup_v1_only_when_asked(tmp_path: Path) -> None:
    paths = NodePaths(tmp_path)
    kw = dict(port=1234, healthz_port=1235, ca_cert=tmp_path / "ca.crt", serving_cert=tmp_path / "s.crt",
              serving_key=tmp_path / "s.key", cgroup_root="/iadeep-node-x")  # fmt: skip
    v1 = kubelet_config(paths, cgroup_v1=True, **kw)  # type: ignore[arg-type]
    v2 = kubelet_config(paths, cgroup_v1=False, **kw)  # type: ignore[arg-type]
    assert v1["failCgroupV1"] is False and "failCgroupV1" not in v2
    assert v1["address"] == v1["healthzBindAddress"] == "127.0.0.1"
    assert v1["readOnlyPort"] == 0 and v1["port"] == 1234 and v1["healthzPort"] == 1235
    assert v1["authentication"]["anonymous"]["enabled"] is False
    assert v1["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert v1["containerRuntimeEndpoint"] == f"unix://{paths.containerd_socket}"
    assert v1["cgroupRoot"] == "/iadeep-node-x" and v1["cgroupDriver"] == "cgroupfs"
    assert v1["podLogsDir"].startswith(str(tmp_path))


def test_image_archive_is_a_deterministic_oci_layout(tmp_path: Path) -> None:
    exe = tmp_path / "tool"
    exe.write_bytes(b"#!/bin/sh\necho hi\n")
    files = {"bin/tool": ImageFile(exe), "bin/alias": ImageFile(link="tool")}
    a = write_image_archive(tmp_path / "a.tar", "localhost/t/tool:1", files, entrypoint=["/bin/tool"])
    b = write_image_archive(tmp_path / "b.tar", "localhost/t/tool:1", files, entrypoint=["/bin/tool"])
    assert a == b and (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (entry,) = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == "localhost/t/tool:1"
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "1"
        blobs = {m.name.rsplit("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.name.startswith("blobs/")}  # type: ignore[union-attr]
    for digest, data in blobs.items():  # content addressed: every blob's name is its hash
        assert hashlib.sha256(data).hexdigest() == digest
    manifest = json.loads(blobs[entry["digest"].split(":")[1]])
    config = json.loads(blobs[manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/bin/tool"] and config["architecture"] == "amd64"
    layer = blobs[manifest["layers"][0]["digest"].split(":")[1]]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as ltar:
        members = {m.name: m for m in ltar.getmembers()}
        assert members["bin/alias"].issym() and members["bin/alias"].linkname == "tool"
        assert ltar.extractfile("bin/tool").read() == exe.read_bytes()  # type: ignore[union-attr]
        assert members["bin/tool"].mode == 0o755


def test_local_overlay_renders_the_cluster_values_on_loopback(tmp_path: Path) -> None:
    d = LocalDeployment(apiserver_port=6443, etcd_endpoints="http://127.0.0.1:2379", extender_port=18888,
                        scheduler_port=18259, throughputs_dir=tmp_path / "gavel")  # fmt: skip
    out = render_local_overlay(d, tmp_path / "k", REPO / "k8s" / "local")
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert (out / kust["resources"][0]).resolve() == (REPO / "k8s" / "local").resolve()
    sched = yaml.safe_load((out / "kube-scheduler-config.yaml").read_text())
    assert sched["extenders"][0]["urlPrefix"] == "http://127.0.0.1:18888/iadeep"
    assert sched["profiles"][0]["schedulerName"] == "iadeep-scheduler"
    patches = list(yaml.safe_load_all((out / "cluster.yaml").read_text()))
    ext = patches[0]["spec"]["template"]["spec"]["containers"][0]
    assert ext["ports"][0]["containerPort"] == 18888
    assert {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"} in ext["env"]
    sch = patches[1]["spec"]["template"]["spec"]["containers"][0]
    assert "--secure-port=18259" in sch["command"] and sch["readinessProbe"]["httpGet"]["port"] == 18259
    text = "".join(p.read_text() for p in out.iterdir()) + (REPO / "k8s" / "local" / "local-node.yaml").read_text()
    assert all(ipaddress.ip_address(a).is_loopback for a in _addresses(text))
    local = yaml.safe_load((REPO / "k8s" / "local" / "kustomization.yaml").read_text())
    assert {i["newName"] for i in local["images"]} == {"localhost/iadeep/extender", "localhost/iadeep/kube-scheduler"}
    for doc in yaml.safe_load_all((REPO / "k8s" / "local" / "local-node.yaml").read_text()):
        spec = doc["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        assert all(c["imagePullPolicy"] == "Never" for c in spec["containers"])


def test_every_service_has_a_dockerfile_with_its_serve_entry_point() -> None:
    from iadeep.dev import SERVICES

    base = (REPO / "images" / "base" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in base
    for s in SERVICES:
        text = (REPO / "images" / s / "Dockerfile").read_text()
        assert f'ENTRYPOINT ["iadeep", "{s}", "serve"]' in text
        assert "FROM ${BASE_IMAGE}" in text
