"""KV transport over plain TCP, for hosts without NIXL.

The prefill side listens on ``host:port`` and answers range reads out of its registered
regions (framing in ``kv.tcp_wire``); the decode side sends one batch of ranges per read
and receives the bytes straight into its local memoryviews. Every requested range is
checked against the registered regions before a byte is sent, so a peer can never read
memory outside them.

Connections are reused: a connection serves one read at a time, and goes back to its
peer's idle pool (at most ``MAX_IDLE_CONNECTIONS``) only after a read that completed
exactly; anything else (timeout, short read, refusal) closes it, so a broken read never
leaves half a response behind for the next one. The server closes connections idle for
``idle_close_s``; a pooled connection found closed before any reply byte arrived is
retried once on a fresh one (reads are idempotent).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from tandem.engines.base import KvRange
from tandem.kv import tcp_wire as wire
from tandem.kv.envelope import AgentHeader, encode_metadata
from tandem.kv.errors import KvError, KvPeerError, KvRangeError, KvTransferError
from tandem.kv.memory import as_byte_views
from tandem.kv.peers import PeerTable, parse_peer
from tandem.kv.ranges import check_ranges, plan_segments
from tandem.kv.transport import KvTransport, PeerInfo, TransferStats

logger = logging.getLogger(__name__)


MAX_IDLE_CONNECTIONS = 8


class _PeerClosed(Exception):
    """The other end closed the connection early."""


class _StaleConnection(Exception):
    """A pooled connection was closed by the peer before it answered (retry fresh)."""


@dataclass(slots=True)
class _TcpPeer:
    host: str
    port: int
    region_sizes: tuple[int, ...]
    idle: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        for sock in self.idle:
            sock.close()
        self.idle.clear()


async def _recv_into(sock: socket.socket, view: memoryview) -> None:
    loop = asyncio.get_running_loop()
    filled = 0
    while filled < len(view):
        n = await loop.sock_recv_into(sock, view[filled:])
        if n == 0:
            raise _PeerClosed(f"connection closed after {filled} of {len(view)} bytes")
        filled += n


async def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    await _recv_into(sock, memoryview(buf))
    return bytes(buf)


async def _open(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class TcpTransport(KvTransport):
    backend = "tcp"

    def __init__(
        self,
        worker_id: str,
        incarnation: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        serve_timeout_s: float = 60.0,
        idle_close_s: float = 300.0,
    ) -> None:
        """``serve_timeout_s`` bounds answering one read; a connection with no request
        for ``idle_close_s`` is closed by the server."""
        super().__init__(worker_id, incarnation)
        self._idle_close_s = idle_close_s
        self._host = host
        self._port = port
        self._advertise_host = advertise_host or host
        self._serve_timeout_s = serve_timeout_s
        self._views: tuple[memoryview, ...] = ()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._peers: PeerTable[_TcpPeer] = PeerTable()

    @property
    def port(self) -> int:
        """The bound port (after ``register``)."""
        return self._port

    async def register(self, regions: Sequence[memoryview]) -> None:
        if self._listener is not None:
            raise KvError(f"TCP transport {self.name}: register() may be called only once")
        self._views = as_byte_views(regions)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._accepting = asyncio.create_task(self._accept_loop(listener))
        logger.info(
            "TCP KV agent %s serving %d region(s) on %s:%d",
            self.name,
            len(self._views),
            self._host,
            self._port,
        )

    def local_metadata(self) -> bytes:
        header = AgentHeader(
            backend=self.backend,
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            regions=tuple((0, v.nbytes) for v in self._views),
            host=self._advertise_host,
            port=self._port,
        )
        return encode_metadata(header)

    # -- prefill side ---------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # e.g. out of file descriptors: back off, keep serving
                logger.warning("TCP KV agent %s accept failed: %r", self.name, exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = asyncio.create_task(self._serve(conn))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _serve(self, conn: socket.socket) -> None:
        """Answer reads on one connection until the peer closes it, it idles out, or a
        read goes wrong (then the connection is closed: the reader sees a failure)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    async with asyncio.timeout(self._idle_close_s):
                        prefix = await _recv_exactly(conn, wire.REQUEST_PREFIX_BYTES)
                except _PeerClosed:
                    return  # the reader closed an idle connection: normal
                except TimeoutError:
                    return  # idle too long
                async with asyncio.timeout(self._serve_timeout_s):
                    reply, ok = await self._answer(conn, prefix)
                    if reply is not None:
                        await loop.sock_sendall(conn, reply)
                if not ok:
                    return
        except (OSError, TimeoutError, _PeerClosed) as exc:
            logger.info("TCP KV agent %s: a read was abandoned: %r", self.name, exc)
        finally:
            conn.close()

    async def _answer(self, conn: socket.socket, prefix: bytes) -> tuple[bytes | None, bool]:
        """Stream the requested ranges, or return an error reply when refusing; the flag
        says whether the connection may serve another request."""
        loop = asyncio.get_running_loop()
        try:
            size = wire.decode_request_prefix(prefix)
            incarnation = (await _recv_exactly(conn, size)).decode()
            count = wire.decode_count(await _recv_exactly(conn, wire.COUNT_BYTES))
            ranges = wire.decode_ranges(await _recv_exactly(conn, count * wire.RANGE_BYTES))
        except (wire.WireError, UnicodeDecodeError) as exc:
            logger.warning("TCP KV agent %s: malformed request: %s", self.name, exc)
            return wire.encode_error(f"malformed request: {exc}"), False
        if incarnation != self.incarnation:
            message = f"this is {self.name}; the request was for incarnation {incarnation!r}"
            return wire.encode_error(message), False
        try:
            total = check_ranges(ranges, [v.nbytes for v in self._views], "requested")
        except KvRangeError as exc:
            logger.warning("TCP KV agent %s refused a read: %s", self.name, exc)
            return wire.encode_error(exc.message), False
        await loop.sock_sendall(conn, wire.encode_ok(total))
        for r in ranges:
            await loop.sock_sendall(conn, self._views[r.region][r.offset : r.offset + r.length])
        return None, True

    # -- decode side ----------------------------------------------------------------

    async def connect(self, peer: PeerInfo, timeout_s: float) -> None:
        if self._peers.get(peer) is not None:
            return
        stale = self._peers.pop_stale(peer)
        if stale is not None:
            stale.close()
            logger.info("peer %s restarted; dropped its stale TCP endpoint", peer.name)
        header, _ = parse_peer(peer, self.backend)
        state = _TcpPeer(header.host, header.port, header.region_sizes)
        try:
            async with asyncio.timeout(timeout_s):
                await self._exchange(state, peer.incarnation, (), ())
        except TimeoutError as exc:
            raise KvTransferError(
                f"TCP handshake with {peer.name} at {state.host}:{state.port} "
                f"timed out after {timeout_s:.3g}s",
                peer=peer.name,
                nbytes=0,
            ) from exc
        except (OSError, _PeerClosed, wire.WireError) as exc:
            raise KvTransferError(
                f"TCP handshake with {peer.name} at {state.host}:{state.port} failed: {exc!r}",
                peer=peer.name,
                nbytes=0,
            ) from exc
        except KvTransferError as exc:  # the peer answered, but is not who we expected
            raise KvPeerError(f"{peer.name} refused the handshake: {exc.message}") from exc
        self._peers.put(peer, state)
        logger.info("connected to TCP KV peer %s at %s:%d", peer.name, state.host, state.port)

    async def read(
        self,
        peer: PeerInfo,
        remote_ranges: Sequence[KvRange],
        local_ranges: Sequence[KvRange],
        timeout_s: float,
    ) -> TransferStats:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self.connect(peer, timeout_s)
        state = self._peers.connected(peer)
        check_ranges(remote_ranges, state.region_sizes, f"peer {peer.name}")
        nbytes = check_ranges(local_ranges, [v.nbytes for v in self._views], "local")
        if any(self._views[r.region].readonly for r in local_ranges):
            raise KvRangeError("local KV region is read-only; it cannot receive a transfer")
        segments = plan_segments(remote_ranges, local_ranges)
        if not segments:
            return TransferStats(0, 0.0, 0)
        targets = [
            self._views[s.local.region][s.local.offset : s.local.offset + s.length]
            for s in segments
        ]
        remaining = max(0.0, timeout_s - (loop.time() - started))
        what = f"TCP read of {nbytes} bytes ({len(segments)} ranges) from {peer.name}"
        try:
            async with asyncio.timeout(remaining):
                await self._exchange(state, peer.incarnation, [s.remote for s in segments], targets)
        except TimeoutError as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(
                f"{what} timed out after {timeout_s:.3g}s", peer=peer.name, nbytes=nbytes
            ) from exc
        except (OSError, _PeerClosed, wire.WireError) as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(f"{what} failed: {exc!r}", peer=peer.name, nbytes=nbytes) from exc
        except KvTransferError as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(
                f"{what} failed: {exc.message}", peer=peer.name, nbytes=nbytes
            ) from exc
        return TransferStats(nbytes, loop.time() - started, len(segments))

    async def _exchange(
        self,
        state: _TcpPeer,
        incarnation: str,
        ranges: Sequence[KvRange],
        targets: Sequence[memoryview],
    ) -> None:
        """One request/response, on a pooled connection if there is one; fills
        ``targets`` in order. The connection returns to the pool only on success."""
        while True:
            pooled = bool(state.idle)
            sock = state.idle.pop() if pooled else await _open(state.host, state.port)
            try:
                await self._exchange_on(sock, incarnation, ranges, targets, pooled=pooled)
            except _StaleConnection:
                continue  # closed by the peer while idle, before it read anything: retry
            if len(state.idle) < MAX_IDLE_CONNECTIONS:
                state.idle.append(sock)
            else:
                sock.close()
            return

    async def _exchange_on(
        self,
        sock: socket.socket,
        incarnation: str,
        ranges: Sequence[KvRange],
        targets: Sequence[memoryview],
        *,
        pooled: bool,
    ) -> None:
        """The exchange on ``sock``; closes it unless every byte arrived. Raises
        ``_StaleConnection`` when a pooled connection turns out closed before the peer
        answered anything."""
        loop = asyncio.get_running_loop()
        answered = False
        ok = False
        try:
            await loop.sock_sendall(sock, wire.encode_request(incarnation, ranges))
            head = await _recv_exactly(sock, wire.STATUS_BYTES)
            answered = True
            if wire.decode_status(head) != wire.STATUS_OK:
                size = wire.decode_error_len(await _recv_exactly(sock, wire.ERROR_LEN_BYTES))
                message = (await _recv_exactly(sock, size)).decode(errors="replace")
                raise KvTransferError(f"peer refused: {message}", peer="", nbytes=0)
            total = wire.decode_total(await _recv_exactly(sock, wire.TOTAL_BYTES))
            expected = sum(len(t) for t in targets)
            if total != expected:
                raise wire.WireError(f"peer announced {total} bytes, expected {expected}")
            for target in targets:
                await _recv_into(sock, target)
            ok = True
        except (_PeerClosed, ConnectionError) as exc:
            if pooled and not answered:
                raise _StaleConnection() from exc
            raise
        finally:
            if not ok:
                sock.close()

    def forget(self, worker_id: str) -> None:
        state = self._peers.pop(worker_id)
        if state is not None:
            state.close()

    async def close(self) -> None:
        for state in self._peers.pop_all():
            state.close()
        tasks = [t for t in (self._accepting, *self._serving) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._accepting = None
        if self._listener is not None:
            self._listener.close()
