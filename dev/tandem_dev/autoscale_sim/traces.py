"""Arrival traces for the autoscaling simulator: named load shapes and their requests.

A trace is one or more independent streams; each stream has a request mix (prompt and
output lengths with weights) and a schedule of (duration, requests per second) phases.
Arrivals are Poisson within a phase and drawn from a seeded generator, so a trace and
a seed always give the same requests. ``load_at`` gives the *expected* load at any
time, which is what the oracle plans with.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestShape:
    prompt_tokens: int
    output_tokens: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Phase:
    duration_seconds: float
    requests_per_second: float


@dataclass(frozen=True, slots=True)
class Stream:
    mix: tuple[RequestShape, ...]
    phases: tuple[Phase, ...]

    def rate_at(self, t: float) -> float:
        start = 0.0
        for phase in self.phases:
            if start <= t < start + phase.duration_seconds:
                return phase.requests_per_second
            start += phase.duration_seconds
        return 0.0

    def change_points(self) -> list[float]:
        points, start = [], 0.0
        for phase in self.phases:
            start += phase.duration_seconds
            points.append(start)
        return points


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """Expected arrivals at one moment: a rate and the moments of the request mix that
    queueing and Little's law need (means over requests, weighted by stream rates)."""

    requests_per_second: float = 0.0
    mean_prompt_tokens: float = 0.0
    mean_prompt_tokens_squared: float = 0.0
    mean_output_tokens: float = 0.0
    mean_output_times_context: float = 0.0  # E[output x (prompt + output)]

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.requests_per_second * self.mean_prompt_tokens


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    description: str
    duration_seconds: float
    streams: tuple[Stream, ...]

    def load_at(self, t: float) -> LoadLevel:
        if not 0 <= t < self.duration_seconds:
            return LoadLevel()
        rate = p1 = p2 = o1 = oc = 0.0
        for stream in self.streams:
            r = stream.rate_at(t)
            if r <= 0:
                continue
            total = sum(s.weight for s in stream.mix)
            for shape in stream.mix:
                share = r * shape.weight / total
                rate += share
                p1 += share * shape.prompt_tokens
                p2 += share * shape.prompt_tokens**2
                o1 += share * shape.output_tokens
                oc += share * shape.output_tokens * (shape.prompt_tokens + shape.output_tokens)
        if rate <= 0:
            return LoadLevel()
        return LoadLevel(rate, p1 / rate, p2 / rate, o1 / rate, oc / rate)

    def change_points(self) -> list[float]:
        """Times (after 0, before the end) where the expected load changes."""
        points = {p for s in self.streams for p in s.change_points()}
        return sorted(p for p in points if 0 < p < self.duration_seconds)

    def segment_start(self, t: float) -> float:
        """When the constant-load segment holding ``t`` began."""
        points = self.change_points()
        i = bisect.bisect_right(points, t)
        return points[i - 1] if i > 0 else 0.0


def compute_load_level(arrivals: Sequence[Arrival], seconds: float) -> LoadLevel:
    """The load ``arrivals`` (all within ``seconds``) actually made."""
    if not arrivals or seconds <= 0:
        return LoadLevel()
    n = len(arrivals)
    return LoadLevel(
        requests_per_second=n / seconds,
        mean_prompt_tokens=sum(a.prompt_tokens for a in arrivals) / n,
        mean_prompt_tokens_squared=sum(a.prompt_tokens**2 for a in arrivals) / n,
        mean_output_tokens=sum(a.output_tokens for a in arrivals) / n,
        mean_output_times_context=sum(
            a.output_tokens * (a.prompt_tokens + a.output_tokens) for a in arrivals
        )
        / n,
    )


@dataclass(frozen=True, slots=True)
class RealizedLoad:
    """The load each constant-rate stretch of a trace actually got (Poisson arrivals
    stray from the expected rate, and a short burst can stray far): what an oracle
    that knows the future plans with."""

    starts: tuple[float, ...]
    levels: tuple[LoadLevel, ...]

    def at(self, t: float) -> LoadLevel:
        i = bisect.bisect_right(self.starts, t) - 1
        return self.levels[i] if 0 <= i < len(self.levels) else LoadLevel()


def compute_realized_load(trace: Trace, arrivals: Sequence[Arrival]) -> RealizedLoad:
    edges = [0.0, *trace.change_points(), trace.duration_seconds]
    times = [a.at for a in arrivals]
    levels = []
    for start, end in itertools.pairwise(edges):
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_left(times, end)
        levels.append(compute_load_level(arrivals[lo:hi], end - start))
    return RealizedLoad(tuple(edges[:-1]), tuple(levels))


def generate_arrivals(trace: Trace, seed: int) -> list[Arrival]:
    """The trace's requests, in time order; the same ``seed`` gives the same list."""
    arrivals: list[Arrival] = []
    for index, stream in enumerate(trace.streams):
        rng = random.Random(seed * 1_000_003 + index)
        weights = [s.weight for s in stream.mix]
        start = 0.0
        for phase in stream.phases:
            end = min(start + phase.duration_seconds, trace.duration_seconds)
            if phase.requests_per_second > 0:
                t = start + rng.expovariate(phase.requests_per_second)
                while t < end:
                    shape = rng.choices(stream.mix, weights)[0]
                    arrivals.append(Arrival(t, shape.prompt_tokens, shape.output_tokens))
                    t += rng.expovariate(phase.requests_per_second)
            start = end
    arrivals.sort(key=lambda a: a.at)
    return arrivals


# --------------------------------------------------------------------------- standard


CHAT_MIX = (
    RequestShape(1024, 128, 3),
    RequestShape(2048, 256, 3),
    RequestShape(4096, 256, 2.5),
    RequestShape(8192, 512, 1.5),
)
SHORT_MIX = (RequestShape(1024, 256),)
LONG_MIX = (RequestShape(32768, 256),)


def _repeat(pattern: Sequence[Phase], times: int) -> tuple[Phase, ...]:
    return tuple(pattern) * times


def build_standard_traces(scale: float = 1.0) -> list[Trace]:
    """The standard traces: two steady ones (flapping), on/off and long-prompt bursts
    (reaction, cost) and a staircase ramp (tracking). ``scale`` multiplies every rate."""
    steady = Trace(
        "steady",
        "Constant Poisson load, mixed 1k-8k prompts, 20 minutes",
        1200,
        (Stream(CHAT_MIX, (Phase(1200, 60 * scale),)),),
    )
    bursty = Trace(
        "bursty",
        "On/off: 2 minutes of load, 3 minutes of silence, four times",
        1200,
        (Stream(CHAT_MIX, _repeat((Phase(120, 60 * scale), Phase(180, 0)), 4)),),
    )
    steady_long = Trace(
        "steady-long-prompts",
        "Constant load of 32k-token prompts (5/s) over 1k-token background (20/s), 20 minutes",
        1200,
        (
            Stream(SHORT_MIX, (Phase(1200, 20 * scale),)),
            Stream(LONG_MIX, (Phase(1200, 5 * scale),)),
        ),
    )
    steps = [Phase(90, r * scale) for r in (10, 20, 30, 40, 50, 60, 70, 80)]
    ramp = Trace(
        "ramp",
        "Staircase up from 10 to 80 req/s in 90 s steps, then back down",
        1440,
        (Stream(CHAT_MIX, (*steps, *reversed(steps))),),
    )
    long_bursts = Trace(
        "long-prompt-bursts",
        "1k-token background plus 90 s bursts of 32k-token prompts every 5 minutes",
        1200,
        (
            Stream(SHORT_MIX, (Phase(1200, 20 * scale),)),
            Stream(LONG_MIX, _repeat((Phase(60, 0), Phase(90, 5 * scale), Phase(150, 0)), 4)),
        ),
    )
    return [steady, steady_long, bursty, ramp, long_bursts]
