"""Bounded admission (pure): refuse work beyond the queue limits instead of queueing it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    max_queued_requests: int = 64
    max_queued_tokens: int = 1 << 20
    max_active_sequences: int = 256


@dataclass(frozen=True, slots=True)
class Load:
    queued_requests: int  # waiting for (or in) prefill / KV pull
    queued_tokens: int  # prompt tokens of those
    active_sequences: int  # decoding


def check_admission(
    limits: AdmissionLimits, load: Load, prompt_tokens: int, *, decoding: bool
) -> str | None:
    """None to admit, else why not. A prompt larger than the token budget is still
    admitted into an empty queue, so that no request is unservable by size alone."""
    if load.queued_requests >= limits.max_queued_requests:
        limit = limits.max_queued_requests
        return f"{load.queued_requests} requests already queued (limit {limit})"
    if load.queued_requests and load.queued_tokens + prompt_tokens > limits.max_queued_tokens:
        return (
            f"{load.queued_tokens} prompt tokens already queued; {prompt_tokens} more exceed "
            f"the limit of {limits.max_queued_tokens}"
        )
    if decoding and load.active_sequences + load.queued_requests >= limits.max_active_sequences:
        return (
            f"{load.active_sequences} sequences decoding and {load.queued_requests} starting "
            f"(limit {limits.max_active_sequences})"
        )
    return None
