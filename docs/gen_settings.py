"""Write the settings reference, docs/reference/settings.md, from the settings dataclasses.

    python docs/gen_settings.py           # (re)write the page
    python docs/gen_settings.py --check   # exit 1 when the committed page differs from what it would write

Every section of ``routing.settings.SECTIONS`` and every field of its dataclass, in declaration order: the TOML
key, the type, the default and what the field is for. The description is the field's attribute docstring (a
string literal right after the field, as griffe, mkdocstrings and Sphinx read them); a field without one falls
back to the ``#:`` comment block above it, then to the comment lines above its key in conf/router.toml. The
sources are read with ``ast``, so nothing but the classes' own modules is imported, and the output depends on
the code alone (no environment, no clock).

Documentation tooling: ``make docs`` runs it and tests/test_docs.py checks its output is committed. The library
never imports it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# `python docs/gen_settings.py` puts docs/ first on sys.path: the checkout's own package must win over any
# installed copy.
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))

from docs import generated_page  # noqa: E402
from routing.settings import SECTIONS  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "settings.md"
CONF = ROOT / "conf" / "router.toml"

#: Python annotations as a reader of a TOML file thinks of them.
TYPE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "tuple[str, ...]": "list of strings",
    "dict[str, str]": "table of strings",
    "Sequence[AclRule]": "list of rules",
    "Secret": "secret",
}

ROLE = re.compile(r":(?:func|data|attr|mod|class|meth|exc|obj):`~?([^`]+)`")


@dataclasses.dataclass(frozen=True)
class Field:
    section: str
    name: str
    type: str
    default: str
    doc: str
    #: How the setting is given other than in the file: ``env`` (``ROUTER__...``), ``table`` (entries, from
    #: ``--set section.key.entry=value`` too) or ``secret`` (never in a file, a variable or a flag).
    kind: str = "env"

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"


def markdown(text: str) -> str:
    """reStructuredText roles and ``double`` literals of a docstring as Markdown code spans."""
    text = ROLE.sub(lambda match: f"``{match.group(1)}``", text)
    return text.replace("``", "`")


def comment_block(lines: list[str], index: int, marker: str) -> str:
    """The contiguous comment lines starting with ``marker`` right above line ``index`` (0-based), as one text."""
    block: list[str] = []
    while index > 0 and lines[index - 1].strip().startswith(marker):
        index -= 1
        block.insert(0, lines[index].strip()[len(marker) :].strip())
    return "\n".join(block)


def class_node(cls: type[Any]) -> tuple[ast.ClassDef, list[str]]:
    source = Path(inspect.getsourcefile(cls) or "")
    text = source.read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node, text.splitlines()
    raise LookupError(f"class {cls.__qualname__} not found at the top level of {source}")


def code_docs(cls: type[Any]) -> tuple[dict[str, str], dict[str, str]]:
    """{field: description} from attribute docstrings or ``#:`` blocks, and {field: annotation text}."""
    node, lines = class_node(cls)
    docs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for position, statement in enumerate(node.body):
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        name = statement.target.id
        annotations[name] = ast.unparse(statement.annotation)
        following = node.body[position + 1] if position + 1 < len(node.body) else None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[name] = inspect.cleandoc(following.value.value)
        else:
            block = comment_block(lines, statement.lineno - 1, "#:")
            if block:
                docs[name] = block
    return docs, annotations


KEY_LINE = re.compile(r"^(?P<commented>#\s*)?(?P<key>[a-z_][a-z0-9_]*)\s*=")
SECTION_LINE = re.compile(r"^\[(?P<section>[a-z_.]+)\]\s*$")


def conf_keys(path: Path = CONF) -> Iterator[tuple[str, str, bool, str]]:
    """(section, key, commented out, comment lines above it) of every key line of a settings file.

    A commented-out key line (``# sasl_port = 19094``) documents an optional key that has no TOML spelling of
    its default; a table section (``[spark.conf]``) is the key ``conf`` of ``[spark]``.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    section = ""
    for index, line in enumerate(lines):
        header = SECTION_LINE.match(line)
        if header:
            section = header.group("section")
            parent, dot, table = section.rpartition(".")
            if dot:
                yield parent, table, False, ""
            continue
        match = KEY_LINE.match(line)
        if match and section and "." not in section:
            comments = [text for text in comment_block(lines, index, "#").splitlines() if not KEY_LINE.match(text)]
            yield section, match.group("key"), bool(match.group("commented")), "\n".join(comments)


def toml_value(value: object) -> str:
    """``value`` as it is spelled in a TOML file."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"no TOML spelling for {value!r}")


def default_of(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise ValueError(f"setting {field.name} has no default")


def type_of(cls: type[Any], name: str, annotation: str) -> str:
    optional = annotation.endswith(" | None")
    base = annotation.removesuffix(" | None")
    text = TYPE_NAMES.get(base, base)
    if name in getattr(cls, "TABLES", ()):
        text = "path, URI or table name"
    elif name in getattr(cls, "URI_PATHS", ()):
        text = "path or URI"
    elif name in getattr(cls, "PATHS", ()):
        text = "path"
    return f"{text}, optional" if optional else text


def kind_of(annotation: str) -> str:
    base = annotation.removesuffix(" | None")
    if base == "Secret":
        return "secret"
    return "table" if base.startswith("dict[") else "env"


def collect() -> list[tuple[str, str, list[Field]]]:
    """(section, its description, its fields) of every settings section."""
    comments = {(section, key): text for section, key, _, text in conf_keys()}
    sections = []
    for section, cls in SECTIONS.items():
        docs, annotations = code_docs(cls)
        fields = [
            Field(
                section=section,
                name=field.name,
                type=type_of(cls, field.name, annotations.get(field.name, str(field.type))),
                default=toml_value(default_of(field)),
                doc=docs.get(field.name) or comments.get((section, field.name), ""),
                kind=kind_of(annotations.get(field.name, "")),
            )
            for field in dataclasses.fields(cls)
        ]
        sections.append((section, inspect.cleandoc(cls.__doc__ or "") if _own_doc(cls) else "", fields))
    return sections


def _own_doc(cls: type[Any]) -> bool:
    """Whether the class has a docstring of its own (a dataclass without one gets its signature as ``__doc__``)."""
    node, _ = class_node(cls)
    return ast.get_docstring(node) is not None


HEADER = """\
<!-- Generated by `python docs/gen_settings.py` (`make docs`) from the settings dataclasses: do not edit. -->
# Settings reference

Every setting of every section, in the order the code declares them. Set one in the settings file
(`conf/router.toml`, another with `--conf FILE` or `ROUTER_CONF`), in the environment as
`ROUTER__<SECTION>__<KEY>`, or on a job's command line as `--set section.key=value`; the flag wins over the
environment, which wins over the file. Loading is strict: an unknown key or a value out of range is a one-line
error naming the key (exit status 2). Integers lie in 1..2^31-1 unless the description says otherwise.

A relative path in a settings file is relative to that file's directory (`conf/router.toml` writes
`../var/...`); a default below, or a path from the environment or a flag, is relative to the current
directory. Settings typed *path or URI* may also be `s3a://`, `abfss://` or `hdfs://` URIs; *table name*
settings may name a catalog table (`schema.table`, `catalog.schema.table`, see
[Tables by path or by name](../deployment.md#tables-by-path-or-by-name)).
"""


def render() -> str:
    parts = [HEADER]
    for section, description, fields in collect():
        parts.append(f"\n## `[{section}]` {{#{section}}}\n")
        if description:
            parts.append(f"\n{markdown(description)}\n")
        for field in fields:
            parts.append(f"\n### `{field.key}` {{#{field.key}}}\n\n")
            if field.kind == "secret":
                where = "never in a settings file, a `ROUTER__` variable or `--set`"
            elif field.kind == "table":
                where = f"one entry: `--set {field.key}.<key>=<value>`"
            else:
                where = f"environment `ROUTER__{field.section.upper()}__{field.name.upper()}`"
            parts.append(f"*{field.type}*, default `{field.default}` · {where}\n")
            if field.doc:
                parts.append(f"\n{markdown(field.doc)}\n")
    return "".join(parts)


def stale(page: Path = PAGE) -> str | None:
    """The one-line complaint when ``page`` is not what :func:`render` writes, else None."""
    return generated_page.stale(page, render)


def main(argv: list[str] | None = None) -> int:
    undocumented = [field.key for _, _, fields in collect() for field in fields if not field.doc]
    if undocumented:
        print(f"settings without a description: {', '.join(undocumented)}", file=sys.stderr)
    return generated_page.main(
        argv,
        description="Write docs/reference/settings.md from the settings dataclasses.",
        page=PAGE,
        root=ROOT,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
