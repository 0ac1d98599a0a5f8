"""The KV "transport" of engines that move KV themselves (TensorRT-LLM).

With such an engine the prefill worker hands the decode worker an opaque handle (the
engine's disaggregated params) and the engine's own transceiver pulls the bytes; Tandem's
transport has nothing to register, serve or read. This stand-in keeps the worker's
wiring uniform (KvAgent answers, handles name a backend) and fails loudly if anything
tries to move bytes through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from tandem.engines.base import KvRange
from tandem.kv import KvError, KvTransferError, KvTransport, PeerInfo, TransferStats

ENGINE_BACKEND = "engine"


class EngineManagedKv(KvTransport):
    backend: ClassVar[str] = ENGINE_BACKEND

    async def register(self, regions: Sequence[memoryview]) -> None:
        if regions:
            raise KvError(f"{self.name}: the engine moves its KV itself; it exposes no regions")

    def local_metadata(self) -> bytes:
        return b""

    async def connect(self, peer: PeerInfo, timeout_s: float) -> None:
        raise KvTransferError(
            f"{self.name}: KV moves inside the engine; there is no peer {peer.name} to connect",
            peer=peer.name,
            nbytes=0,
        )

    async def read(
        self,
        peer: PeerInfo,
        remote_ranges: Sequence[KvRange],
        local_ranges: Sequence[KvRange],
        timeout_s: float,
    ) -> TransferStats:
        raise KvTransferError(
            f"{self.name}: KV moves inside the engine; Tandem cannot read it from {peer.name}",
            peer=peer.name,
            nbytes=sum(r.length for r in remote_ranges),
        )
