"""Socket plumbing of the TCP KV transport: TLS handshakes on the event loop, the bulk
bytes on threads.

Moving KV is a bulk copy; on one event-loop thread it would share the GIL with every
other request the worker serves, and Python-level TLS buffering (asyncio's ``sslproto``)
copies every byte twice more. So a connection's handshake runs on the event loop
(non-blocking, so a peer that never completes it costs no thread), and then its requests
and replies run on a small thread pool with blocking sockets: ``recv_into`` writes
straight into the destination KV (decrypted in place by ``SSLSocket``) and OpenSSL
releases the GIL while it encrypts and decrypts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
Conn = socket.socket  # or ssl.SSLSocket (a subclass)

# The end of a connection, as each layer reports it.
CLOSED_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


class PeerClosed(Exception):
    """The other end closed the connection early."""


def recv_into(conn: Conn, view: memoryview) -> None:
    """Fill ``view`` from ``conn`` (blocking)."""
    filled = 0
    while filled < len(view):
        try:
            n = conn.recv_into(view[filled:])
        except CLOSED_ERRORS as exc:
            raise PeerClosed(f"connection closed after {filled} of {len(view)} bytes") from exc
        if n == 0:
            raise PeerClosed(f"connection closed after {filled} of {len(view)} bytes")
        filled += n


def recv_exactly(conn: Conn, size: int) -> bytes:
    buf = bytearray(size)
    recv_into(conn, memoryview(buf))
    return bytes(buf)


def send_all(conn: Conn, data: bytes | memoryview) -> None:
    try:
        conn.sendall(data)
    except CLOSED_ERRORS as exc:
        raise PeerClosed(f"connection closed while sending: {exc!r}") from exc


async def _wait(loop: asyncio.AbstractEventLoop, fd: int, writable: bool) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
        remove = loop.remove_writer
    else:
        loop.add_reader(fd, wake)
        remove = loop.remove_reader
    try:
        await ready
    finally:
        remove(fd)


async def wait_readable(conn: Conn) -> None:
    """Until ``conn`` has bytes to read (or was closed); at once if TLS holds some."""
    if isinstance(conn, ssl.SSLSocket) and conn.pending():
        return
    await _wait(asyncio.get_running_loop(), conn.fileno(), writable=False)


async def tls_handshake(
    sock: socket.socket, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None
) -> ssl.SSLSocket:
    """The TLS handshake on the event loop (``sock`` non-blocking); raises ``ssl.SSLError``
    or ``OSError`` when the peer fails it, having closed the connection (``sock`` itself
    is detached: the returned socket owns the connection). Callers bound it with
    ``asyncio.timeout``."""
    sock.setblocking(False)
    tls = context.wrap_socket(
        sock,
        server_side=server_side,
        server_hostname=server_hostname,
        do_handshake_on_connect=False,
    )
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                await _wait(loop, tls.fileno(), writable=False)
            except ssl.SSLWantWriteError:
                await _wait(loop, tls.fileno(), writable=True)
    except BaseException:
        tls.close()
        raise


def make_blocking(conn: Conn, timeout_s: float) -> None:
    """Blocking I/O from here on, each call bounded by ``timeout_s``."""
    conn.settimeout(timeout_s)


def shutdown(conn: Conn) -> None:
    """Wake a thread blocked on ``conn`` (its call fails) without closing the fd under it."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


class Blocking:
    """Runs blocking socket work on a bounded pool; cancelling the caller (or its
    deadline) shuts the connection down and waits for the thread to let go of it, so no
    byte is written into a caller's buffer after the call returned."""

    def __init__(self, threads: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)

    async def run(self, conn: Conn, fn: Callable[..., T], *args: object) -> T:
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            shutdown(conn)
            with contextlib.suppress(Exception):
                await future
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
