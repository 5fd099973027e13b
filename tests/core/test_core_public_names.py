"""Public names at package borders: code outside a package imports only what the package exports.

A private name is a module path segment or an imported name that starts with ``_`` (dunder names
such as ``__main__`` or ``__version__`` are not private). Private segment ``_s`` of
``iadeep.a._s`` belongs to the package ``iadeep.a``; a private name ``_n`` in ``from iadeep.a.m
import _n`` belongs to the package of module ``iadeep.a.m`` (``iadeep.a``). An import is allowed
when the importing file lies inside the owning package; ``dags/``, ``tools/``, ``benchmarks/``
and ``docs/hooks/`` lie inside none. The check parses every ``.py`` file (imports anywhere,
inside functions too, and ``importlib.import_module("...")`` calls with a literal name); it
imports nothing. Tests (``tests/``) may import the private units of the package they test and are
not scanned.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("iadeep", "dags", "tools", "benchmarks", "docs/hooks")

#: Imports allowed across a border, each with the reason it cannot use a public name:
#: ``(file, imported module) -> reason``. An entry that no longer occurs fails the check too.
ALLOWED: dict[tuple[str, str], str] = {}


def _private(segment: str) -> bool:
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def _inside(package: str | None, owner: str) -> bool:
    return package is not None and (package == owner or package.startswith(owner + "."))


def _is_package(dotted: str, root: Path) -> bool:
    return (root.joinpath(*dotted.split(".")) / "__init__.py").is_file()


def _package_of(path: Path, root: Path) -> str | None:
    """The dotted package a file belongs to (itself for an ``__init__.py``); ``None`` outside ``iadeep/``."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] != "iadeep":
        return None
    return ".".join(parts[:-1])


def _absolute(node: ast.ImportFrom, package: str | None) -> str | None:
    if node.level == 0:
        return node.module
    if package is None:
        return None
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def border_violations(module: str, names: tuple[str, ...], package: str | None, root: Path) -> str | None:
    """The owning package that ``from module import names`` (or ``import module`` with no names)
    reaches into from ``package``, or ``None`` when the import uses public names only."""
    if module != "iadeep" and not module.startswith("iadeep."):
        return None
    segments = module.split(".")
    for i, segment in enumerate(segments[1:], start=1):
        if _private(segment) and not _inside(package, ".".join(segments[:i])):
            return ".".join(segments[:i])
    owner = module if _is_package(module, root) else module.rpartition(".")[0]
    if any(_private(n) for n in names) and not _inside(package, owner):
        return owner
    return None


def private_imports(root: Path, dirs: tuple[str, ...] = SCANNED) -> list[tuple[str, int, str, str]]:
    """``(file, line, imported module, owning package)`` of every cross-border private import."""
    found = []
    for d in dirs:
        for path in sorted((root / d).rglob("*.py")):
            package = _package_of(path, root)
            rel = str(path.relative_to(root))
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                imports: list[tuple[str, tuple[str, ...]]] = []
                if isinstance(node, ast.Import):
                    imports = [(a.name, ()) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    module = _absolute(node, package)
                    if module is not None:
                        imports = [(module, tuple(a.name for a in node.names))]
                elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                      and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                    imports = [(node.args[0].value, ())]
                for module, names in imports:
                    owner = border_violations(module, names, package, root)
                    if owner is not None:
                        found.append((rel, node.lineno, module, owner))
    return found


def test_no_private_imports_across_package_borders() -> None:
    found = private_imports(ROOT)
    unexpected = [f"{f}:{line}: {m} (private to {o})" for f, line, m, o in found if (f, m) not in ALLOWED]
    assert not unexpected, ("imports of private names from outside their package; export the name from the "
                            "package's __init__ (__all__) or use its public name:\n" + "\n".join(unexpected))
    stale = set(ALLOWED) - {(f, m) for f, _, m, _ in found}
    assert not stale, f"ALLOWED lists imports that no longer occur: {sorted(stale)}"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(("files", "expected"), [
    # from a DAG, any private module of iadeep is out of bounds
    ({"dags/d.py": "def f():\n    from iadeep.a._m import x\n"}, [("dags/d.py", 2, "iadeep.a._m", "iadeep.a")]),
    ({"tools/t.py": "import iadeep.a._m\n"}, [("tools/t.py", 1, "iadeep.a._m", "iadeep.a")]),
    # a sibling package reaching in, by module and by private name, and by importlib
    ({"iadeep/b/__init__.py": "", "iadeep/b/_x.py": "from iadeep.a._m import y\n"},
     [("iadeep/b/_x.py", 1, "iadeep.a._m", "iadeep.a")]),
    ({"iadeep/b/__init__.py": "", "iadeep/b/x.py": "from iadeep.a import _helper\n"},
     [("iadeep/b/x.py", 1, "iadeep.a", "iadeep.a")]),
    ({"iadeep/b/__init__.py": "", "iadeep/b/x.py": "import importlib\nimportlib.import_module('iadeep.a._m')\n"},
     [("iadeep/b/x.py", 2, "iadeep.a._m", "iadeep.a")]),
    # inside the owner: allowed, absolute or relative, module or name; dunder modules are public
    ({"iadeep/a/_n.py": "from iadeep.a._m import _y\nfrom ._m import z\n"}, []),
    ({"iadeep/a/sub/__init__.py": "from iadeep.a._m import y\n"}, []),
    ({"benchmarks/b.py": "from iadeep.a import y\nimport iadeep.a.__main__\n"}, []),
    # a private package of the root (iadeep._host) is public to iadeep's subpackages, its modules are not
    ({"iadeep/b/__init__.py": "", "iadeep/b/x.py": "from iadeep._host import free_port\n"}, []),
    ({"iadeep/b/__init__.py": "", "iadeep/b/x.py": "from iadeep._host._net import free_port\n"},
     [("iadeep/b/x.py", 1, "iadeep._host._net", "iadeep._host")]),
    ({"dags/d.py": "from iadeep._host import free_port\n"}, [("dags/d.py", 1, "iadeep._host", "iadeep")]),
])
def test_the_check_finds_exactly_the_border_crossings(tmp_path: Path, files: dict[str, str], expected: list) -> None:
    base = {"iadeep/__init__.py": "", "iadeep/a/__init__.py": "", "iadeep/a/_m.py": "", "iadeep/_host/__init__.py": "",
            "iadeep/_host/_net.py": ""}
    root = _tree(tmp_path, {**base, **files})
    assert private_imports(root, ("iadeep", "dags", "tools", "benchmarks")) == expected


def test_a_private_import_added_to_a_dag_fails_the_check(tmp_path: Path) -> None:
    """The real tree plus one private import in a copy of a DAG: the check names its file and line."""
    dag = ROOT / "dags" / "iadeep_datasets.py"
    copy = tmp_path / "dags" / dag.name
    copy.parent.mkdir()
    copy.write_text(dag.read_text() + "\nfrom iadeep.orchestration._airflow import dataset_dir  # noqa\n")
    (tmp_path / "iadeep").symlink_to(ROOT / "iadeep")
    found = private_imports(tmp_path, ("dags",))
    assert found == [(f"dags/{dag.name}", len(copy.read_text().splitlines()), "iadeep.orchestration._airflow",
                      "iadeep.orchestration")]
