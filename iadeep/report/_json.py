"""Strict JSON for every file a run writes: no ``NaN`` / ``Infinity`` (RFC 8259 has neither).

An undefined number (a mean over no job, the offered load of jobs that all arrive at once)
becomes ``null``, and the document's top-level ``"null_reasons"`` object says why, keyed by the
value's dotted path (``"policies.iadeep.avg_jct_s"``). Callers that know the reason pass it;
otherwise the reason is the generic ``"undefined (was NaN)"`` / ``"undefined (was Infinity)"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["strict_doc", "dumps_strict", "write_json"]


def _walk(value: Any, path: str, reasons: dict[str, str], known: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        return {k: _walk(v, f"{path}.{k}" if path else str(k), reasons, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, f"{path}[{i}]", reasons, known) for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        return _walk(value.tolist(), path, reasons, known)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isfinite(x):
            return x
        reasons[path] = known.get(path) or f"undefined (was {'NaN' if math.isnan(x) else 'Infinity'})"
        return None
    return value


def strict_doc(doc: Mapping[str, Any], reasons: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``doc`` with every non-finite float replaced by ``None`` and ``null_reasons`` filled in.

    Args:
        doc: a JSON-able mapping (numpy scalars and arrays are converted).
        reasons: dotted path -> why that value may be undefined (used when it is).

    Returns:
        A new dict; ``"null_reasons"`` (path -> reason) is added when any value was replaced
        (merged with one already in ``doc``).
    """
    found: dict[str, str] = {}
    out = _walk(dict(doc), "", found, reasons or {})
    if found:
        merged = dict(out.get("null_reasons") or {})
        merged.update(found)
        out["null_reasons"] = merged
    return out


def dumps_strict(doc: Mapping[str, Any], reasons: Mapping[str, str] | None = None, **kw: Any) -> str:
    """:func:`strict_doc` then ``json.dumps(..., allow_nan=False)``.

    Raises:
        ValueError: never for numbers (they are made finite or null); ``TypeError`` for a value
            JSON cannot hold.
    """
    return json.dumps(strict_doc(doc, reasons), allow_nan=False, **kw)


def write_json(path: str | Path, doc: Mapping[str, Any], reasons: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Write ``doc`` as strict, indented JSON atomically (temp file, then rename); returns what was written."""
    clean = strict_doc(doc, reasons)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(clean, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return clean
