"""The inventory: what this real node made on the machine, written before it is made.

Cleanup (after a normal stop, a failure, or at the next start after a crash) removes
exactly what an inventory lists and nothing else. The parsing helpers are pure so the
rules that decide "ours" are unit-tested without touching the machine.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError


class DirSnapshot(BaseModel):
    """A directory outside the node's root that the node's programs write into."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    existed: bool
    # Paths relative to ``path`` present before the node started: never ours.
    entries: tuple[str, ...] = ()


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str
    # Everything the node's processes fill and mount; removed whole by a teardown.
    runtime_root: str
    cgroup: str
    supervisor_pid: int
    # After a reboot nothing of a run is left but its files: see teardown.
    boot_id: str
    ip_forward_before: str
    shared_dirs: tuple[DirSnapshot, ...]
    # iptables chains that did not exist before the node started (all are then ours).
    iptables_chains: tuple[str, ...]
    # Filled in as each thing is made (recorded first, then made).
    cgroup_hierarchies: tuple[str, ...] = ()
    bridge: str | None = None
    guard_chains: tuple[str, ...] = ()
    clean: bool = False


class InventoryError(RuntimeError):
    """An inventory that cannot be read: what it lists cannot be told apart."""


def load_inventory(path: Path) -> Inventory | None:
    """The inventory in ``path``; None when there is none or it is an older record that
    says its teardown finished. InventoryError when it cannot be read otherwise."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return Inventory.model_validate_json(text)
    except ValidationError as err:
        with contextlib.suppress(ValueError, AttributeError):
            if json.loads(text).get("clean") is True:
                return None  # an older record of a finished teardown lists nothing to remove
        problem = err.errors()[0]
        raise InventoryError(
            f"cannot read the real-node inventory {path} ({problem['msg']}: "
            f"{'.'.join(str(p) for p in problem['loc'])}); if nothing of that node is left "
            "(no tandem-realnode cgroup, no tandem0 bridge), delete the file"
        ) from None


def save_inventory(path: Path, inventory: Inventory) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(inventory.model_dump_json(indent=2) + "\n")
    tmp.replace(path)


def save_records(machine_file: Path, inventory: Inventory) -> None:
    """The machine's record, which the next node finds whatever became of this node's
    directory, and a copy in that directory for people to read."""
    save_inventory(machine_file, inventory)
    with contextlib.suppress(OSError):
        save_inventory(Path(inventory.root) / "inventory.json", inventory)


def _unescape_mount_path(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo octal."""
    out, i = [], 0
    while i < len(field):
        digits = field[i + 1 : i + 4]
        if field[i] == "\\" and len(digits) == 3 and digits.isdigit():
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points_under(mountinfo: str, root: Path) -> list[str]:
    """Mount points at or below ``root``, in the order to unmount them: deepest first,
    and the newest of several mounts stacked on one path first."""
    found: list[tuple[int, int, str]] = []
    prefix = str(root).rstrip("/") + "/"
    for order, line in enumerate(mountinfo.splitlines()):
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape_mount_path(fields[4])
        if point == str(root) or point.startswith(prefix):
            found.append((point.count("/"), order, point))
    return [point for _, _, point in sorted(found, reverse=True)]


def cgroup_mount_points(mountinfo: str) -> list[str]:
    """Where the cgroup hierarchies (v1 controllers, named ones, v2) are mounted."""
    points = []
    for line in mountinfo.splitlines():
        # Optional fields end with "-", then the filesystem type.
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fstype = right.split()[0]
        if fstype in ("cgroup", "cgroup2"):
            points.append(_unescape_mount_path(left.split()[4]))
    return points


def new_entries(snapshot: DirSnapshot, present: Iterable[str]) -> list[str]:
    """Entries (relative paths) added since the snapshot, deepest first."""
    before = set(snapshot.entries)
    added = [p for p in present if p not in before]
    return sorted(added, key=lambda p: (p.count("/"), p), reverse=True)


@dataclass(frozen=True, slots=True)
class IptablesCleanup:
    """What to run, in order, to remove our chains from one table: first the rules of
    other chains that jump to ours (``-D``), then flush and delete ours."""

    delete_rules: tuple[tuple[str, ...], ...]
    chains: tuple[str, ...]


def plan_iptables_cleanup(rules: str, ours: Sequence[str]) -> IptablesCleanup:
    """From ``iptables -t TABLE -S`` output, the commands that remove ``ours``."""
    present, jumps = [], []
    for line in rules.splitlines():
        words = shlex.split(line)
        if len(words) >= 2 and words[0] == "-N" and words[1] in ours:
            present.append(words[1])
        elif len(words) >= 2 and words[0] == "-A" and words[1] not in ours:
            target = _jump_target(words)
            if target in ours:
                jumps.append(("-D", *words[1:]))
    return IptablesCleanup(delete_rules=tuple(jumps), chains=tuple(present))


def chains_in(rules: str) -> set[str]:
    """Chain names an ``iptables -S`` listing defines (built-in ones included)."""
    names = set()
    for line in rules.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("-N", "-P"):
            names.add(words[1])
    return names


def _jump_target(words: Sequence[str]) -> str | None:
    for flag, value in itertools.pairwise(words):
        if flag in ("-j", "--jump", "-g", "--goto"):
            return value
    return None
