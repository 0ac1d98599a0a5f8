"""The product never reaches for development code: no module of ``tandem`` or
``tandem_operator`` imports ``tandem_dev`` (benchmarks, fault beds, test doubles), so the
wheel and the image work without it."""

from __future__ import annotations

import ast
from pathlib import Path

import tandem
import tandem_operator

PRODUCT_ROOTS = (Path(tandem.__file__).parent, Path(tandem_operator.__file__).parent)


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_no_product_module_imports_development_code() -> None:
    offenders = sorted(
        f"{path.relative_to(root.parent)}: {module}"
        for root in PRODUCT_ROOTS
        for path in root.rglob("*.py")
        for module in _imported_modules(path)
        if module == "tandem_dev" or module.startswith("tandem_dev.")
    )
    assert offenders == []


def test_the_scan_sees_an_import_of_development_code(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from tandem_dev.doubles import inprocess\n")
    assert "tandem_dev.doubles" in _imported_modules(module)
