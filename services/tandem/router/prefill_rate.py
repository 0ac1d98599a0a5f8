"""A prefill worker's throughput as the router measures it (pure).

A prompt sent to a prefill worker finds some tokens queued there before it. The worker
works through its queue, so its reply comes once those and the prompt's own tokens are
prefilled: (tokens ahead + own) / seconds until the reply is one sample of the worker's
rate, with queueing part of the measurement instead of spoiling it. Counted in the same
units as the queue the policy compares it with (whole prompts, cached parts included),
so "queued tokens / rate" is the time a new prompt would take there.
"""

from __future__ import annotations

# Weight of the newest sample: a handful of prompts makes the estimate, and a worker
# that slows (a longer context mix, a noisy neighbour) is followed within a few more.
SAMPLE_WEIGHT = 0.3


def update_prefill_rate(previous: float | None, tokens: int, seconds: float) -> float | None:
    """The rate estimate after one more prefill that took ``seconds`` to clear ``tokens``
    (its own plus those queued ahead of it); samples without time or tokens are ignored."""
    if seconds <= 0 or tokens <= 0:
        return previous
    sample = tokens / seconds
    if previous is None:
        return sample
    return previous + SAMPLE_WEIGHT * (sample - previous)
