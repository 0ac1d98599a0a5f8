"""What goes into an image, hashed: a rebuild happens exactly when one of these changes.

The inputs are the Dockerfile itself, every file its ``COPY``/``ADD`` lines take from the
build context (read from the Dockerfile, so a new COPY is covered without a second list),
less what the context's ``.dockerignore`` leaves out, plus the build arguments (the base
image's ID among them).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path


def logical_lines(dockerfile_text: str) -> Iterator[str]:
    """Instructions with their backslash continuations joined and comments dropped."""
    pending = ""
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def copied_sources(dockerfile_text: str) -> list[str]:
    """Context paths named by ``COPY``/``ADD`` (``--from=`` copies are from a stage)."""
    sources: list[str] = []
    for line in logical_lines(dockerfile_text):
        instruction, _, rest = line.partition(" ")
        if instruction.upper() not in ("COPY", "ADD"):
            continue
        rest = rest.strip()
        words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources += paths[:-1]  # the last word is the destination
    return sources


def read_ignore_patterns(context: Path) -> list[str]:
    ignore = context / ".dockerignore"
    if not ignore.is_file():
        return []
    lines = (line.strip() for line in ignore.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether ``relative`` (or a folder above it) matches a .dockerignore pattern.

    Covers the pattern forms this repository's .dockerignore uses: a path from the
    context root (``build``), and ``**/NAME`` for a name at any depth.
    """
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):
            tail = pattern.removeprefix("**/")
            if any(fnmatch.fnmatchcase(part, tail) for part in parts):
                return True
        elif any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            return True
    return False


def context_files(context: Path, sources: list[str]) -> list[str]:
    """Every file under ``sources`` (relative to ``context``) that the build copies."""
    patterns = read_ignore_patterns(context)
    found: set[str] = set()
    for source in sources:
        root = context / source
        if not root.exists():
            raise FileNotFoundError(f"COPY source {source!r} is not in the context {context}")
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in candidates:
            relative = path.relative_to(context).as_posix()
            if path.is_file() and not ignored(relative, patterns):
                found.add(relative)
    return sorted(found)


def fingerprint(dockerfile: Path, context: Path, build_args: Mapping[str, str]) -> str:
    """sha256 over the Dockerfile, the copied files (names and bytes) and the build args."""
    text = dockerfile.read_text()
    digest = hashlib.sha256()
    digest.update(b"dockerfile\0" + text.encode() + b"\0")
    for key, value in sorted(build_args.items()):
        digest.update(f"arg\0{key}={value}\0".encode())
    for relative in context_files(context, copied_sources(text)):
        path = context / relative
        digest.update(f"file\0{relative}\0{path.stat().st_mode & 0o111:o}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
