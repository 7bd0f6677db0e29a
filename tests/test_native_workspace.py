"""The native workspace's two promises (issue 55): the core crate (``native/core``) has no Python in its
dependency tree, so another binding can reuse it as it is; and the modules of both crates depend on each other
without cycles, every ``use crate::…``, ``super::…``, ``self::…`` and child-module path pointing down a DAG.

The dependency tree is read from ``native/Cargo.lock`` (every package cargo may build, optional and
target-specific ones included). The module graph is read from the sources, not from rustc: modules come from
``mod name;`` declarations and top-level inline ``mod name { … }`` blocks (a test module is then a node of its
own, above what it tests), and an edge from a module to the deepest module a path of its code names (comments
and string literals stripped). A path through a re-export counts as a use of the re-exporting module, as rustc
resolves it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "native"
CRATE_ROOTS = [NATIVE / name / "src" / "lib.rs" for name in ("core", "python", "jvm")]
CORE = "spark_topic_router_core"
BINDING = "spark_topic_router_python"
JVM_BINDING = "spark_topic_router_jvm"
#: The Java class whose native methods the JVM binding implements, and the export prefix JNI looks them up by.
JAVA_MATCHER = NATIVE.parent / "udfs" / "jvm" / "sparktopicrouter" / "udfs" / "FrozenMatcher.java"
JNI_PREFIX = "Java_sparktopicrouter_udfs_FrozenMatcher_"
#: Packages that bring Python into a build: PyO3's crates and the pyarrow bridge.
PYTHON_PACKAGES = {"pyo3", "pyo3-ffi", "pyo3-build-config", "pyo3-macros", "arrow-pyarrow", "numpy"}

MOD_DECLARATION = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.MULTILINE)
INLINE_MOD = re.compile(r"^(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{\s*$")
USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"(?<![\w:])(\w+)((?:\s*::\s*\w+)+)")


@dataclass
class Module:
    path: tuple[str, ...]
    code: str
    children: set[str] = field(default_factory=set)


def strip_comments_and_strings(source: str) -> str:
    """``source`` with comments, string and char literals blanked (newlines kept); lifetimes stay."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if source.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif source.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if source[i] == "\n" else "")
                    i += 1
        elif raw := re.match(r'b?r(#*)"', source[i:]):
            end = source.find('"' + raw.group(1), i + raw.end())
            out.append('""')
            i = n if end < 0 else end + 1 + len(raw.group(1))
        elif c == '"':
            i += 1
            while i < n and source[i] != '"':
                i += 2 if source[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (char := re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", source[i:])):
            out.append("' '")
            i += char.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def use_paths(tree: str) -> list[str]:
    """The full paths a use tree (``a::{b, c::{d, self}}``, aliases allowed) names; ``self`` names its prefix."""
    paths: list[str] = []

    def walk(prefix: str, text: str) -> None:
        depth, start, parts = 0, 0, []
        for index, char in enumerate(text):
            depth += char == "{"
            depth -= char == "}"
            if char == "," and depth == 0:
                parts.append(text[start:index])
                start = index + 1
        parts.append(text[start:])
        for part in filter(None, parts):
            if "{" in part:
                head, inner = part.split("{", 1)
                walk(prefix + head, inner.rsplit("}", 1)[0])
            else:
                paths.append(prefix[:-2] if part == "self" else prefix + part)

    walk("", re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree)))
    return paths


def load_modules(root: Path) -> dict[tuple[str, ...], Module]:
    """Every module of the crate whose root file is ``root``, by path (the root is ``("crate",)``)."""
    modules: dict[tuple[str, ...], Module] = {}

    def load(path: tuple[str, ...], file: Path, directory: Path) -> None:
        lines = strip_comments_and_strings(file.read_text(encoding="utf-8")).split("\n")
        own: list[str] = []
        index = 0
        while index < len(lines):
            inline = INLINE_MOD.match(lines[index])
            if inline is None:
                own.append(lines[index])
                index += 1
                continue
            end = next(i for i in range(index + 1, len(lines)) if lines[i] == "}")
            child = (*path, inline.group(1))
            modules[child] = Module(child, "\n".join(lines[index + 1 : end]))
            own.append(f"mod {inline.group(1)};")
            index = end + 1
        code = "\n".join(own)
        module = modules[path] = Module(path, code)
        for name in MOD_DECLARATION.findall(code):
            module.children.add(name)
            child = (*path, name)
            if child in modules:
                continue
            # `name/mod.rs` or `name.rs`; either way its own children are in `name/`.
            nested = directory / name
            load(child, nested / "mod.rs" if (nested / "mod.rs").exists() else directory / f"{name}.rs", nested)

    load(("crate",), root, root.parent)
    return modules


def resolve(modules: dict[tuple[str, ...], Module], here: tuple[str, ...], path: list[str]) -> tuple[str, ...] | None:
    """The deepest module ``path`` (as written in module ``here``) names, or None for another crate's."""
    head, rest = path[0], path[1:]
    if head == "crate":
        base: tuple[str, ...] = ("crate",)
    elif head in ("self", "super"):
        base = here
        while head in ("self", "super"):
            base = base[:-1] if head == "super" else base
            if not rest:
                return base
            head, rest = rest[0], rest[1:]
        rest = [head, *rest]
    elif head in modules[here].children:
        base, rest = here, path
    else:
        return None
    for name in rest:
        if name not in modules[base].children:
            break
        base = (*base, name)
    return base


def dependencies(modules: dict[tuple[str, ...], Module]) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {path: set() for path in modules}
    for path, module in modules.items():
        written = [use.split("::") for tree in USE.findall(module.code) for use in use_paths(tree)]
        written += [[head, *re.sub(r"\s+", "", tail).split("::")[1:]] for head, tail in PATH.findall(module.code)]
        for parts in written:
            target = resolve(modules, path, [part for part in parts if part])
            if target is not None and target != path:
                graph[path].add(target)
    return graph


def cycles(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    found: list[list[str]] = []

    def visit(node: tuple[str, ...]) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append("::".join(member))
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def dependency_closure(lock: dict[str, object], package: str) -> set[str]:
    """Every package name ``package`` may depend on, transitively, by the lock file's package entries."""
    entries = lock["package"]
    assert isinstance(entries, list)
    depends = {entry["name"]: {dep.split(" ")[0] for dep in entry.get("dependencies", [])} for entry in entries}
    seen: set[str] = set()
    pending = [package]
    while pending:
        for dep in depends[pending.pop()] - seen:
            seen.add(dep)
            pending.append(dep)
    return seen


def test_the_core_crate_has_no_python_in_its_dependency_tree() -> None:
    lock = tomllib.loads((NATIVE / "Cargo.lock").read_text(encoding="utf-8"))
    assert dependency_closure(lock, CORE) & PYTHON_PACKAGES == set()
    # The binding is where PyO3 is: the closure does find it when it is there.
    assert {"pyo3", "arrow-pyarrow", CORE} <= dependency_closure(lock, BINDING)
    # The JVM binding reuses the core as it is, with neither Python nor a second matcher.
    jvm = dependency_closure(lock, JVM_BINDING)
    assert {"jni", CORE} <= jvm and jvm & PYTHON_PACKAGES == set()


def test_every_java_native_has_its_jni_export_and_nothing_else_is_exported() -> None:
    """A native method without an export fails only when first called (UnsatisfiedLinkError), an export without
    a method is dead code: the two lists must be one."""
    declared = set(re.findall(r"\bstatic native\s+[\w\[\]]+\s+(\w+)\s*\(", JAVA_MATCHER.read_text(encoding="utf-8")))
    source = (NATIVE / "jvm" / "src" / "lib.rs").read_text(encoding="utf-8")
    exported = set(re.findall(rf"\bextern \"system\" fn {JNI_PREFIX}(\w+)\s*<", source))
    assert declared == exported != set()
    assert source.count("#[unsafe(no_mangle)]") == len(exported)
    assert "_" not in "".join(exported)  # JNI would look an underscore up as "_1"


@pytest.mark.parametrize("root", CRATE_ROOTS, ids=lambda root: root.parent.parent.name)
def test_native_modules_form_a_dag(root: Path) -> None:
    modules = load_modules(root)
    assert len(modules) > 1
    found = cycles(dependencies(modules))
    assert not found, "modules that depend on each other in a circle: " + "; ".join(" <-> ".join(c) for c in found)


def write_crate(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text, encoding="utf-8")
    return directory / "lib.rs"


SMALL_CRATE = {
    "lib.rs": "pub mod errors;\npub mod trie;\nmod words;\n",
    "errors.rs": '// use crate::trie::Trie;\npub struct Error;\nconst TEXT: &str = "crate::trie";\n',
    "words.rs": "pub fn split(text: &str) -> Vec<&str> { text.split('.').collect() }\n",
    "trie/mod.rs": "mod node;\nuse crate::errors::Error;\nuse self::node::Node;\n",
    "trie/node.rs": "use crate::words::split;\npub struct Node<'a>(&'a str);\n"
    "\n#[cfg(test)]\nmod tests {\n    use super::super::Trie;\n}\n",
}


def test_the_check_reads_every_kind_of_path(tmp_path: Path) -> None:
    modules = load_modules(write_crate(tmp_path, SMALL_CRATE))
    assert dependencies(modules) == {
        ("crate",): set(),
        ("crate", "errors"): set(),
        ("crate", "words"): set(),
        ("crate", "trie"): {("crate", "errors"), ("crate", "trie", "node")},
        ("crate", "trie", "node"): {("crate", "words")},
        ("crate", "trie", "node", "tests"): {("crate", "trie")},
    }
    assert cycles(dependencies(modules)) == []


@pytest.mark.parametrize(
    ("name", "injected", "cycle"),
    [
        ("errors.rs", "use crate::trie::Trie;\n", ["crate::errors", "crate::trie"]),
        ("words.rs", "fn f() { crate::trie::node::Node::new(); }\n", ["crate::trie::node", "crate::words"]),
        (
            "words.rs",
            "use crate::{errors, trie::{self, node::Node}};\n",
            ["crate::trie", "crate::trie::node", "crate::words"],
        ),
        ("trie/node.rs", "use super::{Trie as Root};\n", ["crate::trie", "crate::trie::node"]),
    ],
)
def test_the_check_finds_an_injected_cycle(tmp_path: Path, name: str, injected: str, cycle: list[str]) -> None:
    files = dict(SMALL_CRATE)
    files[name] = injected + files[name]
    assert cycles(dependencies(load_modules(write_crate(tmp_path, files)))) == [cycle]
