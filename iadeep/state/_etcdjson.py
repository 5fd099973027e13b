"""etcd's v3 JSON gateway encoding of the key-value protocol (:mod:`iadeep.state._kv`).

The gateway speaks proto3 JSON: keys and values base64, a prefix as ``key`` plus ``range_end``
(the prefix with its last byte raised by one), compares as ``{"key", "result": "EQUAL",
"target": "MOD"|"CREATE"|"VALUE", <field>}``, and transaction answers as ``ResponseOp``s
(``response_range``, ``response_put``, ``response_delete_range``). Source: etcd API v3,
``rpc.proto`` (``RangeRequest``, ``Compare``, ``RequestOp``, ``ResponseOp``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from iadeep.state._kv import KV, Compare, Delete, Op, Put

__all__ = ["b64", "range_end", "kv_of", "op_json", "compare_json", "response_of"]


def b64(text: str | bytes) -> str:
    """``text`` (UTF-8) or bytes as base64 (proto3 JSON's ``bytes``)."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def range_end(prefix: str) -> str:
    """The ``range_end`` (base64) that makes a range every key starting with ``prefix``."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


def kv_of(d: Mapping[str, Any]) -> KV:
    """A gateway ``KeyValue`` (absent fields: proto3 zero values) as :class:`~iadeep.state._kv.KV`."""
    return KV(
        key=base64.b64decode(d["key"]).decode(),
        value=base64.b64decode(d.get("value", "")),
        mod_revision=int(d.get("mod_revision", 0)),
        create_revision=int(d.get("create_revision", 0)),
        lease=int(d.get("lease", 0)),
    )


def _range(key: str, prefix: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key)}
    if prefix:
        body["range_end"] = range_end(key)
    return body


def op_json(op: Op) -> dict[str, Any]:
    """A protocol operation as the gateway's ``RequestOp``."""
    if isinstance(op, Put):
        body: dict[str, Any] = {"key": b64(op.key), "value": b64(op.value)}
        if op.lease:
            body["lease"] = op.lease
        return {"request_put": body}
    if isinstance(op, Delete):
        return {"request_delete_range": _range(op.key, op.prefix)}
    return {"request_range": _range(op.key, op.prefix)}


_TARGETS = {"mod": ("MOD", "mod_revision"), "create": ("CREATE", "create_revision"), "value": ("VALUE", "value")}


def compare_json(c: Compare) -> dict[str, Any]:
    """A protocol compare as the gateway's ``Compare`` (always ``EQUAL``)."""
    target, field = _TARGETS[c.target]
    expected = b64(c.expected) if isinstance(c.expected, bytes) else c.expected
    return {"key": b64(c.key), "result": "EQUAL", "target": target, field: expected}


def response_of(r: Mapping[str, Any]) -> list[KV] | int | None:
    """A gateway ``ResponseOp`` as :class:`~iadeep.state._kv.TxnResult` holds it."""
    if "response_range" in r:
        return [kv_of(d) for d in r["response_range"].get("kvs", [])]
    if "response_delete_range" in r:
        return int(r["response_delete_range"].get("deleted", 0))
    return None
