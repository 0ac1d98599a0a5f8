"""The worker's logic behind each RPC, in domain types (``grpc_server`` only translates).

Prefill side: ``prefill`` runs the prompt, keeps its KV under a lease and returns where
it lives; ``release`` (called by the decode worker once it pulled the KV) or lease expiry
frees it. Decode side: ``decode`` either prefills locally or pulls a remote sequence's
KV (``handoff.pull``), then streams tokens from the shared batch loop. Every engine call
runs on the engine thread (``EngineRunner``); a stream that goes away frees its KV.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from tandem.engines.base import (
    EngineError,
    EngineInfo,
    FinishReason,
    KvCapacityError,
    PrefillResult,
    SamplingParams,
)
from tandem.kv import KvTransport, LeaseTable
from tandem.worker.admission import Load, check_admission
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import (
    InvalidRequest,
    KvHandoffFailed,
    WorkerBusy,
    WorkerDraining,
    WorkerError,
    WrongRole,
)
from tandem.worker.handoff import Handoff, PulledKv
from tandem.worker.metrics import WorkerMetrics
from tandem.worker.peer_directory import PeerDirectory
from tandem.worker.scheduler import DecodeBatcher, StepItem
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    HealthStatus,
    PrefillReply,
    RemoteKvHandle,
    WorkerStats,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class WorkerService:
    def __init__(
        self,
        config: WorkerConfig,
        runner: EngineRunner,
        transport: KvTransport,
        *,
        grpc_address: str,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.grpc_address = grpc_address
        self._runner = runner
        self._engine = runner.engine
        self._transport = transport
        self._leases = LeaseTable(config.lease_s, clock)
        self._batcher = DecodeBatcher(runner)
        self._clients: dict[str, WorkerClient] = {}
        peers = PeerDirectory(transport, self.client_for, config.rpc_timeout_s)
        self._handoff = Handoff(
            config, runner, transport, peers, self._leases, self.client_for, clock
        )
        self._status = HealthStatus.NOT_SERVING
        self._queued_requests = 0
        self._queued_tokens = 0
        self._in_flight = 0
        self._lease_task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()  # something finished or was released (for drain)
        self.metrics = WorkerMetrics(registry or CollectorRegistry())
        self.metrics.watch_load(self.stats)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        await self._transport.register(self._engine.kv_regions())
        self._batcher.start()
        self._lease_task = asyncio.create_task(self._expire_leases(), name="lease-expiry")
        self._status = HealthStatus.SERVING

    async def stop(self) -> None:
        self._status = HealthStatus.NOT_SERVING
        if self._lease_task is not None:
            self._lease_task.cancel()
            await asyncio.gather(self._lease_task, return_exceptions=True)
        await self._batcher.stop()
        await self._handoff.stop()
        for client in self._clients.values():
            await client.close()
        await self._transport.close()

    def client_for(self, address: str) -> WorkerClient:
        """One cached client per peer worker address (KvAgent and Release calls)."""
        client = self._clients.get(address)
        if client is None:
            client = WorkerClient(address, timeout_s=self.config.rpc_timeout_s)
            self._clients[address] = client
        return client

    # -- prefill side ---------------------------------------------------------------

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillReply:
        with self._counted("prefill"):
            self._check_accepting(self.config.role.prefills_for_others, "prefill")
            _check_request(request_id, prompt, sampling)
            with self._tracked(), self._queued(len(prompt), decoding=False):
                started = time.perf_counter()
                result = await self._engine_call(
                    self._engine.prefill, request_id, prompt, sampling, release=request_id
                )
                seconds = time.perf_counter() - started
        self.metrics.prefill_seconds.observe(seconds)
        if result.finish_reason is not None:
            self._runner.call_soon(self._engine.release, request_id)
            return PrefillReply(result.first_token, None, result.finish_reason, seconds)
        lease = self._leases.hold(request_id, result.kv.nbytes)
        kv = RemoteKvHandle(
            worker_id=self.config.worker_id,
            incarnation=self.config.incarnation,
            grpc_address=self.grpc_address,
            backend=self._transport.backend,
            num_tokens=result.num_prompt_tokens,
            ranges=result.kv.ranges,
            opaque=result.opaque,
            lease_expires_unix=lease.expires_at,
        )
        return PrefillReply(result.first_token, kv, None, seconds)

    async def release(self, request_id: str) -> bool:
        """Free KV held for a decode worker; False if it was not held (already released
        or expired, or it is a sequence this worker is decoding itself)."""
        if not self._leases.release(request_id):
            return False
        self._settled.set()
        await self._runner.call(self._engine.release, request_id)
        return True

    async def _expire_leases(self) -> None:
        period = min(1.0, max(0.05, self.config.lease_s / 4))
        while True:
            await asyncio.sleep(period)
            for lease in self._leases.pop_expired():
                logger.warning(
                    "lease of request %s expired (%d bytes never pulled); freeing its KV",
                    lease.request_id,
                    lease.nbytes,
                )
                self._runner.call_soon(self._engine.release, lease.request_id)
                self._settled.set()

    # -- decode side ----------------------------------------------------------------

    async def decode(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        remote: RemoteKvHandle | None = None,
        first_token: int | None = None,
    ) -> AsyncGenerator[DecodeChunk, None]:
        """Stream a completion; the first chunk carries the first generated token."""
        with self._counted("decode"), self._tracked():
            self._check_accepting(self.config.role.decodes, "decode")
            _check_request(request_id, prompt, sampling)
            if remote is not None and first_token is None:
                raise InvalidRequest("a decode with remote_kv needs first_token_id")
            with self._queued(len(prompt) if remote is None else 0, decoding=True):
                if remote is None or first_token is None:
                    head = await self._prefill_locally(request_id, prompt, sampling)
                else:
                    head = await self._pull(request_id, prompt, sampling, remote, first_token)
            # From here on this stream owns the engine sequence and must free it.
            try:
                queue = None if head.finish_reason else self._batcher.add(request_id, sampling)
                yield head
                while queue is not None:
                    chunk = await _next_chunk(queue)
                    yield chunk
                    if chunk.finish_reason is not None:
                        queue = None
            finally:
                self._batcher.remove(request_id)
                self._runner.call_soon(self._engine.release, request_id)

    async def _prefill_locally(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> DecodeChunk:
        result: PrefillResult = await self._engine_call(
            self._engine.prefill, request_id, prompt, sampling, release=request_id
        )
        return DecodeChunk(
            token_ids=(result.first_token,),
            finish_reason=result.finish_reason,
            prompt_tokens=result.num_prompt_tokens,
            prefilled_locally=True,
        )

    async def _pull(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        remote: RemoteKvHandle,
        first_token: int,
    ) -> DecodeChunk:
        backend = self._transport.backend
        try:
            pulled: PulledKv = await self._handoff.pull(request_id, prompt, remote, first_token)
        except KvHandoffFailed:
            self.metrics.kv_transfer_failures.labels(backend).inc()
            raise
        if pulled.nbytes:
            self.metrics.kv_transfer_bytes.labels(backend).inc(pulled.nbytes)
            self.metrics.kv_transfer_seconds.labels(backend).observe(pulled.seconds)
        return DecodeChunk(
            token_ids=(first_token,),
            finish_reason=_first_token_finish(
                first_token, len(prompt), sampling, self._engine.info
            ),
            prompt_tokens=len(prompt),
            prefilled_locally=False,
            kv_bytes_transferred=pulled.nbytes,
            kv_transfer_seconds=pulled.seconds,
        )

    # -- both -----------------------------------------------------------------------

    def health(self) -> HealthInfo:
        return HealthInfo(
            self._status, self.config.worker_id, self.config.incarnation, self.config.role
        )

    def stats(self) -> WorkerStats:
        engine = self._runner.stats
        return WorkerStats(
            queued_requests=self._queued_requests + engine.queued_requests,
            queued_prefill_tokens=self._queued_tokens,
            active_sequences=len(self._batcher),
            kv_blocks_total=engine.kv_blocks_total,
            kv_blocks_free=engine.kv_blocks_free,
            kv_block_size=engine.kv_block_size,
            held_for_transfer=len(self._leases),
        )

    def kv_agent(self) -> AgentInfo:
        return AgentInfo(
            self.config.worker_id,
            self.config.incarnation,
            self._transport.backend,
            self._transport.local_metadata(),
        )

    async def drain(self, grace_s: float) -> int:
        """Refuse new work, wait (at most ``grace_s``) for running requests and for KV
        still held for decode workers; return what is left (0: drained)."""
        if self._status is HealthStatus.SERVING:
            self._status = HealthStatus.DRAINING
            logger.info("draining: %d request(s) in flight", self._busy())
        deadline = time.monotonic() + grace_s
        while self._busy() and (remaining := deadline - time.monotonic()) > 0:
            self._settled.clear()
            # Woken when a request ends or held KV is released; the cap covers lease
            # hand-overs that do not signal.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), min(remaining, 0.5))
        return self._busy()

    def _busy(self) -> int:
        return self._in_flight + len(self._leases)

    # -- helpers --------------------------------------------------------------------

    def _check_accepting(self, role_allows: bool, what: str) -> None:
        if not role_allows:
            raise WrongRole(
                f"worker {self.config.worker_id} has role {self.config.role}: no {what}"
            )
        if self._status is not HealthStatus.SERVING:
            raise WorkerDraining(f"worker {self.config.worker_id} is {self._status}")

    @contextlib.contextmanager
    def _counted(self, rpc: str) -> Iterator[None]:
        outcome = "ok"
        try:
            yield
        except WorkerError as exc:
            outcome = exc.grpc_status.lower()
            raise
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "cancelled"
            raise
        except BaseException:
            outcome = "internal"
            raise
        finally:
            self.metrics.requests.labels(rpc, outcome).inc()

    @contextlib.contextmanager
    def _tracked(self) -> Iterator[None]:
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            self._settled.set()

    @contextlib.contextmanager
    def _queued(self, prompt_tokens: int, *, decoding: bool) -> Iterator[None]:
        load = Load(self._queued_requests, self._queued_tokens, len(self._batcher))
        refusal = check_admission(self.config.limits, load, prompt_tokens, decoding=decoding)
        if refusal is not None:
            raise WorkerBusy(f"worker {self.config.worker_id} is busy: {refusal}")
        self._queued_requests += 1
        self._queued_tokens += prompt_tokens
        try:
            yield
        finally:
            self._queued_requests -= 1
            self._queued_tokens -= prompt_tokens

    async def _engine_call(self, fn: Callable[..., T], *args: Any, release: str | None = None) -> T:
        """An engine call with engine errors turned into worker errors; if the caller
        goes away mid-call, the sequence ``release`` names is freed once it completes."""
        on_abandon = None if release is None else (lambda _: self._engine.release(release))
        try:
            return await self._runner.call(fn, *args, on_abandon=on_abandon)
        except KvCapacityError as exc:
            raise WorkerBusy(str(exc)) from exc
        except EngineError as exc:
            raise InvalidRequest(str(exc)) from exc


async def _next_chunk(queue: asyncio.Queue[StepItem]) -> DecodeChunk:
    """Every token already waiting, as one chunk (a slow reader gets fewer, larger ones)."""
    items = [await queue.get()]
    while not queue.empty():
        items.append(queue.get_nowait())
    tokens: list[int] = []
    for item in items:
        if isinstance(item, WorkerError):
            raise item
        tokens.append(item.token)
        if item.finish_reason is not None:
            return DecodeChunk(tuple(tokens), item.finish_reason)
    return DecodeChunk(tuple(tokens))


def _check_request(request_id: str, prompt: Sequence[int], sampling: SamplingParams) -> None:
    if not request_id:
        raise InvalidRequest("request_id must not be empty")
    if not prompt:
        raise InvalidRequest("prompt_token_ids must not be empty")
    if sampling.max_tokens < 1:
        raise InvalidRequest("sampling.max_tokens must be at least 1")


def _first_token_finish(
    first_token: int, prompt_tokens: int, sampling: SamplingParams, info: EngineInfo
) -> FinishReason | None:
    """Whether the prefill's first token already ends the sequence (same rule as the
    engine applies after each step)."""
    if first_token == info.eos_token_id or first_token in sampling.stop_token_ids:
        return FinishReason.STOP
    if sampling.max_tokens <= 1 or prompt_tokens + 1 >= info.max_context:
        return FinishReason.LENGTH
    return None
