"""Fixtures for the training workloads: tiny format-correct datasets fetched through the registry
from an HTTP server on 127.0.0.1, and one real etcd per session."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))  # the registry tests' HTTP server

from datasets_support import Entry, FakeServer, Handler, write_manifest  # noqa: E402
from training_support import cifar10_archive, cifar100_archive, movielens_archive, wikitext_archive  # noqa: E402

from iadeep.datasets import fetch  # noqa: E402
from iadeep.state import EtcdStateStore, StateSettings  # noqa: E402
from iadeep.testing.etcd import etcd_server, etcd_settings  # noqa: E402,F401 - pytest finds fixtures by name

torch.set_num_threads(1)  # two cores shared by everyone: keep each test on one


@pytest.fixture(scope="session")
def http_server() -> Iterator[FakeServer]:
    fake = FakeServer(base_url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("BoundHandler", (Handler,), {"fake": fake}))
    httpd.daemon_threads = True
    fake.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield fake
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def datasets(http_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The four training datasets, tiny, fetched and unpacked by the registry into a session cache.

    Returns ``{"root": <cache>/datasets, "manifest": path, "cache": path, "cifar10": arrays, "ratings": table}``.
    """
    tmp = tmp_path_factory.mktemp("training-datasets")
    cifar10, arrays = cifar10_archive()
    ml, ratings = movielens_archive()
    archives = {"cifar-10": ("cifar-10-python.tar.gz", cifar10), "cifar-100": ("cifar-100-python.tar.gz", cifar100_archive()),
                "wikitext-2": ("wikitext-2-v1.zip", wikitext_archive()), "movielens-1m": ("ml-1m.zip", ml)}
    entries = {}
    for name, (file, body) in archives.items():
        url = http_server.add(f"/{name}/{file}", body)
        entries[name] = [Entry(file, url, body, extract=True)]
    manifest = write_manifest(tmp / "registry.toml", entries)
    cache = tmp / "cache"
    for name in archives:
        fetch(name, progress=False, cache_dir=cache, manifest=manifest, mirror="")
    return {"root": cache / "datasets", "manifest": manifest, "cache": cache, "cifar10": arrays, "ratings": ratings}


@pytest.fixture
def store(etcd_settings: StateSettings) -> Iterator[EtcdStateStore]:
    s = EtcdStateStore(etcd_settings)
    yield s
    s.close()
