"""What the router needs from a worker: the shape of ``tandem.worker.client.WorkerClient``.

The real client talks gRPC (``worker.proto``); ``tandem_dev.doubles.inprocess`` provides an
in-process fake with the same signatures for tests and benchmarks. Every call takes a
deadline. Failures raise ``tandem.worker.errors.WorkerCallError`` carrying the gRPC
status name; :func:`classify` turns that into what the router does next.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from tandem.engines.base import SamplingParams
from tandem.worker.errors import KvConfigMismatch, WorkerCallError
from tandem.worker.types import (
    DecodeChunk,
    HealthInfo,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    WorkerStats,
)

__all__ = [
    "DecodeChunk",
    "HandoffFailure",
    "HealthInfo",
    "KvEventBatch",
    "PrefillReply",
    "RemoteKvHandle",
    "WorkerCallError",
    "WorkerClient",
    "WorkerClientFactory",
    "WorkerErrorKind",
    "WorkerStats",
    "call_error",
    "classify",
    "classify_handoff_failure",
]


class WorkerErrorKind(enum.StrEnum):
    UNAVAILABLE = "unavailable"  # worker gone or draining: mark unhealthy, go elsewhere
    TIMEOUT = "timeout"  # deadline passed
    CAPACITY = "capacity"  # worker full (KV or queue): try another
    INVALID = "invalid"  # the request itself is bad: do not retry
    KV_HANDOFF = "kv_handoff"  # pulling the prefilled KV failed: prefill locally instead
    INTERNAL = "internal"  # worker bug, wrong role, engine failure: try another


_KIND_BY_STATUS = {
    "UNAVAILABLE": WorkerErrorKind.UNAVAILABLE,
    "DEADLINE_EXCEEDED": WorkerErrorKind.TIMEOUT,
    "RESOURCE_EXHAUSTED": WorkerErrorKind.CAPACITY,
    "INVALID_ARGUMENT": WorkerErrorKind.INVALID,
    "OUT_OF_RANGE": WorkerErrorKind.INVALID,
    "ABORTED": WorkerErrorKind.KV_HANDOFF,
}
STATUS_BY_KIND = {kind: status for status, kind in _KIND_BY_STATUS.items()} | {
    WorkerErrorKind.INTERNAL: "INTERNAL"
}


def classify(error: WorkerCallError) -> WorkerErrorKind:
    """What a failed call means for routing (by its gRPC status name)."""
    return _KIND_BY_STATUS.get(error.grpc_status, WorkerErrorKind.INTERNAL)


class HandoffFailure(enum.StrEnum):
    """Why a KV handoff did not happen (the request is prefilled again either way)."""

    # The decode worker refused KV from a prefill worker of another engine config (a
    # rollout's other revision): routing pairs by config digest, so this should not occur.
    CONFIG_MISMATCH = "config_mismatch"
    FAILED = "failed"  # the prefill peer went away, the transfer failed or timed out


def classify_handoff_failure(error: WorkerCallError) -> HandoffFailure:
    """By the worker's error code (sent with the failed call), not its gRPC status,
    which a refusal shares with every other handoff failure."""
    if error.remote_code == KvConfigMismatch.code:
        return HandoffFailure.CONFIG_MISMATCH
    return HandoffFailure.FAILED


def call_error(address: str, kind: WorkerErrorKind, message: str) -> WorkerCallError:
    """A failure the router detects itself (a stall, a stream ending early)."""
    return WorkerCallError(address, STATUS_BY_KIND[kind], message)


class WorkerClient(Protocol):
    """One worker at ``address``; safe to share between concurrent requests."""

    address: str

    async def prefill(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        timeout_s: float | None = None,
    ) -> PrefillReply: ...

    def decode(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        remote_kv: RemoteKvHandle | None = None,
        first_token: int | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[DecodeChunk]:
        """Stream the completion, starting with the first generated token (the
        prefill's, when ``remote_kv`` is given). Leaving early cancels the call and
        frees the sequence's KV on the worker."""
        ...

    async def release(self, request_id: str, *, timeout_s: float | None = None) -> bool: ...

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo: ...

    def kv_events(self) -> AsyncIterator[KvEventBatch]:
        """The worker's KV event stream: a snapshot, then every change; long-lived
        (no deadline), ended by leaving the iteration."""
        ...

    async def stats(self, *, timeout_s: float | None = None) -> WorkerStats: ...

    async def close(self) -> None: ...


# address -> client for the worker there
WorkerClientFactory = Callable[[str], WorkerClient]
