"""The third-party modules a set of Tandem modules can import, found by reading them.

Follows ``tandem.*`` imports from the given modules through ``services/``, statically:
``import``/``from`` statements anywhere in a module (a function-level import runs on the
path that calls it), ``importlib.import_module("literal")``, and string constants that
name a Tandem module (the engine and KV registries import their entries by name). What
is left is the set of top-level third-party modules, each with the Tandem modules that
import it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[3] / "services"


def third_party_imports(roots: Iterable[str], skip: Iterable[str] = ()) -> dict[str, set[str]]:
    """Top-level third-party module -> the Tandem modules importing it; the ``skip``
    modules (registry entries the path never loads) are not followed."""
    found: dict[str, set[str]] = {}
    seen: set[str] = set(skip)
    todo = list(roots)
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imported in _imported_names(ast.parse(path.read_text()), package):
            top = imported.partition(".")[0]
            if top == "tandem":
                todo.append(imported)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, set()).add(name)
    return found


def module_file(name: str) -> Path | None:
    """The source of a ``tandem.*`` module or package; None for a name that is not one
    (``from tandem.x import SomeClass`` names a class, not a module)."""
    base = SERVICES.joinpath(*name.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported_names(tree: ast.Module, package: str) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            yield module
            # ``from tandem.kv import nixl_transport`` imports a module too.
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("tandem.")
            and module_file(node.value) is not None
        ):
            yield node.value


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )
