"""Drain retiring local workers off the supervision thread.

A worker the autoscaler retires is already out of the membership file (the router stops
routing to it within a health round). Draining it is then two steps, each bounded:

1. ``Drain`` RPC: the worker refuses new work (a request routed there in the last
   moment is refused with UNAVAILABLE and retried elsewhere by the router) and, for the
   real worker, answers once its in-flight requests and the KV it holds for decode
   workers are done, or the grace ran out;
2. wait until the frontend's ``/readyz`` no longer lists the worker: the router keeps a
   removed worker in its table exactly until it has nothing in flight there.

Only then does the supervisor SIGTERM it (the worker drains again, finds nothing, and
exits). The threads here only talk to the network; the supervisor is touched on its own
thread, when :meth:`Drainer.collect` hands back finished drains.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from tandem.autoscale.exposition import parse_worker_loads
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.security import CredentialStore
from tandem.security.grpc_tls import channel_credentials, secure_channel_options

logger = logging.getLogger(__name__)

READYZ_TIMEOUT_S = 2.0
RPC_SLACK_S = 5.0  # the Drain RPC's deadline beyond the grace it passes
POLL_S = 0.2

Fetch = Callable[[str, float], bytes]


@dataclass(frozen=True, slots=True)
class DrainResult:
    name: str
    address: str
    in_flight_left: int  # 0: drained; >0: the grace ran out with this much in flight; -1: error
    seconds: float


def fetch_url(url: str, timeout_s: float) -> bytes:
    """GET ``url``; a 503 still carries a body (``/readyz`` while not ready)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return bytes(exc.read())
        raise


def open_sync_channel(address: str, credentials: CredentialStore | None) -> grpc.Channel:
    """A blocking channel to a local worker: mutual TLS with the cluster's credentials."""
    if credentials is None:
        return grpc.insecure_channel(address)
    material = credentials.current()
    return grpc.secure_channel(
        address, channel_credentials(material), options=secure_channel_options(material)
    )


def request_drain(address: str, grace_s: float, credentials: CredentialStore | None) -> int:
    """The worker's ``Drain`` RPC (synchronous gRPC: this runs in a plain thread)."""
    with open_sync_channel(address, credentials) as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.Drain(pb.DrainRequest(grace_seconds=grace_s), timeout=grace_s + RPC_SLACK_S)
    return int(reply.in_flight)


def drain_worker(
    name: str,
    address: str,
    readyz_url: str,
    grace_s: float,
    *,
    closing: threading.Event,
    fetch: Fetch = fetch_url,
    clock: Callable[[], float] = time.monotonic,
    credentials: CredentialStore | None = None,
) -> DrainResult:
    """Steps 1 and 2 of the module doc; returns what was still in flight at the end."""
    started = clock()
    deadline = started + grace_s
    left = 0
    try:
        left = request_drain(address, grace_s, credentials)
    except grpc.RpcError as exc:
        # Already gone or unreachable: the router's view below still says when it is idle.
        logger.warning("drain of %s (%s) failed: %s", name, address, exc)
    while not closing.is_set():
        try:
            loads = parse_worker_loads(json.loads(fetch(readyz_url, READYZ_TIMEOUT_S)))
        except (OSError, ValueError) as exc:
            logger.warning("cannot read %s while draining %s: %s", readyz_url, name, exc)
            loads = None
        if loads is not None:
            load = loads.get(address)
            if load is None:
                return DrainResult(name, address, 0, clock() - started)
            left = load.in_flight
        if clock() >= deadline:
            break
        closing.wait(POLL_S)
    return DrainResult(name, address, left, clock() - started)


class Drainer:
    """Runs :func:`drain_worker` for each retiring worker in a small thread pool."""

    def __init__(
        self,
        readyz_url: str,
        grace_s: float,
        *,
        fetch: Fetch = fetch_url,
        credentials: CredentialStore | None = None,
    ) -> None:
        self._credentials = credentials
        self._readyz_url = readyz_url
        self._grace_s = grace_s
        self._fetch = fetch
        self._closing = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tandem-drain")
        self._running: dict[str, Future[DrainResult]] = {}

    @property
    def draining(self) -> list[str]:
        return sorted(self._running)

    def start(self, name: str, address: str) -> None:
        if name in self._running:
            return
        self._running[name] = self._pool.submit(
            drain_worker,
            name,
            address,
            self._readyz_url,
            self._grace_s,
            closing=self._closing,
            fetch=self._fetch,
            credentials=self._credentials,
        )

    def collect(self) -> list[DrainResult]:
        """Drains that finished since the last call (their workers can be stopped)."""
        done = [name for name, future in self._running.items() if future.done()]
        results = []
        for name in done:
            future = self._running.pop(name)
            error = future.exception()
            if error is not None:  # a bug, not a network failure: stop the worker anyway
                logger.error("draining %s failed", name, exc_info=error)
                results.append(DrainResult(name, "", -1, 0.0))
            else:
                results.append(future.result())
        return results

    def close(self) -> None:
        """Stop waiting (the supervisor stops every worker anyway)."""
        self._closing.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
