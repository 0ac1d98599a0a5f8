"""KV transport over NIXL (UCX backend), DRAM regions on CPU.

Written against nixl 1.5.1 (``nixl_cu12/_api.py``, re-exported as ``nixl._api``):

- ``nixl_agent(name, nixl_agent_config(backends=["UCX"]))``; with no listener thread
  the agent's sync mode is ``NIXL_THREAD_SYNC_NONE`` (not thread-safe), so every agent
  call here runs on one dedicated thread.
- ``register_memory([(addr, len, dev_id, meta)], "DRAM")`` returns the reg list kept
  for ``deregister_memory``.
- ``get_agent_metadata() -> bytes``; ``add_remote_agent(bytes) -> bytes`` (the peer's
  agent name, as *bytes*); ``remove_remote_agent(str)`` also disconnects.
- ``get_xfer_descs(Nx3 uint64 array, "DRAM")``;
  ``initialize_xfer("READ", local, remote, peer, notif) -> nixl_xfer_handle``;
  ``transfer(h)`` and ``check_xfer_state(h)`` return "DONE" | "PROC" | "ERR" and may
  raise binding errors (``nixlRemoteDisconnectError`` when the peer died);
  ``release_xfer_handle(h)`` cancels an active transfer or raises if it cannot.
- ``nixl_agent_config(enable_prog_thread=True)`` (the default) spins a core even
  when idle; we turn it off and progress from our agent thread (``kv.nixl_thread``),
  which spins only while a transfer is in flight or peers hold claims on our KV.
- With UCX's ``cma`` transport (the default on one host) ``transfer`` copies
  synchronously inside the call; with ``tcp`` it returns "PROC" and completes as the
  agent thread progresses it. Either way the event loop never blocks and never polls:
  it awaits a future the agent thread resolves when the transfer leaves "PROC".
- A transfer that misses its deadline is released at once (which cancels it); if NIXL
  cannot cancel it, the read fails with ``local_unsafe`` (the local ranges may still be
  written). A completion seen after the deadline counts as a failure: the prefill side
  pins the blocks only for the claimed read time.

Peer metadata travels in our own envelope (``kv.envelope``): the region base addresses
go in its JSON header; the NIXL blob is only ever given to ``add_remote_agent``. We never
call ``deserialize_descs`` (it unpickles).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from tandem.engines.base import KvRange
from tandem.kv.envelope import AgentHeader, encode_metadata
from tandem.kv.errors import KvError, KvPeerError, KvTransferError
from tandem.kv.memory import as_byte_views, region_address
from tandem.kv.nixl_thread import AgentThread
from tandem.kv.peers import PeerTable, parse_peer
from tandem.kv.ranges import Segment, check_ranges, plan_segments
from tandem.kv.transport import KvTransport, PeerInfo, TransferStats

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long a read that missed its deadline while posting waits for the post to return.
POST_SETTLE_S = 5.0


class _XferHandle(Protocol):
    pass


class _Agent(Protocol):
    """The part of ``nixl._api.nixl_agent`` (1.5.1) this transport uses."""

    def register_memory(self, reg_list: list[tuple[int, int, int, str]], mem_type: str) -> Any: ...
    def deregister_memory(self, dereg_list: Any) -> None: ...
    def get_agent_metadata(self) -> bytes: ...
    def add_remote_agent(self, metadata: bytes) -> bytes | str: ...
    def remove_remote_agent(self, agent: str) -> None: ...
    def get_xfer_descs(self, descs: np.ndarray[Any, Any], mem_type: str) -> Any: ...
    def initialize_xfer(
        self, operation: str, local: Any, remote: Any, remote_agent: str, notif_msg: bytes
    ) -> _XferHandle: ...
    def transfer(self, handle: _XferHandle) -> str: ...
    def check_xfer_state(self, handle: _XferHandle) -> str: ...
    def release_xfer_handle(self, handle: _XferHandle) -> None: ...
    def get_new_notifs(self) -> dict[str, list[bytes]]: ...


@dataclass(frozen=True, slots=True)
class _NixlPeer:
    agent: str
    regions: tuple[tuple[int, int], ...]  # (base address, length) on the peer

    @property
    def region_sizes(self) -> tuple[int, ...]:
        return tuple(length for _, length in self.regions)


def binding_errors() -> tuple[type[BaseException], ...]:
    """The exception classes NIXL's C++ bindings raise (they share no common base)."""
    from nixl import _api

    bindings = vars(_api.nixlBind)
    return tuple(
        cls
        for name, cls in bindings.items()
        if name.startswith("nixl") and isinstance(cls, type) and issubclass(cls, Exception)
    )


class NixlTransport(KvTransport):
    backend = "nixl"

    def __init__(
        self,
        worker_id: str,
        incarnation: str,
        *,
        progress_thread: bool = False,
        serve_poll_s: float = 0.001,
    ) -> None:
        """``progress_thread`` turns on NIXL's own (core-burning) progress thread;
        otherwise the agent thread progresses UCX every ``serve_poll_s`` while peers
        hold claims on our KV, and not at all when idle."""
        super().__init__(worker_id, incarnation)
        from nixl._api import nixl_agent, nixl_agent_config

        # No metadata listener (NIXL's would hand our agent metadata, and with it read
        # access to the registered KV, to anyone who connects): peers get it only through
        # the worker's KvAgent RPC, which is mutual TLS (docs/security.md).
        config = nixl_agent_config(
            enable_prog_thread=progress_thread, enable_listen_thread=False, backends=["UCX"]
        )
        self._agent = cast(_Agent, nixl_agent(self.name, config))
        self._errors = binding_errors()
        self._thread = AgentThread(
            f"nixl-{worker_id}", self._agent.get_new_notifs, serve_poll_s, self._errors
        )
        self._serving = False
        self._views: tuple[memoryview, ...] = ()
        self._addresses: tuple[int, ...] = ()
        self._registration: Any = None
        self._metadata = b""
        self._peers: PeerTable[_NixlPeer] = PeerTable()
        self._closed = False
        self._connecting = asyncio.Lock()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise KvError(f"NIXL transport {self.name} is closed")
        return await asyncio.wrap_future(self._thread.submit(fn, *args))

    async def register(self, regions: Sequence[memoryview]) -> None:
        if self._views:
            raise KvError(f"NIXL transport {self.name}: register() may be called only once")
        views = as_byte_views(regions)
        addresses = tuple(region_address(v) for v in views)
        reg_list = [(addr, v.nbytes, 0, "") for addr, v in zip(addresses, views, strict=True)]
        self._registration = await self._call(self._agent.register_memory, reg_list, "DRAM")
        self._views, self._addresses = views, addresses
        # Fetched once on the agent thread; stable after registration.
        self._metadata = await self._call(self._agent.get_agent_metadata)
        logger.info(
            "NIXL agent %s registered %d region(s), %d bytes",
            self.name,
            len(views),
            sum(v.nbytes for v in views),
        )

    def local_metadata(self) -> bytes:
        header = AgentHeader(
            backend=self.backend,
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            regions=tuple((a, v.nbytes) for a, v in zip(self._addresses, self._views, strict=True)),
        )
        return encode_metadata(header, self._metadata)

    async def connect(self, peer: PeerInfo, timeout_s: float) -> None:
        if self._peers.get(peer) is not None:
            return
        # One handshake at a time: NIXL refuses to load the same agent twice.
        async with self._connecting:
            if self._peers.get(peer) is None:
                await self._handshake(peer, timeout_s)

    async def _handshake(self, peer: PeerInfo, timeout_s: float) -> None:
        stale = self._peers.pop_stale(peer)
        if stale is not None:
            logger.info("peer %s restarted; dropping stale NIXL agent %s", peer.name, stale.agent)
            await self._remove_agent(stale.agent)
        header, payload = parse_peer(peer, self.backend)
        try:
            async with asyncio.timeout(timeout_s):
                loaded = await self._call(self._agent.add_remote_agent, payload)
        except TimeoutError as exc:
            raise KvTransferError(
                f"loading NIXL metadata of {peer.name} took over {timeout_s:.3g}s",
                peer=peer.name,
                nbytes=0,
            ) from exc
        except self._errors as exc:
            raise KvPeerError(f"NIXL rejected the metadata of {peer.name}: {exc!r}") from exc
        name = loaded.decode() if isinstance(loaded, bytes) else loaded
        if name != peer.name:
            await self._remove_agent(name)
            raise KvPeerError(f"NIXL metadata names agent {name!r}, expected {peer.name!r}")
        self._peers.put(peer, _NixlPeer(name, header.regions))
        logger.info("connected to NIXL peer %s", peer.name)

    async def read(
        self,
        peer: PeerInfo,
        remote_ranges: Sequence[KvRange],
        local_ranges: Sequence[KvRange],
        timeout_s: float,
    ) -> TransferStats:
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        await self.connect(peer, timeout_s)
        remote = self._peers.connected(peer)
        check_ranges(remote_ranges, remote.region_sizes, f"peer {peer.name}")
        nbytes = check_ranges(local_ranges, [v.nbytes for v in self._views], "local")
        segments = plan_segments(remote_ranges, local_ranges)
        if not segments:
            return TransferStats(0, 0.0, 0)
        local_descs, remote_descs = self._descriptors(segments, remote)
        try:
            await self._run_read(remote.agent, local_descs, remote_descs, deadline)
        except KvTransferError as exc:
            # A failed peer may be dead or restarted: make the next read re-handshake.
            await self._drop(peer.worker_id)
            raise KvTransferError(
                f"NIXL READ of {nbytes} bytes ({len(segments)} descriptors) from "
                f"{peer.name} failed: {exc.message}",
                peer=peer.name,
                nbytes=nbytes,
                local_unsafe=exc.local_unsafe,
            ) from exc
        return TransferStats(nbytes, loop.time() - started, len(segments))

    def _descriptors(
        self, segments: Sequence[Segment], remote: _NixlPeer
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        local = np.zeros((len(segments), 3), dtype=np.uint64)
        far = np.zeros((len(segments), 3), dtype=np.uint64)
        for i, seg in enumerate(segments):
            local[i, 0] = self._addresses[seg.local.region] + seg.local.offset
            local[i, 1] = seg.length
            far[i, 0] = remote.regions[seg.remote.region][0] + seg.remote.offset
            far[i, 1] = seg.length
        return local, far

    async def _run_read(
        self,
        agent: str,
        local_descs: np.ndarray[Any, Any],
        remote_descs: np.ndarray[Any, Any],
        deadline: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        handle: _XferHandle | None = None
        try:
            handle, state = await self._post_within(agent, local_descs, remote_descs, deadline)
            if state == "PROC":
                state = await self._completion(handle, deadline)
            if state != "DONE":
                raise KvTransferError(f"backend reported {state}", peer=agent, nbytes=0)
            if loop.time() > deadline:
                raise KvTransferError("completed after its deadline", peer=agent, nbytes=0)
        except self._errors as exc:
            raise KvTransferError(f"backend error {exc!r}", peer=agent, nbytes=0) from exc
        except BaseException:
            if handle is not None and not await self._stop_transfer(handle):
                raise KvTransferError(
                    "timed out, and NIXL could not cancel the transfer",
                    peer=agent,
                    nbytes=0,
                    local_unsafe=True,
                ) from None
            raise
        else:
            self._release_soon(handle)

    async def _completion(self, handle: _XferHandle, deadline: float) -> str:
        """The transfer's final state, as the agent thread sees it leave "PROC"."""
        watched = asyncio.wrap_future(
            self._thread.watch(handle, lambda: self._agent.check_xfer_state(handle))
        )
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(watched)
        except TimeoutError:
            raise KvTransferError("timed out", peer="", nbytes=0) from None

    async def _stop_transfer(self, handle: _XferHandle) -> bool:
        """Stop watching and release (cancel) ``handle``; False if NIXL cannot cancel it.

        Runs even when the reader was cancelled: it is queued on the agent thread, and
        a cancelled awaiter only stops waiting for the answer."""
        if self._closed:
            return True
        self._thread.unwatch(handle)
        released = asyncio.wrap_future(self._thread.submit(self._release, handle))
        try:
            return await asyncio.shield(released)
        except asyncio.CancelledError:
            return True  # the release still runs; nobody is left to use the local ranges

    async def _post_within(
        self,
        agent: str,
        local_descs: np.ndarray[Any, Any],
        remote_descs: np.ndarray[Any, Any],
        deadline: float,
    ) -> tuple[_XferHandle, str]:
        """Create and post the READ on the NIXL thread, waiting at most until ``deadline``.

        Posting can copy synchronously (UCX cma); if we stop waiting, the handle is
        released as soon as the post returns.
        """
        if self._closed:
            raise KvError(f"NIXL transport {self.name} is closed")
        loop = asyncio.get_running_loop()
        posted = asyncio.wrap_future(
            self._thread.submit(self._post_read, agent, local_descs, remote_descs)
        )
        try:
            done, _ = await asyncio.wait({posted}, timeout=max(0.0, deadline - loop.time()))
        finally:
            if not posted.done():
                posted.add_done_callback(self._release_posted)
        if done:
            return posted.result()
        # The post may be copying into the local ranges right now (cma copies inside the
        # call): wait a little for it to return (its handle is then released) before
        # saying the ranges are free again.
        settled, _ = await asyncio.wait({posted}, timeout=POST_SETTLE_S)
        raise KvTransferError(
            "timed out while posting the transfer",
            peer=agent,
            nbytes=0,
            local_unsafe=not settled,
        )

    def _release_posted(self, posted: asyncio.Future[tuple[_XferHandle, str]]) -> None:
        if not posted.cancelled() and posted.exception() is None:
            self._release_soon(posted.result()[0])

    def _post_read(
        self, agent: str, local_descs: np.ndarray[Any, Any], remote_descs: np.ndarray[Any, Any]
    ) -> tuple[_XferHandle, str]:
        local = self._agent.get_xfer_descs(local_descs, "DRAM")
        remote = self._agent.get_xfer_descs(remote_descs, "DRAM")
        handle = self._agent.initialize_xfer("READ", local, remote, agent, b"")
        try:
            return handle, self._agent.transfer(handle)
        except self._errors:
            self._release(handle)
            raise

    def _release_soon(self, handle: _XferHandle) -> None:
        # Queued on the NIXL thread, not awaited: release must happen even when the
        # reader was cancelled, and it runs after any call still in flight on that thread.
        if not self._closed:
            self._thread.submit(self._release, handle)

    def _release(self, handle: _XferHandle) -> bool:
        try:
            self._agent.release_xfer_handle(handle)
        except self._errors as exc:
            # NIXL keeps the handle on its leak list and frees it with the agent.
            logger.warning("NIXL could not release a transfer handle: %r", exc)
            return False
        return True

    async def _remove_agent(self, agent: str) -> None:
        try:
            await self._call(self._agent.remove_remote_agent, agent)
        except self._errors as exc:
            logger.warning("NIXL could not remove remote agent %s: %r", agent, exc)

    async def _drop(self, worker_id: str) -> None:
        dropped = self._peers.pop(worker_id)
        if dropped is not None:
            await self._remove_agent(dropped.agent)

    def expect_reads(self, count: int) -> None:
        serving = count > 0
        if serving != self._serving and not self._closed:
            self._serving = serving
            self._thread.set_serving(serving)

    def forget(self, worker_id: str) -> None:
        dropped = self._peers.pop(worker_id)
        if dropped is not None and not self._closed:
            self._thread.submit(self._remove_quietly, dropped.agent)

    def _remove_quietly(self, agent: str) -> None:
        try:
            self._agent.remove_remote_agent(agent)
        except self._errors as exc:
            logger.warning("NIXL could not remove remote agent %s: %r", agent, exc)

    async def close(self) -> None:
        if self._closed:
            return
        for stale in self._peers.pop_all():
            await self._remove_agent(stale.agent)
        if self._registration is not None:
            await self._call(self._agent.deregister_memory, self._registration)
        self._closed = True
        await asyncio.to_thread(self._thread.stop)
