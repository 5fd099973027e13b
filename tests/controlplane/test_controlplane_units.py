"""The control-plane fixture's pieces that need no running cluster."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from iadeep.dev import GPU_COUNT_RESOURCE, GPU_MEM_RESOURCE, ControlPlaneError, NodeSpec, find_binaries, gpu_nodes
from iadeep.dev._cluster import load_scheduler_config
from iadeep.dev._kwok import kwok_config_yaml

REPO = Path(__file__).resolve().parents[2]


def test_pki_chain_names_and_identities(tmp_path):
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.x509.oid import NameOID

    from iadeep.dev._pki import generate

    pki = generate(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    serving.verify_directly_issued_by(ca)
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "localhost" in san.get_values_for_type(x509.DNSName)

    admin = x509.load_pem_x509_certificate(pki.clients["admin"].cert.read_bytes())
    admin.verify_directly_issued_by(ca)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    sched = x509.load_pem_x509_certificate(pki.clients["kube-scheduler"].cert.read_bytes())
    assert sched.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-scheduler"
    assert oct(pki.sa_key.stat().st_mode & 0o777) == "0o600"
    assert b"PUBLIC KEY" in pki.sa_pub.read_bytes()


def test_node_manifest_advertises_gpu_resources():
    node = NodeSpec(name="n0", gpus=8, gpu_mem_gib=40, labels={"zone": "a"}, annotations={"x": "y"}).manifest()
    for field in ("capacity", "allocatable"):
        assert node["status"][field][GPU_MEM_RESOURCE] == "320"
        assert node["status"][field][GPU_COUNT_RESOURCE] == "8"
        assert "nvidia.com/gpu" not in node["status"][field]
    meta = node["metadata"]
    assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert meta["annotations"]["x"] == "y"
    assert meta["labels"]["zone"] == "a"
    assert meta["labels"]["iadeep.io/gpu-count"] == "8"
    devices = yaml.safe_load(meta["annotations"]["iadeep.io/gpus"])
    assert [d["index"] for d in devices] == list(range(8))
    assert {d["memGiB"] for d in devices} == {40}


def test_gpu_nodes_names_are_sequential():
    assert [n.name for n in gpu_nodes(3, prefix="g-", start=2)] == ["g-2", "g-3", "g-4"]


def test_kwok_stages_parse():
    docs = list(yaml.safe_load_all(kwok_config_yaml()))
    names = [d["metadata"]["name"] for d in docs]
    assert names == [
        "iadeep-node-ready",
        "iadeep-node-heartbeat",
        "iadeep-pod-running",
        "iadeep-pod-succeeded",
        "iadeep-pod-failed",
        "iadeep-pod-delete",
    ]
    assert all(d["kind"] == "Stage" and d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for d in docs)
    failed = docs[4]["spec"]["next"]["patches"][0]["template"]
    assert '$root.metadata.annotations "iadeep.io/fake-exit-code"' in failed


def test_scheduler_config_sources(tmp_path):
    assert load_scheduler_config(None) == {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
    }
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    for source in (path, str(path), text, yaml.safe_load(text)):
        assert load_scheduler_config(source)["profiles"] == [{"schedulerName": "x"}]
    with pytest.raises(ControlPlaneError):
        load_scheduler_config("- a list\n- not a mapping\n")


def test_missing_binaries_say_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv("IADEEP_CONTROLPLANE_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="make controlplane"):
        find_binaries()


def test_build_script_reports_its_directory(tmp_path):
    script = REPO / "tools" / "controlplane" / "build.sh"
    env = dict(os.environ, IADEEP_CONTROLPLANE_DIR=str(tmp_path / "bin"))
    out = subprocess.run(["bash", str(script), "--print-dir"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if k != "IADEEP_CONTROLPLANE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    out = subprocess.run(["bash", str(script), "--print-dir"], env=env, capture_output=True, text=True, check=True)
    pins = Path(out.stdout.strip())
    assert pins.parent == tmp_path / "cache" / "iadeep" / "controlplane"
    assert len(pins.name) == 16


def test_free_port_never_hands_a_live_process_s_port_to_another(tmp_path, monkeypatch):
    """Two pytest workers were once handed the same loopback port (one's kube-scheduler then called
    the other's extender). A port handed to a live process (a real child process here) is refused
    to every other caller, and taken over once that process has ended."""
    import sys
    import tempfile

    from iadeep._host import _net

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    child = subprocess.Popen([sys.executable, "-c", "from iadeep._host import free_port; import sys, time; "
                              "print(free_port(), flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        port = int(child.stdout.readline())
        folder = tmp_path / _net.CLAIMS_DIR_NAME
        assert (folder / str(port)).read_text() == str(child.pid)
        assert not _net._claim(folder, port)  # the child lives: refused
        # the OS offers that port first: free_port moves on to another
        offers = iter([port, port, port + 1 if port < 65535 else port - 1])
        monkeypatch.setattr(_net, "_os_port", lambda: next(offers))
        other = _net.free_port()
        assert other != port
        assert not _net._claim(folder, other)  # handed to this process now: not twice either
    finally:
        child.communicate("")
    assert _net._claim(folder, port)  # the child ended: its claim is taken over
    assert (folder / str(port)).read_text() == str(os.getpid())


class _Stream:
    """The two methods of a ``urllib3`` response that :func:`watch_lines` uses, over chosen chunks
    (the chunk boundaries are what this test controls; the e2e tests read real API server watches)."""

    def __init__(self, chunks):
        self.chunks, self.released = chunks, 0

    def stream(self, amt, decode_content):
        yield from self.chunks

    def release_conn(self):
        self.released += 1


def test_watch_lines_joins_events_split_across_chunks_and_always_releases_the_connection():
    from iadeep._host import watch_lines

    resp = _Stream([b'{"type":"ADD', b'ED"}\n\n{"type":', b'"MODIFIED"}\n{"type":"DELETED"}'])
    assert list(watch_lines(resp)) == [b'{"type":"ADDED"}', b'{"type":"MODIFIED"}', b'{"type":"DELETED"}']
    assert resp.released == 1
    early = _Stream([b"a\nb\nc\n"])
    lines = watch_lines(early)
    assert next(lines) == b"a"
    lines.close()  # a caller that stops early (the watch's timeout, a 410) still frees the connection
    assert early.released == 1
