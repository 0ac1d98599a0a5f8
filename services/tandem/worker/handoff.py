"""Decode side of a disaggregated request: pull a prefilled sequence's KV.

``pull`` resolves the prefill worker's KV agent (``PeerDirectory``), reserves room in the
local engine, reads the bytes (NIXL or TCP, bounded by the transfer timeout), commits,
and then tells the prefill worker to release its copy. A failure before the commit frees
the reserved blocks and leaves the remote copy alone (the router may retry elsewhere; the
prefill side's lease frees it otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tandem.engines.base import EngineError, KvCapacityError, KvLayout
from tandem.kv import KvError, KvTransport, LeaseTable
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


LEASE_MARGIN_S = 1.0


def compute_pull_timeout(transfer_timeout_s: float, lease_expires_unix: float, now: float) -> float:
    """A read must end before the prefill side's lease does (after it, those blocks may
    hold another sequence). ``lease_expires_unix == 0`` means no lease was given."""
    if lease_expires_unix <= 0:
        return transfer_timeout_s
    return min(transfer_timeout_s, lease_expires_unix - LEASE_MARGIN_S - now)


class Handoff:
    def __init__(
        self,
        config: WorkerConfig,
        runner: EngineRunner,
        transport: KvTransport,
        peers: PeerDirectory,
        leases: LeaseTable,
        client_for: Callable[[str], WorkerClient],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._clock = clock
        self._runner = runner
        self._transport = transport
        self._peers = peers
        self._leases = leases
        self._client_for = client_for
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
        try:
            check_layouts_match(remote, layout, len(prompt))
            timeout_s = compute_pull_timeout(
                self._config.kv_transfer_timeout_s, remote.lease_expires_unix, self._clock()
            )
            if timeout_s <= 0:
                raise KvHandoffFailed(
                    f"the KV of request {request_id} on {remote.worker_id} is past its lease "
                    "(freed or about to be); not reading it"
                )
            try:
                stats = await self._transport.read(peer, remote.ranges, layout.ranges, timeout_s)
            except KvError as exc:
                self._peers.forget(remote.worker_id)
                why = await self._peers.explain_failure(remote)
                raise KvHandoffFailed(
                    f"pulling KV of request {request_id} failed: {exc.message} ({why})"
                ) from exc
            await self._runner.call(engine.commit, request_id)
        except BaseException:
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

    def _adopt_own(self, request_id: str) -> PulledKv:
        """The KV was prefilled here (role both): take over the held sequence, no copy."""
        if not self._leases.release(request_id):
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
            await client.release(request_id, timeout_s=self._config.rpc_timeout_s)
        except WorkerCallError as exc:
            # Its lease frees the blocks anyway; this was only the early exit.
            logger.info("release of %s on %s failed: %s", request_id, remote.worker_id, exc)

    async def stop(self) -> None:
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
