"""Pydantic's attribute docstrings, read once per source file instead of once per class.

The ACP SDK's schema models set ``use_attribute_docstrings``: each field's description is the
string literal under it in the source. On Python < 3.13, pydantic finds a class's source by
walking the stack and calling ``inspect.getmodule`` on every frame (a scan of
``sys.modules`` whenever a frame's file is not in its cache), then tokenizes the class's block
(``inspect.getblock``) and parses it. For the SDK's ~280 models that is about a fifth of the
CPU of starting the example agent, and of what ``acpctl serve`` imports (docs/benchmarks.md,
"Agent start").

:func:`install` puts a function in its place that parses each source file once, keeps each
class statement's answer, and answers from those: the same frame (the innermost one running
code of the class's file), the same class statement (the one that starts on that frame's
line), pydantic's own visitor over the same body, so the same descriptions
(``tests/unit/test_attribute_docstrings.py`` compares every SDK model's). Anything it cannot
place (no file, no class statement on that line, a tree that cannot be parsed, pydantic
internals not as expected) goes to pydantic's own function: the worst case is pydantic's
speed.

It replaces a function inside pydantic, so only the project's own programs install it
(``acpctl``, the example agent), before they import the SDK; importing ``control_plane`` as a
library never does. ``acpctl`` uses :func:`install_on_import`, which waits for pydantic to be
imported by a command that needs it: ``acpctl --help`` loads no pydantic at all.
``ACPCTL_FAST_DOCSTRINGS=0`` leaves pydantic as it is.
"""

from __future__ import annotations

import ast
import importlib.abc
import linecache
import os
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import Any

# Files already read, by file name: for each line a class statement can start on (its
# ``class`` line and each decorator's), the classes starting there, by name, with their
# attributes' docstrings. The syntax tree itself is dropped once read: kept, its ~100,000
# nodes of the SDK's schema made every later garbage collection of the process slower.
_files: dict[str, dict[int, dict[str, dict[str, str]]]] = {}


def install() -> bool:
    """Put the once-per-file reader in pydantic's place; true when it is in place (also when
    it already was). False, and pydantic untouched, when this pydantic's internals are not
    the ones it was written against or ``ACPCTL_FAST_DOCSTRINGS=0``."""
    if os.environ.get("ACPCTL_FAST_DOCSTRINGS", "1") == "0":
        return False
    try:
        from pydantic._internal import _docs_extraction, _fields
    except ImportError:
        return False
    original = getattr(_fields, "extract_docstrings_from_cls", None)
    visitor_type = getattr(_docs_extraction, "DocstringVisitor", None)
    if not callable(original) or visitor_type is None:
        return False
    if getattr(original, "reads_each_file_once", False):
        return True

    def extract_docstrings_from_cls(cls: type[Any], use_inspect: bool = False) -> dict[str, str]:
        try:
            found = _from_source(cls, use_inspect, visitor_type)
        except Exception:  # any surprise: pydantic's own answer, never a failed class
            found = None
        return original(cls, use_inspect=use_inspect) if found is None else found

    extract_docstrings_from_cls.reads_each_file_once = True  # type: ignore[attr-defined]
    setattr(_fields, "extract_docstrings_from_cls", extract_docstrings_from_cls)  # noqa: B010
    return True


_FIELDS = "pydantic._internal._fields"


def install_on_import() -> None:
    """:func:`install` now if pydantic's fields module is loaded, else right after it is."""
    if _FIELDS in sys.modules:
        install()
    elif not any(isinstance(finder, _InstallAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallAfterImport())


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands pydantic's fields module the spec the other finders give,
    with a loader that installs the reader once the module has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _FIELDS:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenInstall(spec.loader)
                return spec
        return None


class _ThenInstall(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        install()

    def __getattr__(self, name: str) -> Any:
        # get_source, get_code, get_filename...: what inspect and linecache ask a loader.
        return getattr(self._loader, name)


def _from_source(cls: type[Any], use_inspect: bool, visitor_type: Any) -> dict[str, str] | None:
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str):
        return None
    if use_inspect or sys.version_info >= (3, 13):
        # Pydantic asks ``inspect`` here, which finds the class by ``__firstlineno__``.
        line = getattr(cls, "__firstlineno__", None)
        if not isinstance(line, int):
            return None
        return _docstrings_at(filename, line, cls.__name__, visitor_type)
    return _docstrings_in_running_frame(filename, cls.__name__, visitor_type)


def _docstrings_in_running_frame(
    filename: str, name: str, visitor_type: Any
) -> dict[str, str] | None:
    """What pydantic's frame walk finds: the innermost frame running code of ``filename``
    whose current line starts a class statement named ``name``."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            found = _docstrings_at(filename, frame.f_lineno, name, visitor_type)
            if found is not None:
                return found
        frame = frame.f_back
    return None


def _docstrings_at(filename: str, line: int, name: str, visitor_type: Any) -> dict[str, str] | None:
    classes = _files.get(filename)
    if classes is None:
        classes = _files[filename] = _read(filename, visitor_type)
    found = classes.get(line, {}).get(name)
    return None if found is None else dict(found)


def _read(filename: str, visitor_type: Any) -> dict[int, dict[str, dict[str, str]]]:
    # linecache is where inspect (and so pydantic) reads source from: the same text.
    source = "".join(linecache.getlines(filename))
    classes: dict[int, dict[str, dict[str, str]]] = {}
    if not source:
        return classes
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return classes
    for node in _class_statements(tree.body):
        visitor = visitor_type()
        visitor.generic_visit(node)
        for line in {node.lineno, *(decorator.lineno for decorator in node.decorator_list)}:
            # Two classes of one name on one line cannot both be placed: pydantic's own
            # function decides for them (its answer is the first one's too).
            classes.setdefault(line, {}).setdefault(node.name, visitor.attrs)
    return classes


def _class_statements(statements: list[ast.stmt]) -> Iterator[ast.ClassDef]:
    # A class statement is a statement: only statement lists are walked, never the far more
    # numerous expressions (a walk of the whole tree cost as much as the parse).
    for node in statements:
        if isinstance(node, ast.ClassDef):
            yield node
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                yield from _class_statements(nested)
        for handler in getattr(node, "handlers", ()):
            yield from _class_statements(handler.body)
        for case in getattr(node, "cases", ()):
            yield from _class_statements(case.body)
