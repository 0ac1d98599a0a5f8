"""Where the router learns which workers exist.

A ``MembershipSource`` answers "which worker addresses exist now, in which pool"; the
router asks on every health round and reconciles its worker table. Sources:

- ``FileMembership``: a JSON file another process rewrites (``tandem up`` does when it
  scales), ``{"workers": [{"address": "127.0.0.1:5001", "role": "prefill"}, ...]}``; an
  entry with ``"starting": true`` is a worker launched but not ready yet;
- ``StaticMembership``: a fixed set;
- ``endpoint_slices.EndpointSliceMembership``: the endpoints of a pool's Service, from
  the Kubernetes API (the in-cluster case): ready ones, and not-ready ones that are not
  terminating as starting.

The router routes only to members that are not starting; starting ones tell it capacity
is on its way (a long prompt may wait for it, see ``policy``).

``targets.membership_from_targets`` builds them from the frontend contract's
``workers`` map.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tandem.router.policy import WorkerRole

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Member:
    address: str  # host:port of the worker's gRPC server
    role: WorkerRole
    starting: bool = False  # launched, not ready: not routable yet


class MembershipSource(Protocol):
    async def members(self) -> Sequence[Member]:
        """The current members; called once per health round."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) whenever the members may have changed, so
        the router adopts them at once instead of at its next round; sources that are
        only read on demand never call it."""
        ...

    async def close(self) -> None:
        """Stop whatever the source runs in the background (the router is stopping)."""
        ...


class StaticMembership:
    def __init__(self, members: Sequence[Member]) -> None:
        self._members = tuple(members)

    async def members(self) -> Sequence[Member]:
        return self._members

    def on_change(self, callback: Callable[[], None]) -> None:
        pass

    async def close(self) -> None:
        pass


def parse_members(document: object) -> tuple[Member, ...]:
    if not isinstance(document, dict) or not isinstance(document.get("workers"), list):
        raise ValueError('membership must be an object with a "workers" list')
    roles = {r.value for r in WorkerRole}
    members = []
    for entry in document["workers"]:
        if not isinstance(entry, dict):
            raise ValueError("each worker must be an object with address and role")
        address, role = entry.get("address"), entry.get("role")
        starting = entry.get("starting", False)
        if not isinstance(address, str) or not address:
            raise ValueError(f"worker address must be a non-empty string, got {address!r}")
        if role not in roles:
            raise ValueError(f"worker role must be prefill, decode or both, got {role!r}")
        if not isinstance(starting, bool):
            raise ValueError(f"worker starting must be true or false, got {starting!r}")
        members.append(Member(address=address, role=WorkerRole(str(role)), starting=starting))
    return tuple(members)


def render_members(members: Sequence[Member]) -> str:
    workers = [
        {"address": m.address, "role": m.role.value} | ({"starting": True} if m.starting else {})
        for m in members
    ]
    return json.dumps({"workers": workers}, indent=2)


def write_members(path: Path, members: Sequence[Member]) -> None:
    """Atomically replace the membership file (readers never see half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_members(members))
    os.replace(tmp, path)


class FileMembership:
    """Re-reads ``path`` when it changes; keeps the last good list on errors.
    With ``role`` set, only that pool's entries are returned."""

    def __init__(self, path: Path, role: WorkerRole | None = None) -> None:
        self._path = path
        self._role = role
        self._stamp: tuple[int, int] | None = None
        self._members: tuple[Member, ...] = ()

    async def members(self) -> Sequence[Member]:
        try:
            stat = self._path.stat()
        except FileNotFoundError:
            return self._members
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            try:
                parsed = parse_members(json.loads(self._path.read_text()))
            except (OSError, ValueError) as exc:
                logger.warning("keeping previous membership: cannot read %s: %s", self._path, exc)
            else:
                self._stamp = stamp
                self._members = tuple(m for m in parsed if self._role in (None, m.role))
        return self._members

    def on_change(self, callback: Callable[[], None]) -> None:
        pass  # read at every round; a file has no watch worth the complexity here

    async def close(self) -> None:
        pass


class CompositeMembership:
    def __init__(self, sources: Sequence[MembershipSource]) -> None:
        self._sources = tuple(sources)

    async def members(self) -> Sequence[Member]:
        out: list[Member] = []
        for source in self._sources:
            out.extend(await source.members())
        return out

    def on_change(self, callback: Callable[[], None]) -> None:
        for source in self._sources:
            source.on_change(callback)

    async def close(self) -> None:
        for source in self._sources:
            await source.close()


def split_host_port(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    malformed_host = not host or "/" in host or any(c.isspace() for c in host)
    if not sep or malformed_host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {target!r}")
    return host.strip("[]"), int(port)
