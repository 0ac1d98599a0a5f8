"""One measured or modelled point of the sweep, and what the report derives from them
(pure): goodput under an SLO, and the ratios the targets name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tandem.sim.metrics import Percentiles, Slo


@dataclass(frozen=True, slots=True)
class Split:
    """A deployment at a fixed GPU count: ``prefill`` prefill workers, ``decode`` decode
    workers (TP1 each); prefill 0 is aggregated."""

    prefill: int
    decode: int

    @property
    def gpus(self) -> int:
        return self.prefill + self.decode

    @property
    def aggregated(self) -> bool:
        return self.prefill == 0

    @property
    def name(self) -> str:
        return f"agg {self.decode}" if self.aggregated else f"{self.prefill}P{self.decode}D"


@dataclass(frozen=True, slots=True)
class Point:
    """One deployment at one concurrency, in modelled seconds."""

    source: str  # "aiperf" (the real stack) or "model" (virtual time)
    profile: str
    isl: int
    osl: int
    split: Split
    concurrency: int
    ttft: Percentiles
    itl: Percentiles
    tokens_per_second: float  # output tokens while the full concurrency ran
    tokens_per_second_per_user: float  # median over requests
    requests: int
    errors: int = 0
    speedup: float = 1.0
    plumbing_lag: float | None = None  # see Pacer: wall time the plumbing added, relative

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_second / self.split.gpus

    def meets(self, slo: Slo) -> bool:
        return (
            self.errors == 0 and self.ttft.p90 <= slo.ttft_p90_s and self.itl.p90 <= slo.itl_p90_s
        )


@dataclass(frozen=True, slots=True)
class Record:
    """One request as a client saw it, in seconds on one clock."""

    start: float
    first_token: float
    end: float
    output_tokens: int
    # Between consecutive chunks of the stream (aiperf's inter-chunk latency), when known.
    gaps: tuple[float, ...] = ()


def compute_steady_throughput(records: Sequence[Record], concurrency: int) -> float:
    """Output tokens per second in the run's steady part: from the first request's end
    (the ramp is over and the first generation has drained whatever backlog the ramp
    built) to the start of the last request (the drain begins). Each request's tokens
    are spread evenly from its first token to its end. Both aiperf's records and the
    virtual-time runs go through this, so neither the ramp nor the drain of a short run
    skews the figure."""
    starts = sorted(r.start for r in records)
    if len(starts) <= concurrency:
        raise ValueError("the run never left its ramp: send more requests than the concurrency")
    begin, end = min(r.end for r in records), starts[-1]
    if end <= begin:
        raise ValueError("no steady window: send more requests after the first one finishes")
    tokens = 0.0
    for r in records:
        span = r.end - r.first_token
        if span <= 0:
            inside = begin <= r.end <= end
            tokens += r.output_tokens if inside else 0
            continue
        overlap = max(0.0, min(r.end, end) - max(r.first_token, begin))
        tokens += r.output_tokens * overlap / span
    return tokens / (end - begin)


def find_goodput(points: Iterable[Point], slo: Slo) -> Point | None:
    """The point with the most tokens/s/GPU that meets the SLO (None: none does)."""
    meeting = [p for p in points if p.meets(slo)]
    return max(meeting, key=lambda p: p.tokens_per_second_per_gpu, default=None)


def compute_ratio(numerator: Point | None, denominator: Point | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    return numerator.tokens_per_second_per_gpu / denominator.tokens_per_second_per_gpu
