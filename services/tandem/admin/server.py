"""Serving the admin app, and binding the sockets the side listeners use."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Drain = Callable[[float], Awaitable[int]]


def create_admin_app(drain: Drain, *, default_grace_s: float, max_grace_s: float) -> Starlette:
    """``GET|POST /drain?grace_seconds=N``: stop taking work, answer once what is in
    flight has finished or the grace (default ``default_grace_s``, at most
    ``max_grace_s``) ran out, with ``{"in_flight": left}``."""

    async def drain_route(request: Request) -> Response:
        raw = request.query_params.get("grace_seconds", "")
        try:
            grace = float(raw) if raw else default_grace_s
        except ValueError:
            return JSONResponse({"error": "grace_seconds must be a number"}, status_code=400)
        if grace < 0:
            return JSONResponse({"error": "grace_seconds must not be negative"}, status_code=400)
        return JSONResponse({"in_flight": await drain(min(grace, max_grace_s))})

    return Starlette(routes=[Route("/drain", drain_route, methods=["GET", "POST"])])


class EmbeddedServer(uvicorn.Server):
    """uvicorn, minus its signal handling: the process that embeds it handles signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def create_embedded_server(app: Starlette) -> EmbeddedServer:
    """A quiet server for ``app``; start it with ``serve(sockets=[...])``."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    return EmbeddedServer(config)


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` that only this user can connect to (a stale
    socket file from an earlier run is replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if path.is_socket():
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the file is born 0600: no window where others may connect
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    sock.listen(16)
    sock.setblocking(False)
    return sock


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6 literal, or a name)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock
