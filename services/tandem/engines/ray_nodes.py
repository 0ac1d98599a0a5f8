"""The nodes of the Ray cluster a multi-node worker runs in (one per pod of its
LeaderWorkerSet group): waiting for them to join, and which they are.

``ray`` is the optional ``multinode`` extra; callers pass the imported module in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tandem.engines.base import EngineError

# The port a follower rank listens on for its leader (``engines.reference.tp``), set by
# ``tandem.worker.ray_launch`` to one of its block; unset, any free port.
RANK_PORT_ENV = "TANDEM_TP_RANK_PORT"


@dataclass(frozen=True, slots=True)
class RayNode:
    node_id: str
    address: str  # the address it joined with: its pod's IP


def wait_for_nodes(ray: Any, count: int, timeout_s: float) -> list[RayNode]:
    """``count`` live nodes of the connected cluster, ordered by address, once that many
    have joined; raises ``EngineError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = sorted(
            (
                RayNode(node["NodeID"], node["NodeManagerAddress"])
                for node in ray.nodes()
                if node["Alive"]
            ),
            key=lambda node: (node.address, node.node_id),
        )
        if len(alive) >= count:
            return alive
        if time.monotonic() > deadline:
            raise EngineError(
                f"the worker's Ray cluster has {len(alive)} of its {count} nodes "
                f"{timeout_s:.0f} s after it started: a pod of the group has not joined"
            )
        time.sleep(1.0)
