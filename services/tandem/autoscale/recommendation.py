"""Load -> replicas: the first two steps of a scaling decision, before any limits.

:func:`compute_raw_replicas` turns one pool's load into replicas' worth of work (a
float); :func:`compute_recommendation` rounds that to whole replicas with a tolerance
band. Stabilization, steps, bounds and the unschedulable hold are ``policy.py``'s.

Prefill, with an arrival rate (recommended):
    ``(prompt tokens/s + pending tokens / backlog_drain_seconds)
    / target_prefill_tokens_per_second_per_replica``. Arrivals size the pool, so a
    long prompt weighs by its tokens and a burst is seen in the interval it starts;
    the backlog adds what clears it within the drain horizon.
Prefill, queues only (what the v1alpha1 API can express today):
    ``pending tokens / target_queued_tokens_per_replica``.
Decode:
    the largest of (active + queued sequences) / ``target_active_sequences_per_replica``,
    arrivals/s x mean decode seconds / the same target (Little's law: sequences that
    will be busy, visible while the requests are still in prefill), and ready replicas
    x KV utilization / ``target_kv_utilization``.

While a scale-up is in flight (workers starting), queue pressure may hold the pool at
its current size but not push it further: a queue that grows during a cold start says
capacity is late, not that more is needed, and answering it lands extra workers a
cold start later, after the queue is gone. Arrival rates are not capped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.reasons import LoadSignal

# Float noise guard for ceil(): 4.0000000001 replicas is 4, not 5.
_EPSILON = 1e-9
# Load too small to measure (requests without token counts) still needs one worker.
_SOME_LOAD = 1e-6


def compute_raw_replicas(
    config: ScalingConfig, observation: PoolObservation
) -> tuple[float, LoadSignal]:
    """The replicas the load asks for, unrounded, and the signal that asked."""
    if config.role is PoolRole.PREFILL:
        return _prefill(config, observation)
    return _decode(config, observation)


def compute_recommendation(raw: float, current: int, tolerance: float) -> int:
    """Whole replicas for ``raw`` replicas' worth of load, with hysteresis.

    Up only when the load exceeds the current size by more than ``tolerance``, and then
    to the fewest replicas that bring it back within tolerance. Down only when the
    load is below the current size by more than ``tolerance``, and then to the fewest
    replicas that carry it at or under target. In between: stay. No load: zero."""
    if raw <= 0:
        return 0
    within_tolerance = math.ceil(raw / (1.0 + tolerance) - _EPSILON)
    if current <= 0:
        return max(1, within_tolerance)
    if raw > current * (1.0 + tolerance):
        return max(current + 1, within_tolerance)
    if raw < current * (1.0 - tolerance):
        return min(current, max(1, math.ceil(raw - _EPSILON)))
    return current


# How far a step must stand out from counting noise: the gap between the counts
# before and after, in standard deviations of Poisson noise (Skellam: the variance of
# a difference of two counts is their sum). Three: noise alone crosses it in under
# 0.3% of samples.
NOISE_STANDARD_DEVIATIONS = 3.0


@dataclass(frozen=True, slots=True)
class SignalEstimate:
    """A smoothed load signal, the last raw sample, how many samples it has averaged
    since the last step (a fresh level is averaged evenly at first), and the run of
    latest samples beyond the band on one side: how many, their sum, the seconds they
    span and the estimate before the first of them (the evidence for a step, and what
    it is weighed against)."""

    value: float
    last_sample: float
    samples: int = 1
    run: int = 0
    run_sum: float = 0.0
    run_base: float = 0.0
    run_seconds: float = 0.0


def compute_smoothed_signal(
    latest: float | None,
    estimate: SignalEstimate | None,
    config: ScalingConfig,
    *,
    elapsed_seconds: float,
    counts_per_unit: float | None = None,
) -> SignalEstimate | None:
    """A load signal's estimate after a sample ``elapsed_seconds`` after the last one
    (an interval, or less for a round taken early: ``early.py``).

    An exponential average over ``smoothing_seconds``: 25 prompts of 32k in an
    interval vary by +-20% from one interval to the next, active sequences by +-10%,
    and a pool must not follow that. A step is taken at once instead when it is a
    burst starting or ending rather than noise: a change by a factor of more than
    ``1 + 2 x jump`` (up, or down by the same factor), or of more than ``1 + jump`` in
    the same direction twice or more in a row. The new level is the mean of that run
    of samples, then the plain mean of its samples until that would move slower than
    the exponential average.

    ``counts_per_unit`` says the signal counts things (sequences: 1; requests per
    second over an interval: its seconds). Then a step must also stand out from
    counting noise by ``NOISE_STANDARD_DEVIATIONS``: at 0.85 sequences on average a
    sample of 5 is noise (doubling means little at small counts), so is one of 0,
    while 10 sequences going to 30, or 16 requests an interval going to 50, is a
    burst. A run that keeps going collects evidence: 0.85 sequences going to none is
    taken as a step after 11 empty samples, or ``smoothing_seconds`` of them, whichever
    comes first. An unknown value (a counter reset) keeps the estimate."""
    if latest is None:
        return estimate
    if estimate is None:
        return SignalEstimate(latest, latest)
    current = estimate.value
    change = _log_ratio(latest, current)
    band = math.log1p(config.jump)
    # The run goes on while samples stay beyond the band, on its side, around the
    # level it left (the average meanwhile drifts toward them); else one may start.
    rising = estimate.run_sum > estimate.run * estimate.run_base
    run = (0, 0.0, current, 0.0)
    if estimate.run > 0 and _beyond(latest, estimate.run_base, band, rising=rising):
        run = (
            estimate.run + 1,
            estimate.run_sum + latest,
            estimate.run_base,
            estimate.run_seconds + elapsed_seconds,
        )
    elif abs(change) > band:
        run = (1, latest, current, elapsed_seconds)
    count, total, base, seconds = run
    big = abs(change) > math.log1p(2 * config.jump)
    # Nothing for a whole smoothing time: the level is zero, however few counts it was
    # (an exponential average would only approach it).
    emptied = total == 0 and seconds >= config.smoothing_seconds
    if (big or count >= 2) and (emptied or _stands_out(total, count * base, counts_per_unit)):
        return SignalEstimate(total / count, latest, count)
    # A new level is learned as a plain mean of its samples until that mean would
    # move slower than the exponential average does.
    samples = estimate.samples + 1
    weight = max(1.0 / samples, 1.0 - math.exp(-elapsed_seconds / config.smoothing_seconds))
    return SignalEstimate(current + weight * (latest - current), latest, samples, *run)


def _beyond(value: float, level: float, band: float, *, rising: bool) -> bool:
    change = _log_ratio(value, level)
    return change > band if rising else change < -band


def _stands_out(observed: float, expected: float, counts_per_unit: float | None) -> bool:
    """Whether ``observed`` (a sum of samples) differs from ``expected`` (the estimate
    over as many samples) by more than counting noise; always, for a signal that does
    not count."""
    if counts_per_unit is None:
        return True
    seen, usual = observed * counts_per_unit, expected * counts_per_unit
    return abs(seen - usual) > NOISE_STANDARD_DEVIATIONS * math.sqrt(seen + usual)


def _log_ratio(value: float, reference: float) -> float:
    """How far ``value`` is from ``reference``, symmetric up and down (x2 and /2 are
    equally far); from or to zero is infinitely far."""
    if value <= 0 or reference <= 0:
        return 0.0 if value == reference else math.copysign(math.inf, value - reference)
    return math.log(value / reference)


def _cap_while_starting(raw: float, observation: PoolObservation) -> float:
    if observation.starting_replicas > 0:
        return min(raw, float(observation.current_replicas))
    return raw


def _prefill(config: ScalingConfig, observation: PoolObservation) -> tuple[float, LoadSignal]:
    pending = observation.queued_tokens + observation.diverted_prefill_tokens
    rate = observation.prompt_tokens_per_second
    if pending <= 0 and observation.queued_requests <= 0 and not rate:
        return 0.0, LoadSignal.IDLE
    target_rate = config.target_prefill_tokens_per_second_per_replica
    if rate is not None and target_rate is not None:
        by_rate = rate / target_rate
        with_backlog = (rate + pending / config.backlog_drain_seconds) / target_rate
        raw = max(by_rate, _cap_while_starting(with_backlog, observation), _SOME_LOAD)
        return raw, LoadSignal.PROMPT_TOKEN_RATE
    by_queue = pending / config.target_queued_tokens_per_replica
    return max(_cap_while_starting(by_queue, observation), _SOME_LOAD), LoadSignal.QUEUED_TOKENS


def _decode(config: ScalingConfig, observation: PoolObservation) -> tuple[float, LoadSignal]:
    target = config.target_active_sequences_per_replica
    by_active = observation.active_sequences / target
    with_queue = (observation.active_sequences + observation.queued_requests) / target
    by_sequences = max(by_active, _cap_while_starting(with_queue, observation))
    rate, lifetime = observation.requests_per_second, observation.mean_decode_seconds
    if rate is not None and lifetime is not None:
        by_sequences = max(by_sequences, rate * lifetime / target)
    by_kv = observation.ready_replicas * observation.kv_utilization / config.target_kv_utilization
    if by_sequences <= 0 and by_kv <= 0:
        return 0.0, LoadSignal.IDLE
    if by_kv > by_sequences:
        return by_kv, LoadSignal.KV_UTILIZATION
    return by_sequences, LoadSignal.ACTIVE_SEQUENCES
