"""Arrival traces for the autoscaling benchmarks: named load shapes and their requests.

A trace is one or more independent streams; each stream has a request mix (prompt and
output lengths with weights) and a schedule of (duration, requests per second) phases.
Arrivals are Poisson within a phase and drawn from a seeded generator, so a trace and
a seed always give the same requests. ``load_at`` gives the *expected* load at any
time; the SLO oracle (``slo_oracle``) plans with the arrivals themselves.
"""

from __future__ import annotations

import bisect
import random
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
    """Expected arrivals at one moment: a rate and the request mix's mean lengths (over
    requests, weighted by stream rates)."""

    requests_per_second: float = 0.0
    mean_prompt_tokens: float = 0.0
    mean_output_tokens: float = 0.0

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
        rate = p1 = o1 = 0.0
        for stream in self.streams:
            r = stream.rate_at(t)
            if r <= 0:
                continue
            total = sum(s.weight for s in stream.mix)
            for shape in stream.mix:
                share = r * shape.weight / total
                rate += share
                p1 += share * shape.prompt_tokens
                o1 += share * shape.output_tokens
        if rate <= 0:
            return LoadLevel()
        return LoadLevel(rate, p1 / rate, o1 / rate)

    def change_points(self) -> list[float]:
        """Times (after 0, before the end) where the expected load changes."""
        points = {p for s in self.streams for p in s.change_points()}
        return sorted(p for p in points if 0 < p < self.duration_seconds)

    def segment_start(self, t: float) -> float:
        """When the constant-load segment holding ``t`` began."""
        points = self.change_points()
        i = bisect.bisect_right(points, t)
        return points[i - 1] if i > 0 else 0.0


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
