"""Mounts a killed build leaves inside the store, found and released before the next one.

debootstrap mounts proc and sysfs (devpts, a tmpfs /dev inside containers) in its target,
which here is a working container's root in the store; SIGKILLed mid-way, it leaves them.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)

TRANSIENT_FSTYPES = frozenset({"proc", "sysfs", "devpts", "tmpfs", "devtmpfs"})
MOUNTINFO = Path("/proc/self/mountinfo")


def transient_mounts(under: Path, mountinfo: str) -> list[Path]:
    """Mount points below ``under`` of debootstrap's kinds, deepest first."""
    found: list[Path] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        separator = fields.index("-")
        mount_point = Path(fields[4].encode().decode("unicode_escape"))
        if fields[separator + 1] in TRANSIENT_FSTYPES and mount_point.is_relative_to(under):
            found.append(mount_point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def release_transient_mounts(under: Path) -> None:
    for mount_point in transient_mounts(under, MOUNTINFO.read_text()):
        logger.info("unmounting %s left by an interrupted build", mount_point)
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)
