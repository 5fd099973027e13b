"""mkdocs hook: the generated reference pages, and a check of every name the pages mention.

Two pages are filled in at build time from the code, so they cannot drift from it:

- ``<!-- generated:settings -->`` (``reference/configuration.md``) becomes one table per settings
  class: every pydantic-settings root class defined in ``iadeep/*/_settings.py`` (and the
  ``JobTemplateSettings`` of :mod:`iadeep.training._jobs`), each field with its environment
  variable, type, default and the description its class docstring's ``Attributes:`` section
  gives; nested groups are flattened with pydantic-settings' ``__`` delimiter. The dataset
  registry's variables come from the ``ENV_*`` constants of :mod:`iadeep.datasets._settings`.
- ``<!-- generated:cli -->`` (``reference/cli.md``) becomes one section per command of the typer
  app :data:`iadeep.cli.app`: its help, usage and options (as ``--help`` prints them).
- ``<!-- generated:design -->`` (``design/index.md``) becomes the list of the dated decision
  records under ``design/``.

Every page is then checked (a warning, which ``mkdocs build --strict`` turns into a failure):

- every ``IADEEP_*`` variable named anywhere on a page is one the settings classes read or one
  the sources name (``iadeep/``, ``tools/``, ``dags/``, ``k8s/``, ``images/``, ``benchmarks/``, the
  Makefile, ``docker-compose.yaml``); a name ending in ``*`` must be the prefix of one;
- every ``iadeep <command> ... --option`` written on a page (in a code block or inline code) names
  an existing command and only options that command has.

So a renamed option or setting fails the build until the pages say the new name.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

from mkdocs.plugins import get_plugin_logger

log = get_plugin_logger("refs")

ROOT = Path(__file__).resolve().parents[2]  # the checkout; on_config re-reads it from the package
MARK_SETTINGS = "<!-- generated:settings -->"
MARK_CLI = "<!-- generated:cli -->"
MARK_DESIGN = "<!-- generated:design -->"
EXTRA_SETTINGS_MODULES = ("iadeep.training._jobs",)
SOURCE_DIRS = ("iadeep", "tools", "dags", "k8s", "images", "benchmarks")
SOURCE_FILES = ("Makefile", "docker-compose.yaml")
SOURCE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".go", "", ".json", ".cfg", ".txt"}

_state: dict[str, Any] = {}
_warned: set[str] = set()


# --------------------------------------------------------------------------- text helpers

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def _md(text: str) -> str:
    """reST-ish docstring text to one line of Markdown for a table cell."""
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    text = text.replace("``", "`")
    text = " ".join(text.split())
    return text.replace("|", "\\|")


def _attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring: field name -> text.

    An entry ``host / port: ...`` documents both names.
    """
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return out
    entry = re.compile(r"^(\s+)([a-z_][a-z0-9_]*(?:\s*/\s*[a-z_][a-z0-9_]*)*)\s*:\s?(.*)$")
    indent = None
    names: list[str] = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith(" "):
            break  # the next section
        m = entry.match(line)
        if m and (indent is None or len(m.group(1)) == indent):
            indent = len(m.group(1))
            names = [n.strip() for n in m.group(2).split("/")]
            for n in names:
                out[n] = m.group(3)
        elif names and line.strip():
            for n in names:
                out[n] += " " + line.strip()
    return out


def _type_name(annotation: Any) -> str:
    """A short, readable type: ``float``, ``Path | None``, ``"nvml" | "emulated"``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a!r}`" for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _default(value: Any) -> str:
    if value is None:
        return "`None`"
    if isinstance(value, Path):
        return f"`{value}`"
    if hasattr(value, "get_secret_value"):
        return "`''`" if not value.get_secret_value() else "(set)"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    return f"`{value!r}`"


# --------------------------------------------------------------------------- settings


def _settings_modules() -> list[str]:
    names = sorted(f"iadeep.{p.parent.name}._settings" for p in (ROOT / "iadeep").glob("*/_settings.py"))
    return names + list(EXTRA_SETTINGS_MODULES)


def _model_classes() -> tuple[type, type]:
    from pydantic import BaseModel
    from pydantic_settings import BaseSettings

    return BaseModel, BaseSettings


def _rows(cls: type, env: str, delim: str, defaults: Any, names: set[str]) -> list[tuple[str, str, str, str]]:
    """(variable, type, default, description) of every leaf field of ``cls``, nested groups flattened."""
    BaseModel, BaseSettings = _model_classes()
    docs = _attributes(cls)
    rows = []
    for name, field in cls.model_fields.items():
        var = f"{env}{name.upper()}"
        ann = field.annotation
        nested = ann if inspect.isclass(ann) and issubclass(ann, BaseModel) else None
        value = getattr(defaults, name, None) if defaults is not None else None
        if nested is not None and issubclass(nested, BaseSettings):
            prefix = nested.model_config.get("env_prefix", "")
            names.update(f"{var}{delim}{n[len(prefix):]}" for n in _all_names(nested))
            rows.append((f"`{var}{delim}*`", nested.__name__, "",
                         _md(docs.get(name, "")) + f" The same fields as `{prefix}*` (below), "
                         f"which are read too."))
            continue
        if nested is not None:
            inner = value if value is not None else (field.get_default(call_default_factory=True))
            rows += _rows(nested, f"{var}{delim}", delim, inner, names)
            continue
        names.add(var)
        if field.is_required():
            default = "required"
        elif defaults is not None:
            default = _default(value)
        else:
            default = _default(field.get_default(call_default_factory=True))
        text = field.description or docs.get(name, "")
        where = f"{cls.__module__}.{cls.__name__}.{name}"
        if not text and where not in _warned:
            _warned.add(where)
            log.warning(f"{where}: no description (Attributes: of its docstring)")
        rows.append((f"`{var}`", _type_name(ann), default, _md(text)))
    return rows


def _all_names(cls: type) -> set[str]:
    names: set[str] = set()
    cfg = cls.model_config
    _rows(cls, cfg.get("env_prefix", ""), cfg.get("env_nested_delimiter") or "__", None, names)
    return names


def settings_markdown(names: set[str]) -> str:
    """The configuration reference; adds every variable it lists to ``names``."""
    _, BaseSettings = _model_classes()
    parts = []
    for modname in _settings_modules():
        mod = importlib.import_module(modname)
        roots = [c for _, c in inspect.getmembers(mod, inspect.isclass)
                 if c.__module__ == modname and issubclass(c, BaseSettings)]
        if modname == "iadeep.datasets._settings":
            parts.append(_datasets_section(mod, names))
            continue
        for cls in sorted(roots, key=lambda c: c.__name__):
            cfg = cls.model_config
            prefix = cfg.get("env_prefix", "")
            delim = cfg.get("env_nested_delimiter") or "__"
            first = (inspect.getdoc(cls) or "").split("\n\n")[0]
            anchor = cls.__name__.lower()
            parts.append(f"## {cls.__name__} (`{prefix}*`) {{#{anchor}}}\n")
            parts.append(f"`{modname.replace('._settings', '')}.{cls.__name__}` (`{modname}`): {_md(first)}\n")
            parts.append(f"Nested groups join with `{delim}`.\n")
            parts.append("| variable | type | default | meaning |\n|---|---|---|---|")
            for row in _rows(cls, prefix, delim, None, names):
                parts.append("| " + " | ".join(row) + " |")
            parts.append("")
    return "\n".join(parts)


def _datasets_section(mod: Any, names: set[str]) -> str:
    resolve_doc = inspect.getdoc(mod.Settings.resolve) or ""
    args = {}
    for m in re.finditer(r"^\s{4}(\w+): (.*(?:\n\s{8,}.*)*)", resolve_doc, re.M):
        args[m.group(1)] = m.group(2)
    out = ["## Dataset registry {#datasets}\n",
           f"`iadeep.datasets` (`{mod.__name__}`): {_md(inspect.getdoc(mod) or '')}\n",
           "| variable | meaning |\n|---|---|"]
    for const, var in sorted((k, v) for k, v in vars(mod).items() if k.startswith("ENV_")):
        key = const[4:].lower()
        text = args.get(key) or next((t for a, t in args.items() if a.startswith(key) or key.startswith(a)), "")
        if not text:
            log.warning(f"{mod.__name__}.{const}: no matching argument in Settings.resolve's docstring")
        names.add(var)
        out.append(f"| `{var}` | {_md(text)} |")
    assert dataclasses.is_dataclass(mod.Settings)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- CLI


def _commands() -> Any:
    import typer.main

    from iadeep.cli import app

    return typer.main.get_command(app)


def _walk(cmd: Any, path: list[str], parent: Any = None):
    """Yield (path, command, context) depth first, groups before their commands."""
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    yield path, cmd, ctx
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _walk(sub, path + [name], ctx)


def cli_markdown() -> tuple[str, dict[tuple[str, ...], set[str] | None]]:
    """The CLI reference, and the command tree: path -> its options (``None`` for a group)."""
    root = _commands()
    tree: dict[tuple[str, ...], set[str] | None] = {}
    parts = []
    for path, cmd, ctx in _walk(root, ["iadeep"]):
        group = hasattr(cmd, "list_commands")
        opts = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("-")}
        opts.add("--help")
        tree[tuple(path)] = opts if not group else opts | {"__group__"}
        if len(path) == 1:
            continue
        level = "#" * min(len(path), 4)
        name = " ".join(path)
        parts.append(f"{level} `{name}` {{#{'-'.join(path)}}}\n")
        helptext = inspect.cleandoc(cmd.help or "")
        if helptext:
            parts.append(helptext.replace("\b\n", "") + "\n")
        pieces = " ".join(cmd.collect_usage_pieces(ctx))
        parts.append(f"```text\n{name} {pieces}\n```\n")
        if group:
            subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
            parts.append("| command | what it does |\n|---|---|")
            for n, sub in subs:
                short = sub.get_short_help_str(limit=200) if sub is not None else ""
                parts.append(f"| [`{name} {n}`](#{'-'.join(path + [n])}) | {_md(short)} |")
            parts.append("")
            continue
        rows = []
        for p in cmd.params:
            rec = p.get_help_record(ctx)
            if rec is None:
                continue
            decl, text = rec
            rows.append(f"| `{decl}` | {_md(text)} |")
        if rows:
            parts.append("| option | meaning |\n|---|---|")
            parts += rows
            parts.append("")
    return "\n".join(parts), tree


# --------------------------------------------------------------------------- checks


def _source_names() -> set[str]:
    pattern = re.compile(r"IADEEP_[A-Z0-9_]*[A-Z0-9]")
    found: set[str] = set()
    files = [ROOT / f for f in SOURCE_FILES]
    for d in SOURCE_DIRS:
        files += [p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    for p in files:
        try:
            found.update(pattern.findall(p.read_text(errors="ignore")))
        except OSError:
            continue
    return found


_ENV = re.compile(r"(?<![A-Za-z0-9_])IADEEP_[A-Z0-9_]*(?:[A-Z0-9]|_\*|\*)")
_FENCE = re.compile(r"^(\s*)(```|~~~).*?^\1\2\s*$", re.M | re.S)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
_ENDS = {"|", ";", "&&", "||", "#", ">", "2>", "&"}


def check_env(markdown: str, where: str) -> None:
    known: set[str] = _state["env"]
    for name in sorted(set(_ENV.findall(markdown))):
        if name.endswith("*"):
            stem = name.rstrip("*")
            if not any(k.startswith(stem) for k in known):
                log.warning(f"{where}: no setting or variable starts with {stem!r} (named as {name})")
        elif name not in known:
            log.warning(f"{where}: {name} is not a setting the code reads (renamed? see reference/configuration.md)")


def _command_lines(markdown: str) -> list[str]:
    lines = []
    for m in _FENCE.finditer(markdown):
        block = m.group(0).split("\n")[1:-1]
        lines += " ".join(line.rstrip("\\") if line.rstrip().endswith("\\") else line + "\n"
                          for line in block).split("\n")
    rest = _FENCE.sub("", markdown)
    lines += [m.group(1) for m in _INLINE.finditer(rest)]
    for line in rest.splitlines():  # indented code blocks
        if line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|")):
            lines.append(line.strip())
    return lines


def check_commands(markdown: str, where: str) -> None:
    tree: dict[tuple[str, ...], set[str] | None] = _state["cli"]
    for line in _command_lines(markdown):
        tokens = re.split(r"\s#", " " + line, maxsplit=1)[0].split()  # a shell comment ends it
        for i, tok in enumerate(tokens):
            if tok != "iadeep" and not tok.endswith("/iadeep"):
                continue
            if i and tokens[i - 1].startswith("-"):
                continue  # an option's value (`-p iadeep`), not the command
            rest = tokens[i + 1:]
            if not rest or not _WORD.match(rest[0]):
                continue
            path = ("iadeep",)
            j = 0
            while j < len(rest) and "__group__" in (tree.get(path) or ()) and _WORD.match(rest[j]):
                if path + (rest[j],) not in tree:
                    log.warning(f"{where}: `{' '.join(path)} {rest[j]}` is not a command (in: {line.strip()})")
                    path = ()
                    break
                path = path + (rest[j],)
                j += 1
            if not path:
                continue
            opts = tree[path] or set()
            for tok2 in rest[j:]:
                if tok2 in _ENDS or tok2.startswith("#"):
                    break
                if tok2.startswith("--") and len(tok2) > 2:
                    opt = tok2.split("=", 1)[0].rstrip(",.;:)`'\"")
                    if opt not in opts:
                        log.warning(f"{where}: `{' '.join(path)}` has no option {opt} (in: {line.strip()})")


def design_index(files: Any) -> str:
    """A list of the dated decision records (``design/YYYY-MM-DD-*.md``), newest first, by title."""
    rows = []
    for f in files.documentation_pages():
        m = re.fullmatch(r"design/(\d{4}-\d{2}-\d{2})-[a-z0-9-]+\.md", f.src_uri)
        if m:
            title = next((line[2:].strip() for line in f.content_string.splitlines() if line.startswith("# ")), f.src_uri)
            rows.append((m.group(1), title, f.src_uri[len("design/"):]))
    rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return "\n".join(f"- {d}: [{t}]({u})" for d, t, u in rows) + "\n"


# --------------------------------------------------------------------------- mkdocs events


def on_config(config: Any) -> Any:
    """Import the package once per build and generate both references."""
    global ROOT
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.find_spec("iadeep")
    if spec is None or spec.origin is None:
        raise RuntimeError("the docs hook needs the iadeep package importable (PYTHONPATH or an install)")
    ROOT = Path(spec.origin).resolve().parents[1]
    names: set[str] = set()
    _state["settings"] = settings_markdown(names)
    _state["cli_md"], _state["cli"] = cli_markdown()
    _state["env"] = names | _source_names()
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the generated blocks, then check the names the page mentions."""
    markdown = markdown.replace(MARK_SETTINGS, _state["settings"]).replace(MARK_CLI, _state["cli_md"])
    if MARK_DESIGN in markdown:
        markdown = markdown.replace(MARK_DESIGN, design_index(files))
    where = page.file.src_uri
    check_env(markdown, where)
    check_commands(markdown, where)
    return markdown
