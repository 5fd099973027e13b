"""Property-based fuzzing of dataset manifests (hypothesis, a bounded number of examples): any
TOML text, well-formed or not, either loads into entries that keep the manifest's rules or fails
with a :class:`DatasetError` naming the manifest file; never another exception."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iadeep.datasets import DatasetError
from iadeep.datasets._manifest import ARCHIVE_SUFFIXES, load_manifest

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (st.text(max_size=12) | st.integers(-5, 10**12) | st.booleans() | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from(["https://example.invalid/x.tar.gz", "ftp://x", "a" * 64, "A" * 64, "x.tar", "../up"]))
keys = st.sampled_from(["name", "url", "sha256", "size_bytes", "extract", "description", "licence", "citation",
                        "homepage", "files", "schema", "other"])


def toml_value(value: object) -> str:
    """A scalar or list as TOML (JSON's string escapes are TOML's basic-string escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


file_tables = st.lists(st.dictionaries(keys, scalars, max_size=6), max_size=3)
datasets = st.dictionaries(
    st.text(max_size=8) | st.sampled_from(["philly", "a.b", "x-1"]),
    st.tuples(st.dictionaries(keys, scalars | st.lists(scalars, max_size=2), max_size=6), file_tables),
    max_size=3)


def manifest_text(tables: dict) -> str:
    lines = ["schema = 1"]
    for name, (fields, files) in tables.items():
        lines.append(f"[datasets.{json.dumps(name)}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in fields.items() if k != "files"]
        for f in files:
            lines.append(f"[[datasets.{json.dumps(name)}.files]]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in f.items()]
    return "\n".join(lines) + "\n"


def _check(text: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "registry.toml"
        path.write_bytes(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
        try:
            found = load_manifest(path)
        except DatasetError as exc:
            assert str(path) in str(exc), exc
            return
    for name, info in found.items():
        assert info.name == name and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name)
        assert info.files and len({f.name for f in info.files}) == len(info.files)
        for f in info.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256) and isinstance(f.size_bytes, int) and f.size_bytes >= 0
            assert f.url.startswith(("http://", "https://")) and "/" not in f.name
            assert not f.extract or f.name.endswith(ARCHIVE_SUFFIXES)


@FUZZ
@given(tables=datasets)
def test_structured_manifests(tables: dict) -> None:
    _check(manifest_text(tables))


@FUZZ
@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_arbitrary_text(text: str | bytes) -> None:
    try:
        _check(text)
    except UnicodeEncodeError:  # lone surrogates cannot be written as a file's text at all
        pass


def test_a_valid_entry_loads() -> None:
    entry = {"description": "d", "licence": "CC0-1.0", "citation": "c", "homepage": "https://h"}
    good = {"name": "x.tar.gz", "url": "https://e.invalid/x.tar.gz", "sha256": "a" * 64, "size_bytes": 3, "extract": True}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "registry.toml"
        path.write_text(manifest_text({"toy": (entry, [good])}), encoding="utf-8")
        (info,) = load_manifest(path).values()
    assert info.files[0].extract_dir_name == "x"
