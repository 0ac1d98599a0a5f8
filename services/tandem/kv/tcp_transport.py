"""KV transport over TCP, for hosts without NIXL; mutual TLS with the cluster's credentials.

The prefill side listens on ``host:port`` and answers range reads out of its registered
regions (framing in ``kv.tcp_wire``); the decode side sends one batch of ranges per read
and receives the bytes into its local memoryviews.

Who may read: with a ``CredentialStore`` every connection starts with a TLS 1.3 handshake
in which both ends present their certificate and check the other's against the cluster's
CAs (the credentials current at that moment: a rotation applies to new connections). A
peer without them is refused before it can send a request. A peer of the cluster whose
certificate is not a worker's (the frontend's: ``security.identity``) is answered
``PERMISSION_DENIED`` to its first request, whatever it asks, and the connection is
closed. Without credentials (loopback-only members) the same protocol runs in plaintext.

What may be read: every requested range is checked against the registered regions before
a byte is sent, and a request may not ask for more bytes in total than are registered
(a legitimate read never reads a byte twice), so a peer can neither read outside the KV
memory nor make the server stream more than it holds. Anything malformed is answered
with an error and the connection is closed; the server keeps serving others.

Connections are reused: a connection serves one read at a time, and goes back to its
peer's idle pool (at most ``MAX_IDLE_CONNECTIONS``) only after a read that completed
exactly; anything else (timeout, short read, refusal) closes it, so a broken read never
leaves half a response behind for the next one. The server closes connections idle for
``idle_close_s``; a pooled connection found closed before any reply byte arrived is
retried once on a fresh one (reads are idempotent).

Handshakes and waiting for a request happen on the event loop; the bytes move on small
thread pools (``kv.tcp_io``: zero-copy ``recv_into``, TLS off the GIL).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

from tandem.engines.base import KvRange
from tandem.kv import tcp_io as io
from tandem.kv import tcp_wire as wire
from tandem.kv.envelope import AgentHeader, encode_metadata
from tandem.kv.errors import KvError, KvPeerError, KvRangeError, KvTransferError
from tandem.kv.memory import as_byte_views
from tandem.kv.peers import PeerTable, parse_peer
from tandem.kv.ranges import check_ranges, plan_segments
from tandem.kv.tcp_exchange import CHUNK_BYTES, StaleConnection, exchange_on
from tandem.kv.transport import KvTransport, PeerInfo, TransferStats
from tandem.security.credentials import CredentialStore
from tandem.security.identity import ssl_peer

logger = logging.getLogger(__name__)


MAX_IDLE_CONNECTIONS = 8
HANDSHAKE_TIMEOUT_S = 10.0
# Threads moving bytes: reads this worker answers, and reads it makes.
SERVE_THREADS = 8
READ_THREADS = 8


@dataclass(slots=True)
class _TcpPeer:
    host: str
    port: int
    region_sizes: tuple[int, ...]
    idle: list[io.Conn] = field(default_factory=list)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


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
        credentials: CredentialStore | None = None,
    ) -> None:
        """``serve_timeout_s`` bounds each socket call while answering a read; a
        connection with no request for ``idle_close_s`` is closed by the server;
        ``credentials``: mutual TLS on every connection (None: plaintext)."""
        super().__init__(worker_id, incarnation)
        self._idle_close_s = idle_close_s
        self._host = host
        self._port = port
        self._advertise_host = advertise_host or host
        self._serve_timeout_s = serve_timeout_s
        self._credentials = credentials
        self._views: tuple[memoryview, ...] = ()
        self._registered_bytes = 0
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._peers: PeerTable[_TcpPeer] = PeerTable()
        self._serve_threads = io.Blocking(SERVE_THREADS, f"kv-serve-{worker_id}")
        self._read_threads = io.Blocking(READ_THREADS, f"kv-read-{worker_id}")

    @property
    def port(self) -> int:
        """The bound port (after ``register``)."""
        return self._port

    async def register(self, regions: Sequence[memoryview]) -> None:
        if self._listener is not None:
            raise KvError(f"TCP transport {self.name}: register() may be called only once")
        self._views = as_byte_views(regions)
        self._registered_bytes = sum(v.nbytes for v in self._views)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._accepting = asyncio.create_task(self._accept_loop(listener))
        logger.info(
            "TCP KV agent %s serving %d region(s) on %s:%d (%s)",
            self.name,
            len(self._views),
            self._host,
            self._port,
            "mutual TLS" if self._credentials else "plaintext",
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
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._serve(conn))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _accept_tls(self, sock: socket.socket) -> io.Conn | None:
        """``sock`` after the TLS handshake (with the credentials current now), or None
        (and the socket closed) when the peer fails it. Plaintext without credentials."""
        if self._credentials is None:
            return sock
        peer = _peer_name(sock)
        context = self._credentials.current().server_ssl
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                return await io.tls_handshake(sock, context, server_side=True, server_hostname=None)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            sock.close()
            logger.warning(
                "TCP KV agent %s refused a connection from %s: TLS handshake failed (%s)",
                self.name,
                peer,
                exc,
            )
            return None

    async def _serve(self, sock: socket.socket) -> None:
        """Answer reads on one connection until the peer closes it, it idles out, or a
        read goes wrong (then the connection is closed: the reader sees a failure)."""
        conn = await self._accept_tls(sock)
        if conn is None:
            return
        refusal = self._refusal(conn)
        try:
            io.make_blocking(conn, self._serve_timeout_s)
            while True:
                try:
                    async with asyncio.timeout(self._idle_close_s):
                        await io.wait_readable(conn)
                except TimeoutError:
                    return  # idle too long
                if not await self._serve_threads.run(conn, self._answer, conn, refusal):
                    return
        except (OSError, io.PeerClosed) as exc:
            logger.info("TCP KV agent %s: a read was abandoned: %r", self.name, exc)
        finally:
            conn.close()

    def _refusal(self, conn: io.Conn) -> str | None:
        """Why this authenticated connection may read nothing (its certificate is not a
        worker's), logged and counted once; None when it may read (or is plaintext)."""
        if not isinstance(conn, ssl.SSLSocket):
            return None
        peer = ssl_peer(conn)
        if peer.is_worker:
            return None
        logger.warning(
            "TCP KV agent %s refused %s from %s: only workers may read KV",
            self.name,
            peer.name,
            _peer_name(conn),
        )
        self.on_refused_peer(peer.name)
        return f"PERMISSION_DENIED: {peer.name} is not a worker; only workers may read KV"

    def _answer(self, conn: io.Conn, refusal: str | None = None) -> bool:
        """(On a serving thread.) Read one request and stream the requested ranges, or
        send an error reply when refusing (``refusal``: the peer may read nothing);
        returns whether the connection may serve another request (False also when the
        peer closed it while idle)."""
        try:
            prefix = io.recv_exactly(conn, wire.REQUEST_PREFIX_BYTES)
        except io.PeerClosed:
            return False  # the reader closed an idle connection: normal
        # The whole request is read even when refusing, so the reply is not lost to a
        # reset from unread bytes when the connection closes.
        checked = self._check_request(conn, prefix)
        if refusal is not None:
            io.send_all(conn, wire.encode_error(refusal))
            return False
        if isinstance(checked, str):
            logger.warning("TCP KV agent %s refused a read: %s", self.name, checked)
            io.send_all(conn, wire.encode_error(checked))
            return False
        ranges, total = checked
        io.send_all(conn, wire.encode_ok(total))
        for r in ranges:
            view = self._views[r.region][r.offset : r.offset + r.length]
            for start in range(0, len(view), CHUNK_BYTES):
                io.send_all(conn, view[start : start + CHUNK_BYTES])
        return True

    def _check_request(self, conn: io.Conn, prefix: bytes) -> str | tuple[tuple[KvRange, ...], int]:
        """The request's ranges and byte total, or why it is refused."""
        try:
            size = wire.decode_request_prefix(prefix)
            incarnation = io.recv_exactly(conn, size).decode()
            count = wire.decode_count(io.recv_exactly(conn, wire.COUNT_BYTES))
            ranges = wire.decode_ranges(io.recv_exactly(conn, count * wire.RANGE_BYTES))
        except (wire.WireError, UnicodeDecodeError) as exc:
            return f"malformed request: {exc}"
        if incarnation != self.incarnation:
            return f"this is {self.name}; the request was for incarnation {incarnation!r}"
        try:
            total = check_ranges(ranges, [v.nbytes for v in self._views], "requested")
        except KvRangeError as exc:
            return exc.message
        if total > self._registered_bytes:
            return (
                f"the request asks for {total} bytes in {len(ranges)} ranges, more than the "
                f"{self._registered_bytes} bytes registered"
            )
        return ranges, total

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
                await self._exchange(state, peer.incarnation, (), (), timeout_s)
        except TimeoutError as exc:
            raise KvTransferError(
                f"TCP handshake with {peer.name} at {state.host}:{state.port} "
                f"timed out after {timeout_s:.3g}s",
                peer=peer.name,
                nbytes=0,
            ) from exc
        except (OSError, io.PeerClosed, wire.WireError) as exc:
            raise KvTransferError(
                f"TCP handshake with {peer.name} at {state.host}:{state.port} failed: "
                f"{_describe(exc)}",
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
                remote = [s.remote for s in segments]
                await self._exchange(state, peer.incarnation, remote, targets, remaining)
        except TimeoutError as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(
                f"{what} timed out after {timeout_s:.3g}s", peer=peer.name, nbytes=nbytes
            ) from exc
        except (OSError, io.PeerClosed, wire.WireError) as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(
                f"{what} failed: {_describe(exc)}", peer=peer.name, nbytes=nbytes
            ) from exc
        except KvTransferError as exc:
            self.forget(peer.worker_id)
            raise KvTransferError(
                f"{what} failed: {exc.message}", peer=peer.name, nbytes=nbytes
            ) from exc
        return TransferStats(nbytes, loop.time() - started, len(segments))

    async def _open(self, host: str, port: int, timeout_s: float) -> io.Conn:
        """A connection to the peer, TLS-authenticated when we hold credentials, in
        blocking mode (each socket call bounded by ``timeout_s``)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            conn: io.Conn = sock
            if self._credentials is not None:
                material = self._credentials.current()
                async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                    conn = await io.tls_handshake(
                        sock,
                        material.client_ssl,
                        server_side=False,
                        server_hostname=material.server_name,
                    )
        except BaseException:
            sock.close()
            raise
        io.make_blocking(conn, timeout_s)
        return conn

    async def _exchange(
        self,
        state: _TcpPeer,
        incarnation: str,
        ranges: Sequence[KvRange],
        targets: Sequence[memoryview],
        timeout_s: float,
    ) -> None:
        """One request/response, on a pooled connection if there is one; fills
        ``targets`` in order. The connection returns to the pool only on success."""
        request = wire.encode_request(incarnation, ranges)
        while True:
            pooled = bool(state.idle)
            if pooled:
                conn = state.idle.pop()
                io.make_blocking(conn, timeout_s)
            else:
                conn = await self._open(state.host, state.port, timeout_s)
            try:
                await self._read_threads.run(conn, exchange_on, conn, request, targets, pooled)
            except StaleConnection:
                continue  # closed by the peer while idle, before it read anything: retry
            except BaseException:
                conn.close()
                raise
            if len(state.idle) < MAX_IDLE_CONNECTIONS:
                state.idle.append(conn)
            else:
                conn.close()
            return

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
        self._serve_threads.close()
        self._read_threads.close()


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "a peer that already left"
    return f"{host}:{port}"


def _describe(exc: BaseException) -> str:
    """``exc`` for an error message; TLS failures say what they usually mean."""
    if isinstance(exc, ssl.SSLError):
        return (
            f"TLS with the peer failed ({exc.reason or exc}): one side does not hold this "
            "cluster's credentials (another cluster, or a rotation not yet seen by both)"
        )
    return repr(exc)
