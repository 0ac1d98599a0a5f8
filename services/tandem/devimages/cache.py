"""Archives shared by every checkout on a machine, keyed by the fingerprint of their inputs.

A fresh clone (CI's, a second worktree) of sources whose images were already built here
takes the archive from this cache instead of bootstrapping a base and building again:
what did not change costs a hard link (a copy across filesystems). Only the newest
archive of each image is kept. The cache lives in ``$TANDEM_BUILD_CACHE/images``, by
default ``~/.cache/tandem/images``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CACHE_ENV = "TANDEM_BUILD_CACHE"


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "tandem"
    )
    return Path(root) / "images"


def _entry(cache: Path, name: str, inputs: str) -> Path:
    return cache / f"{name}-{inputs}.tar"


def _link_or_copy(source: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:  # another filesystem, or links not allowed there
        shutil.copyfile(source, partial)
    partial.replace(target)


def restore(cache: Path, name: str, inputs: str, target: Path) -> bool:
    """Put the cached archive of ``name`` built from ``inputs`` at ``target``, if any."""
    entry = _entry(cache, name, inputs)
    if not entry.is_file():
        return False
    _link_or_copy(entry, target)
    return True


def remember(cache: Path, name: str, inputs: str, archive: Path) -> None:
    """Keep ``archive`` as the newest of ``name``; a cache that cannot be written is skipped
    (the build already succeeded)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for older in cache.glob(f"{name}-*.tar"):
            older.unlink()
        _link_or_copy(archive, _entry(cache, name, inputs))
    except OSError:
        return
