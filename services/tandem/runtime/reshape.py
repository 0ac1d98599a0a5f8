"""What a new plan means for a local cluster's processes (pure).

A plan's shape (``tandem.sim.planned_spec.apply_plan``) arrives as a spec; locally each
pool is a set of worker processes. A pool whose worker command line is unchanged (same
engine options, tensor parallelism, KV settings) is only resized: workers are added, or
the surplus is retired. A pool whose command line changed (a new step budget, another
TP) is replaced: as many new workers as planned start, and once the frontend routes to
them, every old one is retired and drained -- at no moment is the pool without a worker
that the router may use, so no request fails for the roll.

What one machine cannot honour is left as the plan says and nothing more: tensor
parallelism is the simulated engine's clock (``tensor_parallel_size`` in its options),
not GPUs, and a reference worker is one process whatever its TP. The frontend keeps the
routing settings it started with (``maxPrefillWaitSeconds`` under autoscaling): it reads
its configuration once, and restarting it would fail the requests it streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.runtime.plan import plan_worker

# The frontend's histograms are read this often at most: a window holds ten or more
# scrapes even at the shortest window (30 s), and at most one every 15 s, as the operator.
MAX_SCRAPE_SECONDS = 15.0
SCRAPES_PER_WINDOW = 10


@dataclass(frozen=True, slots=True)
class PoolRoll:
    """How one pool goes from the running shape to the planned one."""

    role: PoolRole
    current: int  # workers in membership now
    target: int  # workers the plan wants
    replace: bool  # the worker command line changed: start ``target`` new, retire all old

    @property
    def start(self) -> int:
        """New workers to start."""
        return self.target if self.replace else max(0, self.target - self.current)

    @property
    def retire(self) -> int:
        """Old workers to retire (once the new ones are routed to)."""
        return self.current if self.replace else max(0, self.current - self.target)

    @property
    def changes(self) -> bool:
        return self.start > 0 or self.retire > 0


def compute_scrape_seconds(window_seconds: float) -> float:
    return min(MAX_SCRAPE_SECONDS, window_seconds / SCRAPES_PER_WINDOW)


def same_worker(running: InferenceCluster, planned: InferenceCluster, role: PoolRole) -> bool:
    """Whether a worker of ``role`` runs the same command under both specs (its name,
    port and state directory aside)."""
    state_dir = Path("/")

    def argv(cluster: InferenceCluster) -> tuple[str, ...]:
        return plan_worker(cluster, role, 0, 0, state_dir=state_dir, python="python").argv

    return argv(running) == argv(planned)


def compute_rolls(
    running: InferenceCluster, planned: InferenceCluster, current: dict[PoolRole, int]
) -> list[PoolRoll]:
    """Each pool's roll from ``running`` (``current`` workers per pool) to ``planned``;
    pools that do not change are left out."""
    rolls = []
    for role in PoolRole:
        pool = planned.spec.prefill if role is PoolRole.PREFILL else planned.spec.decode
        now = current.get(role, 0)
        replace = now > 0 and pool.replicas > 0 and not same_worker(running, planned, role)
        roll = PoolRoll(role, now, pool.replicas, replace)
        if roll.changes:
            rolls.append(roll)
    return rolls


def describe_rolls(rolls: list[PoolRoll]) -> str:
    """E.g. ``prefill 0 -> 1, decode 2 -> 2 (new workers)``; ``no change``."""
    parts = [
        f"{r.role.value} {r.current} -> {r.target}{' (new workers)' if r.replace else ''}"
        for r in rolls
    ]
    return ", ".join(parts) or "no change"
