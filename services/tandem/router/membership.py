"""Where the router learns which workers exist.

A ``MembershipSource`` answers "which worker addresses exist now, in which pool"; the
router asks on every health round and reconciles its worker table. Each pool is given
as a target string (the frontend contract's ``workers`` map):

- ``dns:///NAME:PORT``: every address NAME resolves to (a headless Service lists its
  ready pods) -- the Kubernetes case;
- ``file:///PATH``: a JSON file another process rewrites (``tandem up`` does when it
  scales), ``{"workers": [{"address": "127.0.0.1:5001", "role": "prefill"}, ...]}``;
- ``HOST:PORT`` (or a list of them): a fixed set.

An EndpointSlice watcher would be one more ``MembershipSource``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tandem.router.policy import WorkerRole

logger = logging.getLogger(__name__)

DNS_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Member:
    address: str  # host:port of the worker's gRPC server
    role: WorkerRole


class MembershipSource(Protocol):
    async def members(self) -> Sequence[Member]:
        """The current members; called once per health round."""
        ...


class StaticMembership:
    def __init__(self, members: Sequence[Member]) -> None:
        self._members = tuple(members)

    async def members(self) -> Sequence[Member]:
        return self._members


def parse_members(document: object) -> tuple[Member, ...]:
    if not isinstance(document, dict) or not isinstance(document.get("workers"), list):
        raise ValueError('membership must be an object with a "workers" list')
    roles = {r.value for r in WorkerRole}
    members = []
    for entry in document["workers"]:
        if not isinstance(entry, dict):
            raise ValueError("each worker must be an object with address and role")
        address, role = entry.get("address"), entry.get("role")
        if not isinstance(address, str) or not address:
            raise ValueError(f"worker address must be a non-empty string, got {address!r}")
        if role not in roles:
            raise ValueError(f"worker role must be prefill, decode or both, got {role!r}")
        members.append(Member(address=address, role=WorkerRole(str(role))))
    return tuple(members)


def render_members(members: Sequence[Member]) -> str:
    return json.dumps(
        {"workers": [{"address": m.address, "role": m.role.value} for m in members]},
        indent=2,
    )


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


class DnsMembership:
    """Every address ``host`` resolves to, at ``port``; last good answer on failure."""

    def __init__(self, host: str, port: int, role: WorkerRole) -> None:
        self._host, self._port, self._role = host, port, role
        self._members: tuple[Member, ...] = ()

    async def members(self) -> Sequence[Member]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(DNS_TIMEOUT_SECONDS):
                infos = await loop.getaddrinfo(
                    self._host, self._port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
        except (OSError, TimeoutError) as exc:
            logger.warning("cannot resolve %s: %s", self._host, exc)
            return self._members
        addresses = sorted({_join_host_port(str(info[4][0]), self._port) for info in infos})
        self._members = tuple(Member(a, self._role) for a in addresses)
        return self._members


class CompositeMembership:
    def __init__(self, sources: Sequence[MembershipSource]) -> None:
        self._sources = tuple(sources)

    async def members(self) -> Sequence[Member]:
        out: list[Member] = []
        for source in self._sources:
            out.extend(await source.members())
        return out


def membership_from_targets(targets: Mapping[str, str | Sequence[str]]) -> MembershipSource:
    """Build the source for a contract ``workers`` map: pool role -> target(s)."""
    sources: list[MembershipSource] = []
    static: list[Member] = []
    for role_name, target in targets.items():
        role = WorkerRole(role_name)
        for item in [target] if isinstance(target, str) else target:
            if item.startswith("dns:///"):
                host, port = split_host_port(item.removeprefix("dns:///"))
                sources.append(DnsMembership(host, port, role))
            elif item.startswith("file://"):
                sources.append(FileMembership(Path(item.removeprefix("file://")), role))
            elif item:
                split_host_port(item)  # validates
                static.append(Member(item, role))
    if static:
        sources.append(StaticMembership(static))
    return CompositeMembership(sources)


def split_host_port(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {target!r}")
    return host.strip("[]"), int(port)


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
