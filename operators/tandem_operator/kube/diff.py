"""Does a live object already hold everything we would apply? (pure)

Server-side apply is idempotent, but each call still costs an API round trip and, at a
hundred clusters, those round trips dominate. The controller applies an object only when
:func:`needs_apply` says the live copy differs from the desired one:

- every field we render must be present in the live object with the same value (the
  server may add defaults and other managers' fields: extra live fields are fine);
- a field we render with a zero value (false, 0, "", empty) may be absent from the live
  object: Kubernetes' Go types omit empty values;
- the ``tandem.dev/applied-hash`` annotation is part of what we render, so any change of
  the desired object, including a field we *stopped* rendering, changes the hash and
  forces an apply (which then releases the dropped field).

When in doubt it answers True; an unnecessary apply is harmless.
"""

from __future__ import annotations

from typing import Any


def contains(live: Any, desired: Any) -> bool:
    """True when ``desired`` is a sub-tree of ``live`` (lists must match item by item)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(contains(live[k], v) if k in live else _is_zero(v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(a, b) for a, b in zip(live, desired, strict=True))
    if isinstance(desired, bool) or isinstance(live, bool):
        return live is desired
    if isinstance(desired, int | float) and isinstance(live, int | float):
        return live == desired
    return bool(live == desired)


def first_difference(live: Any, desired: Any, path: str = "") -> str | None:
    """The first path where ``live`` lacks ``desired`` (for the debug log), or None."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return path or "."
        for key, value in desired.items():
            if key not in live:
                if not _is_zero(value):
                    return f"{path}.{key}"
                continue
            found = first_difference(live[key], value, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return path
        for i, (a, b) in enumerate(zip(live, desired, strict=True)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if contains(live, desired) else path


def _is_zero(value: Any) -> bool:
    return value is None or value is False or value == 0 or value in ("", [], {})


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    if live is None:
        return True
    return not contains(live, desired)


def owns_field(obj: dict[str, Any], manager: str, path: tuple[str, ...]) -> bool:
    """Whether ``manager`` (by Apply) owns ``path`` per ``metadata.managedFields``."""
    for entry in obj.get("metadata", {}).get("managedFields") or ():
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        node: Any = entry.get("fieldsV1") or {}
        for part in path:
            node = node.get(f"f:{part}") if isinstance(node, dict) else None
            if node is None:
                break
        else:
            return True
    return False
