"""Fixtures for the dataset registry: an HTTP server on 127.0.0.1 and an isolated cache."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from datasets_support import FakeServer, Handler


@pytest.fixture(scope="session")
def _http_server() -> Iterator[FakeServer]:
    fake = FakeServer(base_url="")
    handler = type("BoundHandler", (Handler,), {"fake": fake})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    fake.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def server(_http_server: FakeServer) -> FakeServer:
    """The HTTP server with no routes and no recorded requests."""
    _http_server.routes.clear()
    _http_server.requests.clear()
    return _http_server


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache and no mirror or manifest from the caller's environment."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("IADEEP_CACHE_DIR", str(cache))
    monkeypatch.delenv("IADEEP_DATASET_MIRROR", raising=False)
    monkeypatch.delenv("IADEEP_DATASET_MANIFEST", raising=False)
    return cache
