"""Decode side of a disaggregated request: pull a prefilled sequence's KV.

``pull`` resolves the prefill worker's KV agent (``PeerDirectory``), reserves room in the
local engine, *claims* the remote KV (the prefill worker pins it for the granted read
time plus a margin, on its own clock), reads the bytes (NIXL or TCP) within the granted
time measured on this host's monotonic clock from before the claim was sent, commits,
and then releases the claim. No timestamp of another host is ever compared with ours.

A failure before the commit frees the reserved blocks, unless the transport could not
stop its transfer (``local_unsafe``): those blocks are then quarantined, never reused.
The claim is released once the transfer has stopped; otherwise its pin runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tandem.engines.base import EngineError, KvCapacityError, KvLayout, ModelledKvTransfer
from tandem.kv import KvError, KvTransferError, KvTransport, LeaseTable, agent_name
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import (
    InvalidRequest,
    KvHandoffFailed,
    KvLayoutMismatch,
    WorkerBusy,
    WorkerCallError,
)
from tandem.worker.peer_directory import PeerDirectory
from tandem.worker.types import RemoteKvHandle

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PulledKv:
    nbytes: int
    seconds: float
    descriptors: int


def check_layouts_match(remote: RemoteKvHandle, local: KvLayout, prompt_tokens: int) -> None:
    """Both engines must split the sequence into the same ranges (same model and block
    size); raise KvLayoutMismatch naming the first difference otherwise."""
    if remote.num_tokens != prompt_tokens:
        raise KvLayoutMismatch(
            f"remote KV covers {remote.num_tokens} tokens, the prompt has {prompt_tokens}"
        )
    if len(remote.ranges) != len(local.ranges):
        raise KvLayoutMismatch(
            f"remote KV has {len(remote.ranges)} ranges, the local layout "
            f"{len(local.ranges)}: do both workers run the same model config?"
        )
    for i, (far, near) in enumerate(zip(remote.ranges, local.ranges, strict=True)):
        if far.length != near.length:
            raise KvLayoutMismatch(
                f"KV range #{i} is {far.length} bytes remotely but {near.length} locally"
            )


class Handoff:
    def __init__(
        self,
        config: WorkerConfig,
        runner: EngineRunner,
        transport: KvTransport,
        peers: PeerDirectory,
        leases: LeaseTable,
        client_for: Callable[[str], WorkerClient],
        clock: Callable[[], float] = time.monotonic,
        on_quarantine: Callable[[int], None] = lambda _: None,
    ) -> None:
        """``clock`` is this host's monotonic clock (read deadlines); ``on_quarantine``
        is told how many bytes of local KV were quarantined after an unstoppable read."""
        self._config = config
        self._clock = clock
        self._runner = runner
        self._transport = transport
        self._peers = peers
        self._leases = leases
        self._client_for = client_for
        self._on_quarantine = on_quarantine
        self._claimer = agent_name(config.worker_id, config.incarnation)
        self._background: set[asyncio.Task[None]] = set()

    async def pull(
        self,
        request_id: str,
        prompt: Sequence[int],
        remote: RemoteKvHandle,
        first_token: int,
    ) -> PulledKv:
        """Make ``request_id`` an active sequence in the local engine, from remote KV."""
        if (remote.worker_id, remote.incarnation) == (
            self._config.worker_id,
            self._config.incarnation,
        ):
            return self._adopt_own(request_id)
        peer = await self._peers.resolve(remote)
        engine = self._runner.engine
        layout = await self._reserve(request_id, prompt, first_token)
        quarantined = False
        try:
            check_layouts_match(remote, layout, len(prompt))
            # The read deadline counts from before the claim leaves this host: the prefill
            # side pins the blocks from when the claim arrives, so the pin outlives it.
            started = self._clock()
            read_s = await self._claim(request_id, remote)
            remaining = started + read_s - self._clock()
            if remaining <= 0:
                self._release_remote_soon(remote, request_id)
                raise KvHandoffFailed(
                    f"claiming the KV of request {request_id} on {remote.worker_id} used up "
                    f"its {read_s:.3g}s read window; not reading it"
                )
            try:
                stats = await self._transport.read(peer, remote.ranges, layout.ranges, remaining)
            except KvError as exc:
                quarantined = isinstance(exc, KvTransferError) and exc.local_unsafe
                if not quarantined:
                    self._release_remote_soon(remote, request_id)
                self._peers.forget(remote.worker_id)
                why = await self._peers.explain_failure(remote)
                raise KvHandoffFailed(
                    f"pulling KV of request {request_id} failed: {exc.message} ({why})"
                ) from exc
            await self._wait_modelled_transfer(len(prompt), stats.seconds)
            await self._runner.call(engine.commit, request_id)
        except BaseException as failure:
            if quarantined:
                # The transfer may still write into these blocks: never hand them out again.
                logger.error(
                    "request %s: a KV read could not be stopped; quarantining %d bytes of KV",
                    request_id,
                    layout.nbytes,
                )
                self._on_quarantine(layout.nbytes)
            elif isinstance(failure, Exception):
                # Freed before the failure is reported: whoever hears of it (the router
                # retrying elsewhere, a Stats call) already sees the blocks back.
                await self._runner.call(engine.release, request_id)
            else:  # cancelled: nothing may be awaited any more
                self._runner.call_soon(engine.release, request_id)
            raise
        self._release_remote_soon(remote, request_id)
        logger.debug(
            "pulled %d bytes for %s from %s in %.4fs (%d descriptors)",
            stats.nbytes,
            request_id,
            peer.name,
            stats.seconds,
            stats.descriptors,
        )
        return PulledKv(stats.nbytes, stats.seconds, stats.descriptors)

    async def _wait_modelled_transfer(self, num_tokens: int, took_s: float) -> None:
        """An engine that moves a stand-in for its KV (``ModelledKvTransfer``): the rest
        of the time the real bytes would take, with the remote KV still claimed."""
        engine = self._runner.engine
        if isinstance(engine, ModelledKvTransfer):
            left = engine.kv_transfer_delay_s(num_tokens) - took_s
            if left > 0:
                await asyncio.sleep(left)

    async def _claim(self, request_id: str, remote: RemoteKvHandle) -> float:
        """Pin the remote KV for our read; the granted read time (seconds)."""
        client = self._client_for(remote.grpc_address)
        timeout = self._config.kv_transfer_timeout_s
        try:
            claim = await client.claim_kv(
                request_id,
                remote.incarnation,
                self._claimer,
                timeout,
                timeout_s=min(self._config.rpc_timeout_s, timeout),
            )
        except WorkerCallError as exc:
            raise KvHandoffFailed(
                f"cannot claim the KV of request {request_id} on {remote.worker_id}: {exc.message}"
            ) from exc
        if not claim.claimed:
            raise KvHandoffFailed(f"prefill worker refused the claim: {claim.reason}")
        return claim.read_s

    def _adopt_own(self, request_id: str) -> PulledKv:
        """The KV was prefilled here (role both): take over the held sequence, no copy."""
        if not self._leases.take(request_id):
            raise KvHandoffFailed(
                f"request {request_id} is no longer held on this worker (lease expired?)"
            )
        return PulledKv(0, 0.0, 0)

    async def _reserve(self, request_id: str, prompt: Sequence[int], first_token: int) -> KvLayout:
        engine = self._runner.engine
        try:
            return await self._runner.call(
                engine.reserve,
                request_id,
                prompt,
                first_token,
                on_abandon=lambda _: engine.release(request_id),
            )
        except KvCapacityError as exc:
            raise WorkerBusy(str(exc)) from exc
        except EngineError as exc:
            raise InvalidRequest(str(exc)) from exc

    def _release_remote_soon(self, remote: RemoteKvHandle, request_id: str) -> None:
        task = asyncio.create_task(self._release_remote(remote, request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_remote(self, remote: RemoteKvHandle, request_id: str) -> None:
        client = self._client_for(remote.grpc_address)
        try:
            await client.release(
                request_id, claimer=self._claimer, timeout_s=self._config.rpc_timeout_s
            )
        except WorkerCallError as exc:
            # The claim's pin runs out anyway; this was only the early exit.
            logger.info("release of %s on %s failed: %s", request_id, remote.worker_id, exc)

    async def stop(self) -> None:
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
