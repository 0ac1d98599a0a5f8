"""What the goodput section runs: profiles, ISLs, splits, concurrencies and SLOs."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.sim.metrics import Slo
from tandem_dev.bench.goodput.points import Split

OSL = 1024
GPUS = 4
SPLITS = (Split(0, 4), Split(1, 3), Split(2, 2), Split(3, 1))
# Virtual-time sweep (cheap); aiperf measures agg and the best disaggregated split at the
# concurrency of their modelled goodput and the one below it.
MODEL_CONCURRENCY = (2, 4, 8, 12, 16, 24, 32, 48, 64)
# One ITL target for all lengths (~167 tokens/s/user, an interactive stream), TTFT
# scaled with the prompt.
ITL_SLO_S = 0.006
SLOS = {1024: Slo(0.5, ITL_SLO_S), 8192: Slo(1.0, ITL_SLO_S), 32768: Slo(2.0, ITL_SLO_S)}
# Wall seconds over which aiperf starts the first requests, in modelled seconds: about
# one request's lifetime, so requests do not move in lockstep waves.
RAMP_MODELLED_S = 5.0
# Output tokens per wall second the plumbing is asked to carry (frontend SSE, gRPC
# streams, aiperf's parsing): the fidelity table shows ITL and throughput hold up to
# ~1,000-1,500 per wall second on a shared 2-core machine and fall apart beyond; the
# speed-up of each deployment follows from this budget.
PLUMBING_TOKENS_PER_WALL_S = 600.0
MAX_SPEEDUP = 1.0


@dataclass(frozen=True, slots=True)
class Grid:
    profiles: tuple[str, ...]
    isls: tuple[int, ...]
    splits: tuple[Split, ...]
    # (profile, ISL) pairs aiperf measures through the real stack (agg and the best
    # disaggregated split, at the concurrency of their modelled goodput); the model
    # covers every pair.
    measured: frozenset[tuple[str, int]]


_PROFILES, _ISLS = ("gb200", "b200"), (1024, 8192, 32768)
FULL = Grid(_PROFILES, _ISLS, SPLITS, frozenset((p, isl) for p in _PROFILES for isl in _ISLS))
QUICK = Grid(("gb200",), (1024, 32768), (Split(0, 4), Split(2, 2)), frozenset({("gb200", 32768)}))


def count_requests(concurrency: int) -> int:
    """Two generations and a bit at each concurrency: the second one is measured."""
    return 2 * concurrency + 16


def choose_speedup(modelled_tokens_per_s: float) -> float:
    """Modelled seconds per wall second for a deployment whose busiest measured point
    produces ``modelled_tokens_per_s``."""
    if modelled_tokens_per_s <= 0:
        return MAX_SPEEDUP
    return min(MAX_SPEEDUP, PLUMBING_TOKENS_PER_WALL_S / modelled_tokens_per_s)
