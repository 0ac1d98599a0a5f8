"""What the fake simulates behind the real API: a toy model and the cache transceiver.

Not part of TensorRT-LLM's API. The toy model is a deterministic function of the token
sequence, so a disaggregated request (context-only on one LLM, generation-only on
another) yields exactly the tokens an aggregated request yields — the property
TensorRT-LLM's own disaggregated tests assert. The "transceiver" keeps a context
request's KV (here: its prompt and first token) until a generation-only request pulls
it, keyed by the context instance's endpoint and request id, as the real
``ctx_info_endpoint`` / ``ctx_request_id`` pair addresses it.

The real transceiver moves KV between processes (and nodes). Set
``TANDEM_FAKE_TRTLLM_FABRIC_DIR`` to a directory shared by several processes and the fake
parks KV there as small JSON files instead of in process memory, so a prefill worker
process and a decode worker process hand KV over as two real TensorRT-LLM instances do.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VOCAB_SIZE = 1000
_instances = itertools.count()


def next_token(tokens: Sequence[int]) -> int:
    """The toy model: depends on the last two tokens and the position."""
    last = tokens[-1] if tokens else 0
    before = tokens[-2] if len(tokens) > 1 else 0
    return (last * 31 + before * 7 + len(tokens)) % (VOCAB_SIZE - 3) + 3


FABRIC_DIR_ENV = "TANDEM_FAKE_TRTLLM_FABRIC_DIR"


def new_endpoint() -> str:
    # The pid keeps endpoints of instances in different processes apart.
    return f"fake-transceiver-{os.getpid()}-{next(_instances)}"


@dataclass(frozen=True, slots=True)
class ParkedKv:
    prompt: tuple[int, ...]
    first_tokens: tuple[int, ...]
    opaque_state: bytes
    backend: str
    blocks: int


class Transceiver:
    """All fake LLM instances of the process share one (they may be 'on other nodes');
    with ``TANDEM_FAKE_TRTLLM_FABRIC_DIR`` set, all processes sharing that directory."""

    def __init__(self) -> None:
        self._parked: dict[tuple[str, int], ParkedKv] = {}

    def park(self, endpoint: str, request_id: int, kv: ParkedKv) -> None:
        self._parked[(endpoint, request_id)] = kv
        shared = _shared_dir()
        if shared is not None:
            path = shared / f"{endpoint}-{request_id}.json"
            staging = path.with_suffix(".tmp")
            staging.write_text(json.dumps(_to_json(kv)))
            staging.rename(path)  # atomic: a reader never sees half a file

    def pull(self, endpoint: str, request_id: int) -> ParkedKv | None:
        kv = self._parked.pop((endpoint, request_id), None)
        shared = _shared_dir()
        if shared is None:
            return kv
        path = shared / f"{endpoint}-{request_id}.json"
        claimed = path.with_suffix(f".{os.getpid()}.claimed")
        try:
            path.rename(claimed)  # atomic: exactly one puller gets the KV
        except FileNotFoundError:
            return None
        data = json.loads(claimed.read_text())
        claimed.unlink()
        return kv or _from_json(data)

    def parked_blocks(self, endpoint: str) -> int:
        return sum(kv.blocks for (owner, _), kv in self._parked.items() if owner == endpoint)

    def parked_count(self, endpoint: str) -> int:
        return sum(1 for owner, _ in self._parked if owner == endpoint)


TRANSCEIVER = Transceiver()


def new_opaque_state() -> bytes:
    # Binary on purpose: the handoff must carry arbitrary bytes (NUL, 0xff).
    return b"\x00\xff" + os.urandom(14)


def _shared_dir() -> Path | None:
    value = os.environ.get(FABRIC_DIR_ENV)
    return Path(value) if value else None


def _to_json(kv: ParkedKv) -> dict[str, object]:
    return {
        "prompt": list(kv.prompt),
        "first_tokens": list(kv.first_tokens),
        "opaque_state": base64.b64encode(kv.opaque_state).decode("ascii"),
        "backend": kv.backend,
        "blocks": kv.blocks,
    }


def _from_json(data: dict[str, object]) -> ParkedKv:
    prompt, first, opaque = data["prompt"], data["first_tokens"], data["opaque_state"]
    assert isinstance(prompt, list) and isinstance(first, list) and isinstance(opaque, str)
    return ParkedKv(
        prompt=tuple(int(t) for t in prompt),
        first_tokens=tuple(int(t) for t in first),
        opaque_state=base64.b64decode(opaque),
        backend=str(data["backend"]),
        blocks=int(str(data["blocks"])),
    )
