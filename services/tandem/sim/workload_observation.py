"""The workload a cluster really serves, read from its frontends' histograms (pure).

Every frontend exports the prompt and answer length of each request it serves as
Prometheus histograms (``tandem.frontend.metrics``); one frontend's scrape of those
cumulative counters is a :class:`LengthCounts`. The difference of two scrapes of a
frontend is what it served between them; :func:`observe_between` adds those differences
up over the frontends and turns them into what a plan reads: median and p90 lengths, the
lengths' histograms, and the arrival rate. Frontends are compared one by one, so one that
restarted (its counters fell) or that only one of the scrapes saw leaves the others'
counts intact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tandem.frontend.metrics import ANSWER_LENGTH, PROMPT_LENGTH

# The query that asks a frontend's ``/metrics`` for the length histograms alone.
LENGTH_SERIES = tuple(("name[]", f"{family}_bucket") for family in (PROMPT_LENGTH, ANSWER_LENGTH))


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative Prometheus buckets: ``counts[i]`` observations were <= ``bounds[i]``;
    the last bound is +Inf, so ``counts[-1]`` is the total."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]

    @property
    def total(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    def minus(self, earlier: Histogram) -> Histogram | None:
        """The observations since ``earlier``; None if the buckets differ or a counter went
        down (the frontend restarted, or a frontend left the sum)."""
        if earlier.bounds != self.bounds:
            return None
        counts = tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True))
        if any(c < 0 for c in counts):
            return None
        return Histogram(self.bounds, counts)

    def plus(self, other: Histogram) -> Histogram:
        if not other.bounds:
            return self
        if not self.bounds:
            return other
        if other.bounds != self.bounds:
            raise ValueError("frontends export different length buckets")
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return Histogram(self.bounds, counts)

    def quantile(self, q: float) -> float:
        """Prometheus' ``histogram_quantile``: linear within the bucket that holds rank
        ``q * total`` (from 0 below the first bound); in the +Inf bucket, the largest
        finite bound. NaN with no observations."""
        if self.total <= 0:
            return math.nan
        rank = q * self.total
        lower, below = 0.0, 0.0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            if count >= rank and count > below:
                if math.isinf(bound):
                    return lower
                return lower + (bound - lower) * (rank - below) / (count - below)
            lower, below = bound, count
        return lower

    def bars(self) -> tuple[tuple[int, float], ...]:
        """The observations as a length histogram: each non-empty bucket's count at its
        upper bound, all a bucket says of its observations (the +Inf bucket's at the
        largest finite bound). Up to 26% long with these buckets, so a plan made from it
        errs towards more workers: one made for prompts a little shorter than they are
        misses its SLO, as one made at a bucket's midpoint would for the 32k prompts at
        the top of theirs."""
        out, lower, below = [], 0.0, 0.0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            if count > below:
                length = lower if math.isinf(bound) else bound
                out.append((max(1, round(length)), count - below))
            lower, below = bound, count
        return tuple(out)


EMPTY = Histogram((), ())


@dataclass(frozen=True, slots=True)
class LengthCounts:
    """One scrape's cumulative prompt and answer length histograms."""

    prompts: Histogram = EMPTY
    answers: Histogram = EMPTY


@dataclass(frozen=True, slots=True)
class ObservedLengths:
    """What was served between two scrapes."""

    isl_p50: int
    isl_p90: int
    osl_p50: int
    osl_p90: int
    requests_per_second: float
    requests: int  # prompts that reached a worker in the window
    window_seconds: float
    # The lengths as histograms, (tokens, count) per non-empty bucket.
    isl_bars: tuple[tuple[int, float], ...] = ()
    osl_bars: tuple[tuple[int, float], ...] = ()


def parse_length_counts(text: str) -> LengthCounts:
    """One frontend's ``/metrics`` text -> its length histograms (empty ones when it
    exports none, e.g. an older frontend). Raises ValueError on text that is not a
    Prometheus exposition."""
    buckets: dict[str, list[tuple[float, float]]] = {PROMPT_LENGTH: [], ANSWER_LENGTH: []}
    for family in text_string_to_metric_families(text):
        if family.name not in buckets:
            continue
        for sample in family.samples:
            if sample.name == f"{family.name}_bucket":
                buckets[family.name].append((float(sample.labels["le"]), float(sample.value)))
    prompts, answers = (_histogram(buckets[name]) for name in (PROMPT_LENGTH, ANSWER_LENGTH))
    return LengthCounts(prompts, answers)


def observe_between(
    earlier: Mapping[str, LengthCounts], later: Mapping[str, LengthCounts], seconds: float
) -> ObservedLengths | None:
    """The workload served in the ``seconds`` between two scrapes of each frontend (by
    address), counting the frontends both saw whose counters did not fall; None when
    none served a request."""
    prompts, answers = EMPTY, EMPTY
    for frontend, after in later.items():
        before = earlier.get(frontend)
        if before is None:
            continue
        new_prompts = after.prompts.minus(before.prompts)
        new_answers = after.answers.minus(before.answers)
        if new_prompts is None or new_answers is None:
            continue
        prompts, answers = prompts.plus(new_prompts), answers.plus(new_answers)
    if seconds <= 0 or prompts.total <= 0 or answers.total <= 0:
        return None
    return ObservedLengths(
        isl_p50=round(prompts.quantile(0.5)),
        isl_p90=round(prompts.quantile(0.9)),
        osl_p50=round(answers.quantile(0.5)),
        osl_p90=round(answers.quantile(0.9)),
        requests_per_second=prompts.total / seconds,
        requests=round(prompts.total),
        window_seconds=seconds,
        isl_bars=prompts.bars(),
        osl_bars=answers.bars(),
    )


def _histogram(pairs: list[tuple[float, float]]) -> Histogram:
    pairs.sort()
    return Histogram(tuple(b for b, _ in pairs), tuple(c for _, c in pairs))
