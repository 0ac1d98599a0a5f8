"""The worker's logic behind each RPC, in domain types (``grpc_server`` only translates).

Prefill side: ``prefill`` runs the prompt, keeps its KV under a lease and returns where
it lives; a decode worker ``claim_kv``s it before reading (the blocks are then pinned for
the claimed read time plus a margin, on this host's monotonic clock) and ``release``s it
after; the blocks are freed once no claim can still be reading them (``kv.lease``).
Decode side: ``decode`` either prefills locally or continues a sequence prefilled
elsewhere (refusing KV from an engine with another config digest), then streams tokens.
How an engine runs a request is the engine driver's business (``engine_driver``): a
synchronous engine on its engine thread with Tandem's batch loop and KV transport, or an
asynchronous engine (TensorRT-LLM) that schedules and moves KV itself. The policy here —
admission, leases, drain, metrics — is the same for both. A stream that goes away frees
its sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry

from tandem.engines.base import AsyncEngine, EngineInfo, EngineLost, FinishReason, SamplingParams
from tandem.kv import KvTransport, LeaseTable, ReleaseOutcome
from tandem.security.credentials import CredentialStore
from tandem.telemetry.gpu import HealthVerdict
from tandem.worker.admission import Load, check_admission
from tandem.worker.async_driver import AsyncEngineDriver
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.digest import compute_config_digest
from tandem.worker.engine_driver import EngineDriver, SyncEngineDriver
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import (
    InvalidRequest,
    KvConfigMismatch,
    KvHandoffFailed,
    WorkerBusy,
    WorkerDraining,
    WorkerError,
    WrongRole,
)
from tandem.worker.kv_event_log import KvEventLog
from tandem.worker.metrics import WorkerMetrics
from tandem.worker.peer_clients import PeerClients
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    HealthStatus,
    KvClaim,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    WorkerStats,
)

logger = logging.getLogger(__name__)


class WorkerService:
    def __init__(
        self,
        config: WorkerConfig,
        engine: EngineRunner | AsyncEngine,
        transport: KvTransport,
        *,
        grpc_address: str,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
        tokenizer_fingerprint: str = "",
        credentials: CredentialStore | None = None,
    ) -> None:
        """``engine`` is a synchronous engine on its ``EngineRunner``, or an
        ``AsyncEngine`` (with ``worker.engine_kv.EngineManagedKv`` as ``transport``).
        ``clock`` is monotonic: it times leases, pins and reads, never compared across
        hosts. ``credentials``: the cluster's, for calls to peer workers (mutual TLS)."""
        self.config = config
        self.grpc_address = grpc_address
        # The node's GPU verdict (tandem.telemetry); workers without GPUs stay healthy.
        self.gpu_health: Callable[[], HealthVerdict] = lambda: _NO_GPU
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self._transport = transport
        self._leases = LeaseTable(config.lease_s, clock, margin_s=config.kv_pin_margin_s)
        self._peers = PeerClients(config.rpc_timeout_s, config.peer_idle_s, clock, credentials)
        self.metrics = WorkerMetrics(registry or CollectorRegistry())
        transport.on_refused_peer = lambda _peer: self.metrics.refused_peers.labels("kv_tcp").inc()
        self.kv_event_log = KvEventLog(config.worker_id, config.incarnation, _block_size(engine))
        self._driver: EngineDriver
        if isinstance(engine, EngineRunner):
            self._driver = SyncEngineDriver(
                config,
                engine,
                transport,
                self._leases,
                self.client_for,
                clock,
                self.metrics.kv_quarantined_bytes.inc,
                self.kv_event_log.publish_threadsafe,
                self._engine_lost,
            )
        else:
            self._driver = AsyncEngineDriver(
                config,
                engine,
                self._leases,
                self.client_for,
                kv_event_sink=self.kv_event_log.publish,
            )
        self._engine = self._driver.engine
        self._peers.on_evict(self._driver.forget_peer)
        self.config_digest = compute_config_digest(self._driver.info)
        self._status = HealthStatus.NOT_SERVING
        # Set when the engine can serve nothing more: the process should exit (main.py).
        self.lost = asyncio.Event()
        self._queued_requests = 0
        self._queued_tokens = 0
        self._in_flight = 0
        self._lease_task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()  # something finished or was released (for drain)
        self.metrics.watch_load(self.stats)
        self.metrics.watch_engine(self._driver.stats)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        self.kv_event_log.bind_loop(asyncio.get_running_loop())
        await self._driver.start()
        self._lease_task = asyncio.create_task(self._expire_leases(), name="lease-expiry")
        self._status = HealthStatus.SERVING

    def _engine_lost(self, exc: EngineLost) -> None:
        """Out of routing at once (health says not serving, new calls are refused); what
        it held has failed with a clean error, to be retried elsewhere."""
        self._status = HealthStatus.NOT_SERVING
        self.lost.set()

    async def stop(self) -> None:
        self._status = HealthStatus.NOT_SERVING
        self.kv_event_log.close()
        if self._lease_task is not None:
            self._lease_task.cancel()
            await asyncio.gather(self._lease_task, return_exceptions=True)
        await self._driver.stop()
        await self._peers.close()
        await self._transport.close()

    def client_for(self, address: str) -> WorkerClient:
        """One cached client per peer worker address (KvAgent, ClaimKv and Release)."""
        return self._peers.get(address)

    @property
    def known_peers(self) -> int:
        """Peer workers this worker holds a client for."""
        return len(self._peers)

    # -- prefill side ---------------------------------------------------------------

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillReply:
        with self._counted("prefill"):
            self._check_accepting(self.config.role.prefills_for_others, "prefill")
            _check_request(request_id, prompt, sampling)
            with self._tracked(), self._queued(len(prompt), decoding=False):
                started = time.perf_counter()
                result = await self._driver.prefill(request_id, prompt, sampling)
                seconds = time.perf_counter() - started
        self.metrics.prefill_seconds.observe(seconds)
        if result.finish_reason is not None:
            self._driver.release_soon(request_id)
            return PrefillReply(result.first_token, None, result.finish_reason, seconds)
        self._leases.hold(request_id, result.kv.nbytes)
        kv = RemoteKvHandle(
            worker_id=self.config.worker_id,
            incarnation=self.config.incarnation,
            grpc_address=self.grpc_address,
            backend=self._transport.backend,
            num_tokens=result.num_prompt_tokens,
            ranges=result.kv.ranges,
            opaque=result.opaque,
            config_digest=self.config_digest,
        )
        return PrefillReply(result.first_token, kv, None, seconds)

    def claim_kv(self, request_id: str, incarnation: str, claimer: str, read_s: float) -> KvClaim:
        """Pin held KV for ``claimer``'s read (see ``kv.lease``); refused when this is
        another incarnation than the handle named, or the lease is gone."""
        if incarnation != self.config.incarnation:
            self.metrics.kv_claims.labels("wrong_incarnation").inc()
            return KvClaim(
                False,
                reason=f"{self.config.worker_id} is now incarnation {self.config.incarnation},"
                f" not {incarnation}: it restarted and that KV is gone",
            )
        claim = self._leases.claim(request_id, claimer, read_s)
        if claim is None:
            self.metrics.kv_claims.labels("gone").inc()
            return KvClaim(
                False,
                reason=f"the KV of request {request_id} is no longer held on "
                f"{self.config.worker_id} (released, or its {self._leases.lease_s:g}s "
                "lease ran out before the claim)",
            )
        self.metrics.kv_claims.labels("granted").inc()
        self._transport.expect_reads(self._leases.pinned)
        return KvClaim(True, claim.read_s)

    async def release(self, request_id: str, claimer: str | None = None) -> bool:
        """``claimer`` is done with held KV (None: the router gave the request up); the
        blocks are freed now, or when the last other claim's pin runs out. False if it
        was not held (already freed, or a sequence this worker is decoding itself)."""
        outcome = self._leases.release(request_id, claimer)
        self._transport.expect_reads(self._leases.pinned)
        if outcome is ReleaseOutcome.UNKNOWN:
            return False
        if outcome is ReleaseOutcome.FREE_NOW:
            self._settled.set()
            await self._driver.release(request_id)
        return True

    async def _expire_leases(self) -> None:
        period = min(1.0, max(0.05, self.config.lease_s / 4))
        while True:
            await asyncio.sleep(period)
            for lease in self._leases.pop_expired():
                if not lease.released:
                    logger.warning(
                        "lease of request %s ran out (%d bytes never pulled); freeing its KV",
                        lease.request_id,
                        lease.nbytes,
                    )
                self._driver.release_soon(lease.request_id)
                self._settled.set()
            self._transport.expect_reads(self._leases.pinned)
            self._peers.evict_idle()

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
            if remote is not None:
                self._check_digest(request_id, remote)
            with self._queued(len(prompt) if remote is None else 0, decoding=True):
                if remote is None or first_token is None:
                    stream = self._driver.open_local(request_id, prompt, sampling)
                else:
                    finish = _first_token_finish(
                        first_token, len(prompt), sampling, self._driver.info
                    )
                    stream = self._driver.open_remote(
                        request_id, prompt, sampling, remote, first_token, finish
                    )
                head = await self._head(stream)
            # From here on this stream owns the engine sequence; closing it frees it.
            try:
                yield head
                async for chunk in stream:
                    yield chunk
            finally:
                await stream.aclose()

    def _check_digest(self, request_id: str, remote: RemoteKvHandle) -> None:
        if remote.config_digest == self.config_digest:
            return
        self.metrics.kv_refused.labels("config_mismatch").inc()
        raise KvConfigMismatch(
            f"request {request_id}: prefill worker {remote.worker_id} runs engine config "
            f"{remote.config_digest or '(none published)'}, this decode worker "
            f"{self.config_digest}: refusing its KV (different model or KV layout)"
        )

    async def _head(self, stream: AsyncGenerator[DecodeChunk, None]) -> DecodeChunk:
        """The stream's first chunk, counted as a KV transfer when it moved KV."""
        backend = self._transport.backend
        try:
            head = await anext(stream)
        except KvHandoffFailed:
            self.metrics.kv_transfer_failures.labels(backend).inc()
            raise
        except StopAsyncIteration:
            raise WorkerError("the engine ended the stream before its first token") from None
        if head.kv_bytes_transferred:
            self.metrics.kv_transfer_bytes.labels(backend).inc(head.kv_bytes_transferred)
            self.metrics.kv_transfer_seconds.labels(backend).observe(head.kv_transfer_seconds)
        return head

    # -- both -----------------------------------------------------------------------

    def health(self) -> HealthInfo:
        status = self._status
        if status is HealthStatus.SERVING and not self.gpu_health().healthy:
            status = HealthStatus.NOT_SERVING  # a failed GPU takes the worker out of routing
        return HealthInfo(
            status,
            self.config.worker_id,
            self.config.incarnation,
            self.config.role,
            self.config_digest,
            self.tokenizer_fingerprint,
        )

    def stats(self) -> WorkerStats:
        engine = self._driver.stats()
        return WorkerStats(
            queued_requests=self._queued_requests + engine.queued_requests,
            queued_prefill_tokens=self._queued_tokens,
            active_sequences=self._driver.active_sequences(),
            kv_blocks_total=engine.kv_blocks_total,
            kv_blocks_free=engine.kv_blocks_free,
            kv_block_size=engine.kv_block_size,
            held_for_transfer=len(self._leases),
            prefill_seconds_per_token=engine.prefill_seconds_per_token,
            onboard_seconds_per_token=engine.onboard_seconds_per_token,
        )

    def kv_events(self) -> AsyncGenerator[KvEventBatch, None]:
        """This worker's KV event stream (a snapshot, then every change)."""
        return self.kv_event_log.subscribe()

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
        load = Load(self._queued_requests, self._queued_tokens, self._driver.active_sequences())
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


_NO_GPU = HealthVerdict(True, ("no GPU telemetry",))


def _block_size(engine: EngineRunner | AsyncEngine) -> int:
    return (
        engine.engine.info.kv_block_size
        if isinstance(engine, EngineRunner)
        else (engine.info.kv_block_size)
    )


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
