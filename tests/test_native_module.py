"""The surface of ``routing._native``: every public symbol is wrapped (or deliberately private), and the
hand-written ``_native.pyi`` declares exactly what the module has."""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path

import pytest

import routing
from routing import _native
from routing.matchers import native

STUB = Path(routing.__file__).with_name("_native.pyi")


def public(names: list[str]) -> set[str]:
    return {name for name in names if not name.startswith("_")}


def stub_declarations() -> tuple[set[str], dict[str, set[str]]]:
    """Top-level names of the stub, and for each class its declared members."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = {
                item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names, members


def test_every_native_symbol_is_wrapped_or_declared_private() -> None:
    module_names = public(dir(_native))
    assert module_names == set(native.NATIVE_WRAPPERS) | native.PRIVATE_NATIVE
    assert not set(native.NATIVE_WRAPPERS) & native.PRIVATE_NATIVE
    for native_name, wrapper_name in native.NATIVE_WRAPPERS.items():
        wrapper = getattr(native, wrapper_name)
        original = getattr(_native, native_name)
        if inspect.isclass(original) and not issubclass(original, BaseException):
            # A wrapper class, not the raw native class re-exported.
            assert wrapper is not original, native_name
            assert wrapper.__module__ == "routing.matchers.native"
        else:
            assert wrapper is original, native_name
        assert wrapper_name in native.__all__


def test_stub_declares_exactly_the_module() -> None:
    names, members = stub_declarations()
    assert names == public(dir(_native))
    for class_name, declared in members.items():
        cls = getattr(_native, class_name)
        if issubclass(cls, BaseException):
            continue
        # Single-underscore hooks (e.g. the benchmark one) are declared too; dunders only __len__.
        actual = {name for name in dir(cls) if not name.startswith("__")} | ({"__len__"} & set(dir(cls)))
        assert declared - {"__init__"} == actual, class_name
        # Declaring __init__ means Python code may construct it; otherwise only native code does.
        if "__init__" in declared:
            cls()
        else:
            with pytest.raises(TypeError):
                cls()


def test_native_classes_live_in_the_private_module() -> None:
    # The real import path, so errors raised on a Spark executor unpickle on the driver.
    for name in ("CsTrie", "Snapshot", "FrozenMatcher", "FrozenFormatError", "BatchLimitError", "BulkRowError"):
        assert getattr(_native, name).__module__ == "routing._native"


def test_native_errors_survive_pickling() -> None:
    with pytest.raises(native.FrozenFormatError) as caught:
        native.FrozenMatcher.from_bytes(b"junk")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is native.FrozenFormatError
    assert str(copy) == str(caught.value)
