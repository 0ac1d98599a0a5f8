"""One engine step as the leader sends it to its followers, and the KV store a follower
runs it against (pure).

A follower's KV pool mirrors the leader's: the same number of blocks, each holding the
follower's KV heads, and the leader's block tables say which blocks every layer of every
sequence uses. So the leader alone allocates, caches and frees; a follower writes and
reads where it is told, and a block the leader reuses (a cached prefix) holds the
follower's heads of the same tokens.

Frame: a 4-byte header length, a JSON header (per segment its tokens, start and each
layer's first logical block and block count), then every table's physical block ids as
int32.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.kv_layout import LayerBlocks
from tandem.engines.reference.kv_pool import gather_blocks, write_tokens
from tandem.engines.reference.model import Segment

Float32Array = npt.NDArray[np.float32]
_HEADER = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class StepSegment:
    tokens: Sequence[int]
    start: int
    tables: Sequence[LayerBlocks]


def encode_step(segments: Sequence[StepSegment]) -> list[bytes]:
    header = [
        {
            "tokens": list(s.tokens),
            "start": s.start,
            "tables": [[t.first, len(t.physical)] for t in s.tables],
        }
        for s in segments
    ]
    physical = [block for s in segments for t in s.tables for block in t.physical]
    text = json.dumps(header, separators=(",", ":")).encode()
    return [_HEADER.pack(len(text)), text, np.asarray(physical, dtype=np.int32).tobytes()]


def decode_step(frame: bytes) -> list[StepSegment]:
    (length,) = _HEADER.unpack_from(frame)
    header = json.loads(frame[_HEADER.size : _HEADER.size + length])
    physical = np.frombuffer(frame, dtype=np.int32, offset=_HEADER.size + length).tolist()
    segments, used = [], 0
    for entry in header:
        tables = []
        for first, count in entry["tables"]:
            tables.append(LayerBlocks(first=first, physical=tuple(physical[used : used + count])))
            used += count
        segments.append(StepSegment(entry["tokens"], entry["start"], tuple(tables)))
    if used != len(physical):
        raise ValueError(f"step frame names {len(physical)} blocks, its tables {used}")
    return segments


class TableKv:
    """``KvStore`` over a pool array and block tables handed in (a follower's view of
    one sequence for one step)."""

    def __init__(self, pool: Float32Array, tables: Sequence[LayerBlocks]) -> None:
        self._pool = pool
        self._tables = tables

    def write(self, layer: int, start: int, keys: Float32Array, values: Float32Array) -> None:
        table = self._tables[layer]
        write_tokens(self._pool, table.first, table.physical, start, keys, values)

    def gather(self, layer: int, blocks: range, out: Float32Array) -> None:
        table = self._tables[layer]
        gather_blocks(self._pool, table.first, table.physical, blocks, out)


def to_model_segments(segments: Sequence[StepSegment], pool: Float32Array) -> list[Segment]:
    return [
        Segment(s.tokens, s.start, TableKv(pool, s.tables), wants_logits=False) for s in segments
    ]
