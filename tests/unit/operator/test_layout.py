"""The operator's packages import one way: vocabulary and plumbing at the bottom, the
manager at the top (tandem_operator/__init__.py names the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import tandem_operator

ROOT = Path(tandem_operator.__file__).parent
# Lower index = lower layer; a module may import only from its own layer or lower ones.
LAYERS = (
    {"names", "reasons", "metrics", "problems"},
    {"kube"},
    {"render"},
    {"status"},
    {"scaling"},
    {"planning"},
    {"controller"},
    {"manager"},
)


def _layer(unit: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if unit in names)


def _unit(module: str) -> str:
    """``tandem_operator.render.pods`` -> ``render``; ``tandem_operator.names`` -> ``names``."""
    return module.split(".")[1]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tandem_operator":
                found |= {f"tandem_operator.{alias.name}" for alias in node.names}
            elif node.module.startswith("tandem_operator."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tandem_operator.")}
    return found


def test_every_module_belongs_to_a_layer() -> None:
    units = {p.stem if p.parent == ROOT else p.parent.name for p in ROOT.rglob("*.py")}
    units.discard("__init__")
    assert units == set().union(*LAYERS)


def test_imports_point_down_the_layers() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.name == "__init__.py" and relative.parent == Path():
            continue
        unit = relative.parts[0].removesuffix(".py")
        for module in _imports(path):
            if _layer(_unit(module)) > _layer(unit):
                upward.append(f"{relative} imports {module}")
    assert not upward, upward
