"""The clock a simulated engine asks: the analytic model, or a user's measured table.

Both answer the same two questions in modelled seconds: how long a step with these decode
rows and prefill chunks takes, and how long moving a sequence's KV to another worker
takes (the bytes always come from the capacity model; the table may give its own link
rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.perf.model import Chunk, PerfModel
from tandem.perf.table import PerfTable, load_perf_table


class StepClock(Protocol):
    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        """One engine step: ``decode_contexts`` holds each decode row's context before
        its token; ``chunks`` the prefill work scheduled with them."""
        ...

    def kv_transfer_seconds(self, tokens: int) -> float:
        """Moving a ``tokens``-token sequence's KV to another worker."""
        ...


@dataclass(frozen=True, slots=True)
class TableClock:
    table: PerfTable
    perf: PerfModel  # for KV bytes, and the link when the table gives none

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        return self.table.step_seconds(decode_contexts, chunks)

    def kv_transfer_seconds(self, tokens: int) -> float:
        rate = self.table.kv_transfer_bytes_per_second
        if rate is None:
            return self.perf.kv_transfer_seconds(tokens)
        perf = self.perf
        shard = kv_bytes_per_gpu(
            perf.model, tokens, dtype=perf.kv_dtype, tensor_parallel_size=perf.tensor_parallel_size
        )
        return shard / rate


def build_clock(perf: PerfModel, table_path: str | None = None) -> StepClock:
    """The analytic model, or the table at ``table_path`` (PerfTableError, a
    ValueError, when it cannot be used)."""
    if table_path is None:
        return perf
    return TableClock(load_perf_table(table_path), perf)
