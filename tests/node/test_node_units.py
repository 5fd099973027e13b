"""The real node's configuration files, image archives and the local overlay, checked as data
(the end-to-end tests run them for real)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import shutil
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from iadeep.dev._nodeconfig import UNIX_SOCKET_PATH_MAX, NodePaths, cni_conflist, containerd_config, kubelet_config
from iadeep.dev._oci import ImageFile, write_image_archive
from iadeep.orchestration import COMPONENTS, GPU_NODE_LABEL, prepare_local_rollout, render
from iadeep.orchestration._local import LOCAL_SERVICES, REAL_NODE_LABEL

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


def test_local_overlay_renders_every_component_with_the_cluster_values_on_loopback(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl not found (kustomize is built into it)")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
                                          "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}]}))
    gavel = tmp_path / "simulation_throughputs.json"
    gavel.write_text("{}")
    cluster, overlay = prepare_local_rollout(tmp_path / "r", kubeconfig=kubeconfig, etcd_endpoints="http://127.0.0.1:2379",
                                             etcd_prefix="/t", throughputs_file=gavel)
    assert cluster.apiserver_port == 6443 and (cluster.throughputs_dir / "simulation_throughputs.json").stat().st_mode & 0o004
    docs = render(list(COMPONENTS), kustomization=overlay)
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert not [k for k in objs if k[0] == "PersistentVolumeClaim"]  # no provisioner: the tuner keeps an emptyDir
    # Every workload: host network, the real node only, its own local image, never pulled.
    for kind, name, container in LOCAL_SERVICES.values():
        spec = objs[(kind, name)]["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True and spec["nodeSelector"][REAL_NODE_LABEL] == "true", name
        (c,) = spec["containers"]
        assert c["name"] == container and c["imagePullPolicy"] == "Never", name
        assert c["image"].startswith("localhost/iadeep/") and ("kube-scheduler" in c["image"] or container in c["image"]), c["image"]
        if "ports" in c:  # the port the rollout picked, which the probes follow by name
            assert [p["containerPort"] for p in c["ports"]] == [cluster.ports[next(s for s, v in LOCAL_SERVICES.items() if v[1] == name)]]
    assert objs[("DaemonSet", "iadeep-deviceplugin")]["spec"]["template"]["spec"]["nodeSelector"][GPU_NODE_LABEL] == "true"
    sched = objs[("Deployment", "iadeep-scheduler")]["spec"]["template"]["spec"]["containers"][0]
    assert f"--secure-port={cluster.ports['scheduler']}" in sched["command"]
    assert sched["readinessProbe"]["httpGet"]["port"] == cluster.ports["scheduler"]
    assert {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"} in sched["env"]
    node = objs[("ConfigMap", "iadeep-node")]["data"]
    ext = objs[("ConfigMap", "iadeep-extender")]["data"]
    assert node["IADEEP_ETCD_ENDPOINTS"] == ext["IADEEP_ETCD_ENDPOINTS"] == "http://127.0.0.1:2379"
    assert node["IADEEP_ETCD_PREFIX"] == ext["IADEEP_ETCD_PREFIX"] == "/t"
    assert node["IADEEP_COORDINATOR_TUNER_URL"] == cluster.url("tuner") and node["IADEEP_DEVICEPLUGIN_BACKEND"] == "emulated"
    config = yaml.safe_load(objs[("ConfigMap", "iadeep-scheduler-config")]["data"]["kube-scheduler-config.yaml"])
    assert config["extenders"][0]["urlPrefix"] == cluster.url("extender", "/iadeep")
    assert config["profiles"][0]["schedulerName"] == "iadeep-scheduler"
    gavel_volumes = [v for d in docs if d["kind"] in ("Deployment", "DaemonSet")
                     for v in d["spec"]["template"]["spec"].get("volumes", []) if v["name"] == "gavel"]
    assert len(gavel_volumes) == 3 and all(v["hostPath"]["path"] == str(cluster.throughputs_dir) for v in gavel_volumes)
    # Every container reaches the API server on loopback: without KUBERNETES_SERVICE_HOST/PORT of
    # its own, the kubelet would hand it the 'kubernetes' Service's cluster IP (10.96.0.1), which
    # in-cluster clients connect to.
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                assert env.get("KUBERNETES_SERVICE_HOST") == "127.0.0.1", (d["metadata"]["name"], c["name"])
                assert env.get("KUBERNETES_SERVICE_PORT") == str(cluster.apiserver_port), (d["metadata"]["name"], c["name"])
    # Nothing is reached outside loopback (the Services' cluster IPs are assigned, never used).
    assert all(ipaddress.ip_address(a).is_loopback for a in _addresses(yaml.safe_dump_all(docs)))
    # Nothing machine-specific is committed: the committed overlay names no port of this cluster.
    committed = "".join(f.read_text() for f in (REPO / "k8s" / "local").iterdir())
    assert not any(str(port) in committed for port in cluster.ports.values())


def test_the_real_node_label_is_the_one_the_node_sets() -> None:
    from iadeep.dev import REAL_NODE_LABEL as NODE_SETS

    assert REAL_NODE_LABEL == NODE_SETS


def test_every_service_has_a_dockerfile_with_its_serve_entry_point() -> None:
    from iadeep.dev import SERVICES

    base = (REPO / "images" / "base" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in base
    for s in SERVICES:
        text = (REPO / "images" / s / "Dockerfile").read_text()
        assert f'ENTRYPOINT ["iadeep", "{s}", "serve"]' in text
        assert "FROM ${BASE_IMAGE}" in text


def test_the_kubelet_root_stays_short_enough_for_its_sockets_whatever_the_node_folder(tmp_path: Path) -> None:
    """The kubelet creates and dials unix sockets below its root directory (a device plugin's
    ``device-plugins/iadeep-gpu-count.sock``), and a socket path holds at most 107 bytes (unix(7)).
    A node in a long folder (pytest's, with a worker's ``popen-gwN``: 116 bytes to that socket, and
    the kubelet failed with ``bind: invalid argument``) runs its kubelet in a short folder of its own;
    a short folder keeps the kubelet inside it."""
    from iadeep.dev import Node
    from iadeep.dev._node import KUBELET_ROOT_MAX

    def node(workdir: Path) -> Node:
        return Node(server="https://127.0.0.1:1", pki_dir=tmp_path, admin_kubeconfig=tmp_path / "k", workdir=workdir,
                    log_dir=tmp_path)

    deep = tmp_path / ("x" * 60) / "node-teardown-sigkill"
    far = node(deep)
    assert far.paths.kubelet_dir is not None and len(str(far.paths.kubelet_root)) <= KUBELET_ROOT_MAX
    socket = far.device_plugin_dir / "iadeep-gpu-count.sock"
    assert len(str(socket).encode()) <= UNIX_SOCKET_PATH_MAX < len(str(deep / "kubelet" / "device-plugins" / socket.name))
    assert far.paths.kubelet_root != node(deep).paths.kubelet_root  # one folder per node
    assert not far.paths.kubelet_root.exists()  # made at start, not when the node is described
    near = node(Path("/n"))
    assert near.paths.kubelet_dir is None and near.paths.kubelet_root == Path("/n/kubelet")


def test_teardown_removes_the_kubelet_folder_it_made_and_nothing_a_link_points_at_otherwise(tmp_path: Path) -> None:
    """Teardown follows ``<node folder>/kubelet`` only to a folder the node made
    (``iadeep-kubelet-*``): that one goes with the link; a link a user left to another folder (say
    the host's own kubelet directory) is not followed, and that folder keeps its files."""
    from iadeep.dev._nodeclean import teardown

    made, other = tmp_path / "iadeep-kubelet-0000abcd", tmp_path / "var-lib-kubelet"
    for target in (made, other):
        (target / "pods").mkdir(parents=True)
        (target / "pods" / "state").write_text("x")
    for name, target in (("node-a", made), ("node-b", other)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kubelet").symlink_to(target, target_is_directory=True)
    cgroup = "/iadeep-node-absent0"  # no such cgroup: nothing to kill
    teardown(tmp_path / "node-a", cgroup, timeout=1.0)
    teardown(tmp_path / "node-b", cgroup, timeout=1.0)
    assert not made.exists() and not (tmp_path / "node-a" / "kubelet").is_symlink()
    assert (other / "pods" / "state").read_text() == "x" and (tmp_path / "node-b" / "kubelet").is_symlink()
