"""An in-process worker behind the ``WorkerClient`` Protocol: a test and benchmark harness.

It runs no model. Tokens are a deterministic function of the prompt and position, so a
disaggregated request (prefill here, decode there) yields exactly what a local one
does, as with a real engine. Parked KV lives in a ``KvLedger`` shared by the workers of
one fake cluster, so decode workers can "pull" what prefill workers parked, releases
are observable, and leaks show up in tests. Faults are injected per call.

With no delays configured it answers immediately: the "null engine" the frontend
benchmark measures router and frontend overhead against.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from tandem.engines.base import FinishReason, SamplingParams
from tandem.kv.events import KvCacheEvent, Tier
from tandem.router.policy import WorkerRole
from tandem.router.ports import (
    DecodeChunk,
    HealthInfo,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    WorkerCallError,
    WorkerErrorKind,
    WorkerStats,
    call_error,
)
from tandem.worker.errors import KvConfigMismatch
from tandem.worker.kv_event_log import KvEventLog
from tandem.worker.types import HealthStatus, Role

VOCAB = 256  # byte tokens only: every generated token detokenizes to text
KV_BLOCK_SIZE = 16


def fake_token(prompt: Sequence[int], position: int, seed: int | None) -> int:
    """The token a fake model generates at ``position`` (0 = first) after ``prompt``.

    Like a real model's greedy choice it is a function of everything before it, so a
    stream resumed from its prompt plus the tokens already sent (a migration) goes on
    exactly as it would have."""
    tail, length = list(prompt[-8:]), len(prompt)
    for _ in range(position + 1):
        token = (sum(tail) * 31 + length * 17 + (seed or 0) * 13) % 94 + 32
        tail, length = [*tail[-7:], token], length + 1
    return token


@dataclass
class KvLedger:
    """Parked KV across a fake cluster: request id -> prefill worker address."""

    parked: dict[str, str] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)


@dataclass
class Faults:
    """Failures to inject: each list is consumed one entry per call."""

    prefill: list[WorkerErrorKind] = field(default_factory=list)
    decode_before_first: list[WorkerErrorKind] = field(default_factory=list)
    decode_after_first: list[WorkerErrorKind] = field(default_factory=list)


class InProcessWorker:
    _incarnations = itertools.count(1)

    def __init__(
        self,
        address: str,
        role: WorkerRole,
        ledger: KvLedger | None = None,
        *,
        prefill_delay: float = 0.0,
        pull_delay: float = 0.0,
        token_delay: float = 0.0,
        eos_token: int | None = None,
        eos_at: int | None = None,
        tokenizer_fingerprint: str = "",
        config_digest: str = "",
    ) -> None:
        self.address = address
        self.role = role
        self.ledger = ledger if ledger is not None else KvLedger()
        self.prefill_delay = prefill_delay
        self.pull_delay = pull_delay
        self.token_delay = token_delay
        self.eos_token, self.eos_at = eos_token, eos_at
        self.tokenizer_fingerprint = tokenizer_fingerprint
        # The engine config its KV belongs to (a real worker's ``compute_config_digest``):
        # a decode worker refuses KV prefilled under another one.
        self.config_digest = config_digest
        self.faults = Faults()
        self.alive = True
        self.draining = False
        self.incarnation = f"inc-{next(self._incarnations)}"
        self.kv_log = KvEventLog(address, self.incarnation, KV_BLOCK_SIZE)
        self.prefill_calls = 0
        self.decode_calls = 0
        self.local_prefills = 0
        self.cancelled_streams = 0
        self.active = 0
        # What its engine measured (WorkerStats): 0.0 and none, as before any prompt.
        self.prefill_seconds_per_token = 0.0
        self.onboard_seconds_per_token: dict[Tier, float] = {}
        # Prompt tokens waiting for prefill, as a busy engine reports them in its stats.
        self.queued_prefill_tokens = 0
        self.closed = False

    def kill(self) -> None:
        self.alive = False
        self.kv_log.close()

    def restart(self) -> None:
        self.alive = True
        self.incarnation = f"inc-{next(self._incarnations)}"
        self.kv_log.close()
        self.kv_log = KvEventLog(self.address, self.incarnation, KV_BLOCK_SIZE)
        for request_id in [r for r, w in self.ledger.parked.items() if w == self.address]:
            del self.ledger.parked[request_id]

    def _check_alive(self) -> None:
        if not self.alive:
            raise call_error(self.address, WorkerErrorKind.UNAVAILABLE, "connection refused")

    async def prefill(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        timeout_s: float | None = None,
    ) -> PrefillReply:
        self._check_alive()
        self.prefill_calls += 1
        if self.role is WorkerRole.DECODE:
            raise call_error(self.address, WorkerErrorKind.INTERNAL, "does not prefill")
        if self.faults.prefill:
            raise call_error(self.address, self.faults.prefill.pop(0), "injected fault")
        if self.prefill_delay:
            await asyncio.sleep(self.prefill_delay)
        self._check_alive()
        first = self._token(prompt, 0, sampling)
        finish = self._finish(first, 1, sampling)
        if finish is not None:  # nothing to decode: no KV is kept
            return PrefillReply(first, None, finish, 0.0)
        self.ledger.parked[request_id] = self.address
        kv = RemoteKvHandle(
            worker_id=self.address,
            incarnation=self.incarnation,
            grpc_address=self.address,
            backend="tcp",
            num_tokens=len(prompt),
            ranges=(),
            config_digest=self.config_digest,
        )
        return PrefillReply(first, kv, None, 0.0)

    async def decode(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        remote_kv: RemoteKvHandle | None = None,
        first_token: int | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[DecodeChunk]:
        self._check_alive()
        self.decode_calls += 1
        if self.role is WorkerRole.PREFILL:
            raise call_error(self.address, WorkerErrorKind.INTERNAL, "does not decode")
        if self.faults.decode_before_first:
            raise call_error(self.address, self.faults.decode_before_first.pop(0), "injected")
        kv_bytes = 0
        if remote_kv is not None:
            if remote_kv.config_digest != self.config_digest:
                # As tandem.worker.service refuses it: ABORTED, with the worker's code.
                raise WorkerCallError(
                    self.address,
                    "ABORTED",
                    f"prefill worker runs engine config {remote_kv.config_digest!r}, "
                    f"this one {self.config_digest!r}: refusing its KV",
                    remote_code=KvConfigMismatch.code,
                )
            if self.pull_delay:
                await asyncio.sleep(self.pull_delay)
            owner = self.ledger.parked.pop(request_id, None)
            if owner != remote_kv.grpc_address:
                raise call_error(self.address, WorkerErrorKind.KV_HANDOFF, "KV not parked")
            self.ledger.released.append(request_id)
            kv_bytes = len(prompt) * 64
        else:
            self.local_prefills += 1
            if self.prefill_delay:
                await asyncio.sleep(self.prefill_delay)
        self.active += 1
        finished = False
        try:
            for position in range(sampling.max_tokens):
                if self.token_delay and position:
                    await asyncio.sleep(self.token_delay)
                self._check_alive()
                if position == 1 and self.faults.decode_after_first:
                    kind = self.faults.decode_after_first.pop(0)
                    raise call_error(self.address, kind, "injected")
                token = self._token(prompt, position, sampling)
                finish = self._finish(token, position + 1, sampling)
                first = position == 0
                yield DecodeChunk(
                    token_ids=(token,),
                    finish_reason=finish,
                    prompt_tokens=len(prompt) if first else 0,
                    prefilled_locally=first and remote_kv is None,
                    kv_bytes_transferred=kv_bytes if first else 0,
                    kv_transfer_seconds=0.001 if first and kv_bytes else 0.0,
                )
                if finish is not None:
                    finished = True
                    return
        finally:
            self.active -= 1
            if not finished:
                self.cancelled_streams += 1

    def _token(self, prompt: Sequence[int], position: int, sampling: SamplingParams) -> int:
        if self.eos_token is not None and self.eos_at == position:
            return self.eos_token
        return fake_token(prompt, position, sampling.seed)

    def _finish(self, token: int, generated: int, sampling: SamplingParams) -> FinishReason | None:
        if token in sampling.stop_token_ids:
            return FinishReason.STOP
        if generated >= sampling.max_tokens:
            return FinishReason.LENGTH
        return None

    async def release(self, request_id: str, *, timeout_s: float | None = None) -> bool:
        self._check_alive()
        if self.ledger.parked.get(request_id) != self.address:
            return False
        del self.ledger.parked[request_id]
        self.ledger.released.append(request_id)
        return True

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo:
        self._check_alive()
        status = HealthStatus.DRAINING if self.draining else HealthStatus.SERVING
        return HealthInfo(
            status,
            self.address,
            self.incarnation,
            Role(self.role.value),
            tokenizer_fingerprint=self.tokenizer_fingerprint,
            config_digest=self.config_digest,
        )

    async def stats(self, *, timeout_s: float | None = None) -> WorkerStats:
        self._check_alive()
        return WorkerStats(
            queued_requests=0,
            queued_prefill_tokens=self.queued_prefill_tokens,
            active_sequences=self.active,
            kv_blocks_total=1024,
            kv_blocks_free=1024,
            kv_block_size=KV_BLOCK_SIZE,
            held_for_transfer=sum(1 for w in self.ledger.parked.values() if w == self.address),
            prefill_seconds_per_token=self.prefill_seconds_per_token,
            onboard_seconds_per_token=dict(self.onboard_seconds_per_token),
        )

    def publish_kv(self, events: list[KvCacheEvent]) -> None:
        """Report KV cache events, as an engine with a prefix cache would."""
        self.kv_log.publish(events)

    async def kv_events(self) -> AsyncIterator[KvEventBatch]:
        self._check_alive()
        async for batch in self.kv_log.subscribe():
            yield batch
        self._check_alive()  # a stream that ends because the worker died fails

    async def close(self) -> None:
        self.closed = True


class InProcessCluster:
    """Workers by address, and the factory a router builds clients with."""

    def __init__(self, workers: Sequence[InProcessWorker]) -> None:
        self.workers = {w.address: w for w in workers}

    def __call__(self, address: str) -> InProcessWorker:
        return self.workers[address]
