"""What users see of a run: latency percentiles and the SLO they are held to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slo:
    """Targets on the 90th percentile over requests of time to first token and of each
    request's mean inter-token latency (aiperf's ITL)."""

    ttft_p90_s: float
    itl_p90_s: float

    def describe(self) -> str:
        return f"TTFT p90 <= {self.ttft_p90_s:g} s, ITL p90 <= {self.itl_p90_s * 1e3:g} ms"


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float
    p90: float
    p99: float


def compute_percentiles(values: Sequence[float]) -> Percentiles:
    """Nearest-rank percentiles (what aiperf reports, closely enough for tens of
    requests)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[rank_index(q, len(ordered))]

    return Percentiles(rank(0.5), rank(0.9), rank(0.99))


def rank_index(q: float, count: int) -> int:
    """Where the ``q`` percentile of ``count`` sorted values sits (nearest rank)."""
    return min(count - 1, max(0, round(q * (count - 1))))


def misses_over_p90(count: int) -> int:
    """How many of ``count`` values above a target put their p90 above it."""
    return count - rank_index(0.9, count)
