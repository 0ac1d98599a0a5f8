"""The invalid-InferenceCluster corpus (the YAML files beside this one), as test cases.

Each case is a JSON merge patch (RFC 7386) over manifests/examples/reference-cpu.yaml
(``patch``) or, for immutable fields, an update of that base (``update``), the field path
both the API server and ``tandem validate`` must name, and optionally part of the message.
Loaded by path from tests/unit and tests/e2e (test modules cannot import each other).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
BASE = HERE.parents[2] / "manifests" / "examples" / "reference-cpu.yaml"
_REPEAT = re.compile(r"^(.)\*(\d+)$")


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    field: str
    message: str | None = None
    bound: str | None = None
    patch: Any = None
    update: Any = None

    @property
    def id(self) -> str:
        return f"{self.file.removesuffix('.yaml')}/{self.name}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return _expand(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _expand(value: Any) -> Any:
    """'c*N' is the character c repeated N times (keeps long strings out of the files)."""
    match = _REPEAT.match(value) if isinstance(value, str) else None
    return match.group(1) * int(match.group(2)) if match else value


def base_document() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(BASE.read_text())
    return doc


def documents(case: Case) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the document to submit, the object it updates or None for a create)."""
    base = base_document()
    if case.update is not None:
        return merge_patch(base, case.update), base
    return merge_patch(base, case.patch), None


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(HERE.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text()):
            cases.append(Case(file=path.name, **raw))
    return cases
