"""Helpers of the metrics tests: reading metric names out of PromQL, the sample names a
``/metrics`` text can carry, and serving an app on loopback."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from iadeep._host._net import free_port

# PromQL words that are not metric names (functions and aggregations are recognised by their "(").
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
             "summary": ("_count", "_sum", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names an instant or range PromQL expression selects.

    Strings, label matchers ``{...}``, ranges and subqueries ``[...]``, the label lists of
    ``by``/``without``/``on``/``ignoring``/``group_*`` and Grafana's ``$variables`` are removed;
    what is left are names, keywords, numbers and function calls (a name followed by ``(``).

    Raises:
        ValueError: unbalanced braces or brackets (not an expression this reads).
    """
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\$\{?\w+\}?", "", s)
    for opening, closing in ("{}", "[]"):
        if s.count(opening) != s.count(closing):
            raise ValueError(f"unbalanced {opening}{closing} in {expr!r}")
        s = re.sub(rf"\{opening}[^{re.escape(closing)}]*\{closing}", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", s):
        if not m.group(2) and m.group(1) not in _KEYWORDS:
            names.add(m.group(1))
    return names


def exported(metrics_text: str) -> set[str]:
    """Every sample name a ``/metrics`` text can carry: each family's name with its type's suffixes
    (a labelled family with no sample yet still names itself and its type)."""
    return {f.name + suffix for f in text_string_to_metric_families(metrics_text) for suffix in _SUFFIXES[f.type]}


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread (lifespan included); yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        while not server.started:  # started, or the thread ended (a failed start): no time threshold
            assert thread.is_alive(), f"uvicorn did not start on port {port}"
            thread.join(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def scrape(url: str) -> str:
    resp = httpx.get(f"{url}/metrics", timeout=10, trust_env=False)  # loopback: never through a proxy
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain"), resp
    return resp.text
