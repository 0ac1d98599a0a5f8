"""The clock a simulated engine asks: NVIDIA's measured kernel data, a user's measured
table, or the analytic model.

Every clock answers the same two questions in modelled seconds -- how long a step with
these decode rows and prefill chunks takes, and how long moving a sequence's KV to
another worker takes (the bytes always come from the capacity model; a table may give its
own link rate) -- and says where its figures come from (``source``), so every figure
built on it can name its source.

``build_clock`` chooses: a user's table when one is given; else, with ``auto`` (the
default) or ``measured``, AIConfigurator's database (``tandem.perf.measured``) where it
covers the model, profile and parallelism; else the analytic roofline
(``tandem.perf.model``), whose source then says why the database did not answer.
``measured`` refuses instead of falling back.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.perf.measured import MeasuredClockUnavailable, build_measured_clock
from tandem.perf.model import Chunk, PerfModel
from tandem.perf.table import PerfTable


class ClockChoice(enum.StrEnum):
    AUTO = "auto"  # measured where the database covers the worker, else analytic
    MEASURED = "measured"  # the database or an error
    ANALYTIC = "analytic"  # the roofline model alone


class StepClock(Protocol):
    @property
    def perf(self) -> PerfModel:
        """The worker the clock prices: model, GPU, parallelism, KV dtype."""
        ...

    @property
    def source(self) -> str:
        """Where the step times come from, in words a report can print."""
        ...

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        """One engine step: ``decode_contexts`` holds each decode row's context before
        its token; ``chunks`` the prefill work scheduled with them."""
        ...

    def kv_transfer_seconds(self, tokens: int) -> float:
        """Moving a ``tokens``-token sequence's KV to another worker."""
        ...


@dataclass(frozen=True, slots=True)
class AnalyticClock:
    perf: PerfModel
    why: str  # why the analytic model prices the steps

    @property
    def source(self) -> str:
        return f"analytic roofline ({self.why})"

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        return self.perf.step_seconds(decode_contexts, chunks)

    def kv_transfer_seconds(self, tokens: int) -> float:
        return self.perf.kv_transfer_seconds(tokens)


@dataclass(frozen=True, slots=True)
class TableClock:
    """A measured table's step times. KV moves at the table's link rate, else over the
    profile's link; a worker without a GPU has no profile link, and with no rate in its
    table its transfers take no time (its source says so)."""

    table: PerfTable
    perf: PerfModel  # for KV bytes, and the link when the table gives none

    @property
    def source(self) -> str:
        measured = f"table: {self.table.source or 'a measured perf table'}"
        if self.table.kv_transfer_bytes_per_second is None and self.perf.gpu is None:
            return f"{measured}; KV transfers unpriced (no kv_transfer_bytes_per_second)"
        return measured

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        return self.table.step_seconds(decode_contexts, chunks)

    def kv_transfer_seconds(self, tokens: int) -> float:
        rate = self.table.kv_transfer_bytes_per_second
        if rate is None:
            return 0.0 if self.perf.gpu is None else self.perf.kv_transfer_seconds(tokens)
        perf = self.perf
        shard = kv_bytes_per_gpu(
            perf.model, tokens, dtype=perf.kv_dtype, tensor_parallel_size=perf.tensor_parallel_size
        )
        return shard / rate


class ClockError(ValueError):
    """The chosen clock cannot be built; the message says why."""


def build_clock(
    perf: PerfModel,
    profile: AcceleratorProfile,
    *,
    choice: ClockChoice = ClockChoice.AUTO,
    table: PerfTable | None = None,
) -> StepClock:
    """The clock for one worker (ClockError when the choice cannot be honoured)."""
    if table is not None:
        if choice is ClockChoice.MEASURED:
            raise ClockError("a perf table and the measured clock exclude each other")
        return TableClock(table, perf)
    if choice is ClockChoice.ANALYTIC:
        return AnalyticClock(perf, "chosen")
    try:
        return build_measured_clock(perf, profile)
    except MeasuredClockUnavailable as exc:
        if choice is ClockChoice.MEASURED:
            raise ClockError(f"the measured clock is unavailable: {exc}") from None
        return AnalyticClock(perf, f"no measured data: {exc}")
