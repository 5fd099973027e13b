"""Helpers for the dataset-registry tests: a scriptable HTTP server and small manifests."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from iadeep.datasets import DownloadPolicy

# Captured before the autouse fixture clears it, for the test on the real mirror.
ORIGINAL_MIRROR = os.environ.get("IADEEP_DATASET_MIRROR", "")
REPO_ROOT = Path(__file__).resolve().parents[2]

# No waits between retries, three tries: failure tests stay fast.
FAST = DownloadPolicy(attempts=3, initial_wait_s=0, max_wait_s=0, timeout_s=5)


@dataclass
class Route:
    """How the server answers one path.

    Attributes:
        body: The full content.
        status: Answer with this status (and no body) when not 200.
        ranges: Honour ``Range: bytes=N-`` with 206 (else always answer 200 with everything).
        fail_times: Answer 500 this many times first.
        truncate_at: Announce the full Content-Length but close after this many body bytes...
        truncate_times: ...for this many responses.
        headers: Extra headers of every 200 and 206 answer (e.g. ``Content-Encoding``).
        partial_headers: Replace ``headers`` on 206 answers.
        partial: How a 206 is framed: "ok", "multipart" (a multipart/byteranges content type),
            "wrong-start" (a Content-Range one byte later than asked) or "wrong-total" (a complete
            length one byte larger than the body).
        etags: The ``ETag`` of the first, second, ... answer (the last one repeats); a request
            whose ``If-Range`` differs from the current one gets 200 with everything.
        partial_bytes: A 206 covers at most this many bytes (a correct ``Content-Range`` and
            ``Content-Length`` for less than the rest of the file, as a proxy that caps ranges).
        partial_truncate_at: Every 206 announces its length but closes after this many bytes.
    """

    body: bytes = b""
    status: int = 200
    ranges: bool = True
    fail_times: int = 0
    truncate_at: int | None = None
    truncate_times: int = 1_000_000
    headers: dict[str, str] = field(default_factory=dict)
    partial_headers: dict[str, str] | None = None
    partial: str = "ok"
    etags: list[str] = field(default_factory=list)
    partial_bytes: int | None = None
    partial_truncate_at: int | None = None
    answered: int = 0


@dataclass
class FakeServer:
    base_url: str
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, body: bytes = b"", **kwargs: object) -> str:
        """Serve ``path`` (starting with '/'); return its URL."""
        self.routes[path] = Route(body=body, **kwargs)  # type: ignore[arg-type]
        return self.base_url + path

    def hits(self, path: str) -> list[dict[str, str]]:
        """Headers of every request for ``path``, in order."""
        return [headers for p, headers in self.requests if p == path]


class Handler(BaseHTTPRequestHandler):
    server_version = "FakeMirror/1"
    fake: FakeServer  # set on the subclass made per server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence stderr
        pass

    def _plain(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        fake = self.fake
        with fake.lock:
            fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = fake.routes.get(self.path)
            if route is None:
                return self._plain(404)
            if route.fail_times > 0:
                route.fail_times -= 1
                return self._plain(500)
            if route.status != 200:
                return self._plain(route.status)
            truncate = route.truncate_at is not None and route.truncate_times > 0
            route_cut = route.truncate_at or 0
            if truncate:
                route.truncate_times -= 1
            etag = route.etags[min(route.answered, len(route.etags) - 1)] if route.etags else None
            route.answered += 1
        body, start = route.body, 0
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if_range = self.headers.get("If-Range")
        headers = route.headers
        end = len(body)
        if match and route.ranges and (if_range is None or if_range == etag):
            start = int(match.group(1))
            if start >= len(body):
                return self._plain(416, {"Content-Range": f"bytes */{len(body)}"})
            self.send_response(206)
            if route.partial_bytes is not None:
                end = min(end, start + route.partial_bytes)
            if route.partial_truncate_at is not None:
                truncate, route_cut = True, route.partial_truncate_at
            first = start + 1 if route.partial == "wrong-start" else start
            total = len(body) + 1 if route.partial == "wrong-total" else len(body)
            self.send_header("Content-Range", f"bytes {first}-{end - 1}/{total}")
            if route.partial == "multipart":
                self.send_header("Content-Type", "multipart/byteranges; boundary=XX")
            if route.partial_headers is not None:
                headers = route.partial_headers
        else:
            self.send_response(200)
        for key, value in headers.items():
            self.send_header(key, value)
        if etag is not None:
            self.send_header("ETag", etag)
        payload = body[start:end]
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if truncate:
            payload = payload[: route_cut]
            self.close_connection = True
        self.wfile.write(payload)
        self.wfile.flush()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A file of a test manifest: its name, upstream URL, true content and whether to extract."""

    name: str
    url: str
    content: bytes
    extract: bool = False


def write_manifest(path: Path, datasets: dict[str, list[Entry]]) -> Path:
    """Write a registry TOML pinning each entry's content by size and sha256."""
    lines = ["schema = 1", ""]
    for name, entries in datasets.items():
        lines += [
            f'[datasets."{name}"]',
            f'description = "Test dataset {name}."',
            'licence = "CC0-1.0"',
            'citation = "Nobody. A Test. 2024."',
            'homepage = "https://example.invalid/"',
            "",
        ]
        for e in entries:
            lines += [
                f'[[datasets."{name}".files]]',
                f'name = "{e.name}"',
                f'url = "{e.url}"',
                f'sha256 = "{sha256(e.content)}"',
                f"size_bytes = {len(e.content)}",
                f"extract = {'true' if e.extract else 'false'}",
                "",
            ]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def payload(n: int, seed: int = 0) -> bytes:
    """``n`` deterministic, non-repeating-looking bytes."""
    out = bytearray()
    block = seed.to_bytes(8, "little")
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])
