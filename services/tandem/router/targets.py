"""The frontend contract's ``workers`` map -> one ``MembershipSource``.

Each pool role maps to a target string, or a list of them:

- ``kubernetes:///SERVICE.NAMESPACE:PORT``: the ready endpoints of that Service, watched
  through the Kubernetes API (what the operator renders);
- ``file:///PATH``: a membership file (what ``tandem up`` writes);
- ``HOST:PORT``: one fixed worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tandem.router.endpoint_slices import (
    SCHEME as KUBERNETES_SCHEME,
)
from tandem.router.endpoint_slices import (
    EndpointSliceMembership,
    KubeConnection,
    parse_service_target,
)
from tandem.router.membership import (
    CompositeMembership,
    FileMembership,
    Member,
    MembershipSource,
    StaticMembership,
    split_host_port,
)
from tandem.router.policy import WorkerRole

FILE_SCHEME = "file://"


def validate_target(target: str) -> None:
    """Raise ValueError naming what is wrong with one target string."""
    if target.startswith(KUBERNETES_SCHEME):
        parse_service_target(target)
    elif target.startswith(FILE_SCHEME):
        if not target.removeprefix(FILE_SCHEME).startswith("/"):
            raise ValueError(f"expected file:///ABSOLUTE/PATH, got {target!r}")
    else:
        split_host_port(target)


def membership_from_targets(targets: Mapping[str, str | Sequence[str]]) -> MembershipSource:
    """Build the source for a contract ``workers`` map: pool role -> target(s)."""
    sources: list[MembershipSource] = []
    static: list[Member] = []
    connection = KubeConnection()
    for role_name, target in targets.items():
        role = WorkerRole(role_name)
        for item in [target] if isinstance(target, str) else target:
            validate_target(item)
            if item.startswith(KUBERNETES_SCHEME):
                sources.append(
                    EndpointSliceMembership(connection, parse_service_target(item), role)
                )
            elif item.startswith(FILE_SCHEME):
                sources.append(FileMembership(Path(item.removeprefix(FILE_SCHEME)), role))
            else:
                static.append(Member(item, role))
    if static:
        sources.append(StaticMembership(static))
    return _Closing(sources, connection)


class _Closing(CompositeMembership):
    """The composite that also closes the shared API connection."""

    def __init__(self, sources: Sequence[MembershipSource], connection: KubeConnection) -> None:
        super().__init__(sources)
        self._connection = connection

    async def close(self) -> None:
        await super().close()
        await self._connection.close()
