"""The TCP link between the ranks of a tensor-parallel group: the leader sends each step
to the followers, and every rank's partial sums are added up (an all-reduce).

A star: the leader holds one connection per follower. A reduction collects every
follower's partial, adds them to its own in rank order and sends the total back, so all
ranks hold the same bits. Frames are an 8-byte length and raw bytes; arrays travel as
their float32 bytes (both sides know the shape). The leader's requests start with one
byte saying what they are: a step (as ``step.encode_step`` writes it); a gather of KV
blocks (their ids as int32), which each follower answers with its share of those blocks;
or a scatter (a 4-byte count, the ids, then the follower's share of those blocks), which
it writes into its pool before the next step, unanswered. A connection opens with the
group's secret (handed to the followers through Ray, whose own connections are
token-authenticated) and is refused without it.
"""

from __future__ import annotations

import hmac
import socket
import struct
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tandem.engines.base import EngineLost

Float32Array = npt.NDArray[np.float32]
_LENGTH = struct.Struct("!Q")
_ACCEPTED = b"ok"
STEP = b"s"
GATHER = b"g"
SCATTER = b"w"
_COUNT = struct.Struct("!I")
HANDSHAKE_TIMEOUT_S = 10.0
# A partial sum is one layer of one step away: a rank silent this long is lost (a hung or
# cut-off pod), and the step fails instead of waiting forever.
REDUCE_TIMEOUT_S = 60.0


class RankLinkError(EngineLost):
    """A rank of the group is gone, silent or spoke out of turn: the group cannot go on."""


class _Peer:
    def __init__(self, sock: socket.socket, name: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self.name = name

    def send(self, *parts: bytes | memoryview) -> None:
        try:
            self._sock.sendall(_LENGTH.pack(sum(len(p) for p in parts)))
            for part in parts:
                self._sock.sendall(part)
        except OSError as exc:
            raise RankLinkError(f"tensor-parallel {self.name}: send failed: {exc}") from exc

    def receive(self) -> bytes | None:
        """The next frame; None when the peer closed the link between frames."""
        header = self._read(_LENGTH.size, at_boundary=True)
        if header is None:
            return None
        (length,) = _LENGTH.unpack(header)
        body = self._read(length, at_boundary=False)
        assert body is not None
        return body

    def receive_reply(self, what: str, nbytes: int) -> bytes:
        """A frame of exactly ``nbytes`` bytes, within ``REDUCE_TIMEOUT_S``."""
        self._sock.settimeout(REDUCE_TIMEOUT_S)
        try:
            frame = self.receive()
        finally:
            self._sock.settimeout(None)
        if frame is None or len(frame) != nbytes:
            got = "nothing" if frame is None else f"{len(frame)} bytes"
            raise RankLinkError(
                f"tensor-parallel {self.name}: expected {what} of {nbytes} bytes, got {got}"
            )
        return frame

    def receive_into(self, out: Float32Array) -> None:
        frame = self.receive_reply("a partial sum", out.nbytes)
        out.reshape(-1)[:] = np.frombuffer(frame, dtype=np.float32)

    def close(self) -> None:
        self._sock.close()

    def _read(self, count: int, *, at_boundary: bool) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < count:
            try:
                chunk = self._sock.recv(min(count - len(chunks), 1 << 20))
            except TimeoutError:
                raise RankLinkError(
                    f"tensor-parallel {self.name} sent nothing for {self._sock.gettimeout():g} s"
                ) from None
            except OSError as exc:
                raise RankLinkError(f"tensor-parallel {self.name}: {exc}") from exc
            if not chunk:
                if at_boundary and not chunks:
                    return None
                raise RankLinkError(f"tensor-parallel {self.name} closed the link mid-frame")
            chunks += chunk
        return bytes(chunks)


class LeaderLink:
    """Rank 0's end: one connection per follower, in rank order."""

    def __init__(self, peers: Sequence[_Peer]) -> None:
        self._peers = list(peers)
        # Time in reductions (the followers' partials awaited, the total sent back):
        # what tensor parallelism costs a step beyond its shard's compute.
        self.reduce_seconds = 0.0

    @classmethod
    def connect(cls, addresses: Sequence[tuple[str, int]], secret: bytes) -> LeaderLink:
        peers = []
        for rank, (host, port) in enumerate(addresses, start=1):
            name = f"rank {rank} at {host}:{port}"
            try:
                sock = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT_S)
            except OSError as exc:
                raise RankLinkError(f"tensor-parallel {name}: cannot connect: {exc}") from exc
            peer = _Peer(sock, name)
            peer.send(secret)
            if peer.receive() != _ACCEPTED:
                raise RankLinkError(f"tensor-parallel {name} refused the group's secret")
            sock.settimeout(None)
            peers.append(peer)
        return cls(peers)

    def send_step(self, step: Sequence[bytes]) -> None:
        for peer in self._peers:
            peer.send(STEP, *step)

    def scatter(self, blocks: npt.NDArray[np.int32], shares: Sequence[bytes]) -> None:
        """Hand follower ``i`` (rank ``i + 1``) ``shares[i]``, its heads of KV ``blocks``;
        the link's order puts it in place before the next step runs."""
        ids = np.ascontiguousarray(blocks, dtype=np.int32)
        for peer, share in zip(self._peers, shares, strict=True):
            peer.send(SCATTER, _COUNT.pack(len(ids)), ids.tobytes(), share)

    def gather(self, blocks: npt.NDArray[np.int32], share_bytes: Sequence[int]) -> list[bytes]:
        """Every follower's share of KV ``blocks``; follower ``i`` (rank ``i + 1``) answers
        ``share_bytes[i]`` bytes."""
        ids = np.ascontiguousarray(blocks, dtype=np.int32).tobytes()
        for peer in self._peers:
            peer.send(GATHER, ids)
        return [
            peer.receive_reply("a KV share", nbytes)
            for peer, nbytes in zip(self._peers, share_bytes, strict=True)
        ]

    def reduce(self, partial: Float32Array) -> Float32Array:
        started = time.perf_counter()
        total = np.ascontiguousarray(partial, dtype=np.float32)
        received = np.empty_like(total)
        for peer in self._peers:
            peer.receive_into(received)
            total = total + received
        for peer in self._peers:
            peer.send(total.data.cast("B"))
        self.reduce_seconds += time.perf_counter() - started
        return total

    def close(self) -> None:
        for peer in self._peers:
            peer.close()


class FollowerLink:
    """A follower's end: its one connection to the leader."""

    def __init__(self, peer: _Peer) -> None:
        self._peer = peer

    @classmethod
    def accept(cls, listener: socket.socket, secret: bytes) -> FollowerLink:
        """Waits for the leader; a connection without the secret is closed and waited
        past (anything may knock on a listening port)."""
        while True:
            sock, address = listener.accept()
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            peer = _Peer(sock, f"leader at {address[0]}:{address[1]}")
            try:
                offered = peer.receive()
            except RankLinkError:
                offered = None
            if offered is not None and hmac.compare_digest(offered, secret):
                peer.send(_ACCEPTED)
                sock.settimeout(None)
                return cls(peer)
            peer.close()

    def receive_request(self) -> tuple[bytes, bytes] | None:
        """The leader's next request, (``STEP``, ``GATHER`` or ``SCATTER``, its body); None
        when the leader closed the link."""
        frame = self._peer.receive()
        if frame is None:
            return None
        kind, body = frame[:1], frame[1:]
        if kind not in (STEP, GATHER, SCATTER):
            raise RankLinkError(
                f"tensor-parallel {self._peer.name} sent an unknown request {kind!r}"
            )
        return kind, body

    @staticmethod
    def read_scatter(body: bytes) -> tuple[npt.NDArray[np.int32], Float32Array]:
        """A scatter's block ids and the share of them to write."""
        (count,) = _COUNT.unpack_from(body)
        ids = np.frombuffer(body, dtype=np.int32, count=count, offset=_COUNT.size)
        share = np.frombuffer(body, dtype=np.float32, offset=_COUNT.size + ids.nbytes)
        return ids, share

    def send_share(self, share: Float32Array) -> None:
        self._peer.send(np.ascontiguousarray(share, dtype=np.float32).data.cast("B"))

    def reduce(self, partial: Float32Array) -> Float32Array:
        part = np.ascontiguousarray(partial, dtype=np.float32)
        self._peer.send(part.data.cast("B"))
        total = np.empty_like(part)
        self._peer.receive_into(total)
        return total

    def close(self) -> None:
        self._peer.close()
