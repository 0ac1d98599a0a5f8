"""The engine seam: what a prefill or decode worker needs from a model runtime.

Three implementations sit behind it: ``reference`` (numpy, CPU, this repo),
``simulated`` (real token ids, a GPU-calibrated clock) and ``trtllm`` (TensorRT-LLM's LLM
API on GPUs). Workers only ever talk to this interface.

Lifecycle of one disaggregated request::

    prefill side                          decode side
    ------------                          -----------
    prefill(req_id, tokens, sampling)
      -> PrefillResult(first_token, kv)   (kv travels to the decode worker in the
                                           gRPC response, then:)
                                          adopt(req_id, tokens, kv_bytes_source)
                                          decode(req_id, sampling) -> tokens...
    release(req_id)  <- decode side, once the KV has been pulled (or on lease expiry)

Local (non-disaggregated) requests call ``prefill`` and then ``decode`` on the same
engine; the KV never leaves the process.

Engines are synchronous and single-threaded by contract: the worker owns the thread the
engine runs on and serialises calls. ``step`` is one forward pass over every running
sequence: it advances each decoding sequence by one token and each prefill queued with
``start_prefill`` by its next chunk (continuous batching with chunked prefill), so a long
prompt never stalls the decode streams for its whole prefill. ``prefill`` is the same
work done at once, for callers with nothing else to run.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # tandem.kv imports this module
    from tandem.kv.events import Tier
    from tandem.kv.offload.stats import OffloadStats


class FinishReason(enum.StrEnum):
    """Why a sequence stopped; values are OpenAI's ``finish_reason`` strings."""

    STOP = "stop"  # an end-of-sequence or stop token
    LENGTH = "length"  # max_tokens or the context limit
    CANCELLED = "cancelled"  # client went away or the request was aborted


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    # Where the request stands among those waiting for the engine: higher first, then
    # arrival (``tandem.engines.priority``). The frontend sets it from its fair-queuing
    # state (``tandem.frontend.tenancy``); it travels here because every engine call
    # already carries the request's sampling, from the frontend through the router.
    priority: int = 0


@dataclass(frozen=True, slots=True)
class KvRange:
    """A contiguous byte range inside one registered KV region of an engine."""

    region: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class KvLayout:
    """Where a sequence's KV lives, in transfer order (layer by layer).

    ``ranges`` lists exactly the bytes the decode side needs: all tokens of
    full-attention layers, only the last ``window`` tokens of sliding-window layers.
    Both sides compute it for their own memory; the transport copies
    ``remote.ranges[i]`` into ``local.ranges[i]`` for every i (same lengths).
    """

    num_tokens: int
    ranges: tuple[KvRange, ...]

    @property
    def nbytes(self) -> int:
        return sum(r.length for r in self.ranges)


@dataclass(frozen=True, slots=True)
class PrefillResult:
    first_token: int
    num_prompt_tokens: int
    kv: KvLayout
    # Opaque engine-specific state a decode engine needs (TensorRT-LLM's
    # disaggregated params); empty for the reference engine.
    opaque: bytes = b""
    finish_reason: FinishReason | None = None  # set when the first token already ends it


@dataclass(frozen=True, slots=True)
class StepOutput:
    request_id: str
    token: int
    finish_reason: FinishReason | None
    # Set on the step that finished a prefill queued with ``start_prefill`` (``token`` is
    # then its first token).
    prefill: PrefillResult | None = None


@dataclass(frozen=True, slots=True)
class EngineStats:
    active_sequences: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_block_size: int
    # Requests accepted by the engine but not yet scheduled (engines with their own
    # scheduler, e.g. TensorRT-LLM); 0 where the worker owns the queue.
    queued_requests: int = 0
    # Since start: prompt tokens served from the prefix cache, brought back into it from
    # the offload tiers, and computed (received KV counts as none). 0 for engines that do
    # not report them.
    prompt_tokens_cached: int = 0
    prompt_tokens_onboarded: int = 0
    prompt_tokens_computed: int = 0
    # Since start: the time spent computing ``prompt_tokens_computed``, a step's time
    # shared among the tokens it computed (a decode row is one token). With the offload
    # tiers' ``onboard_seconds``, what a token in a tier saves against computing it.
    prefill_seconds: float = 0.0
    kv_blocks_cached: int = 0  # full blocks the prefix cache names now
    offload: OffloadStats | None = None  # engines with KV offload tiers

    @property
    def kv_utilization(self) -> float:
        if self.kv_blocks_total == 0:
            return 0.0
        return 1.0 - self.kv_blocks_free / self.kv_blocks_total

    @property
    def prefill_seconds_per_token(self) -> float:
        """What computing one prompt token took on average; 0.0 before any."""
        if self.prompt_tokens_computed <= 0:
            return 0.0
        return self.prefill_seconds / self.prompt_tokens_computed

    @property
    def onboard_seconds_per_token(self) -> dict[Tier, float]:
        """Per offload tier that has onboarded blocks (``kv_block_size`` tokens each),
        what bringing back one token took on average."""
        offload = self.offload
        if offload is None or self.kv_block_size <= 0:
            return {}
        return {
            tier: offload.onboard_seconds.get(tier, 0.0) / (blocks * self.kv_block_size)
            for tier, blocks in offload.onboarded.items()
            if blocks > 0
        }


def compute_prompt_share(step_seconds: float, prompt_tokens: int, step_tokens: int) -> float:
    """The part of a step's time that ``EngineStats.prefill_seconds`` counts: the step's
    time shared by its ``step_tokens`` tokens (a decode row is one), ``prompt_tokens`` of
    them prompt tokens computed. Every engine counts alike, so that routers can weigh
    one worker's figures against another's."""
    return step_seconds * prompt_tokens / step_tokens if prompt_tokens else 0.0


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Static facts about a loaded model, shared with routers and planners."""

    model_name: str
    vocab_size: int
    max_context: int
    kv_block_size: int
    eos_token_id: int
    # How many ranks hold a share of each sequence's KV (its tensor-parallel group).
    # Above 1 its KV leaves only once gathered (``GathersKv``).
    kv_ranks: int = 1
    extra: dict[str, str] = field(default_factory=dict)


class EngineError(Exception):
    """An engine refused or failed a request; the message is safe to show a user."""


class EngineLost(EngineError):
    """The engine can serve nothing more (a rank of its group is gone): only a restart of
    the worker, and of its group, helps."""


class KvCapacityError(EngineError):
    """Not enough free KV blocks for the request right now (retryable elsewhere)."""


class Engine(Protocol):
    info: EngineInfo

    def kv_regions(self) -> Sequence[memoryview]:
        """The engine's KV memory, registered once with a KV transport (prefill side
        serves reads from it; decode side reads into it)."""
        ...

    def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        """Run the prompt now, keep its KV, return the first sampled token.
        Raises KvCapacityError when the KV pool cannot hold the prompt."""
        ...

    def start_prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> None:
        """Queue a prefill; ``step`` runs it in chunks and, on the step that finishes it,
        returns a ``StepOutput`` whose ``prefill`` is the ``PrefillResult``. Raises
        KvCapacityError when the KV pool cannot hold the prompt (nothing is queued);
        ``release`` drops a queued prefill."""
        ...

    def reserve(self, request_id: str, prompt: Sequence[int], first_token: int) -> KvLayout:
        """Decode side of a handoff: allocate KV for ``prompt`` whose first generated
        token is ``first_token``; returns where the transport must write it."""
        ...

    def commit(self, request_id: str) -> None:
        """Decode side: the transport finished writing the reserved KV; the sequence
        becomes active and ``step`` will extend it."""
        ...

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        """Advance every active sequence named in ``sampling`` by one token, and every
        queued prefill by its next chunk (outputs for finished prefills follow)."""
        ...

    def release(self, request_id: str) -> None:
        """Free a sequence's KV (idempotent; unknown ids are ignored)."""
        ...

    def stats(self) -> EngineStats: ...


@runtime_checkable
class ModelledKvTransfer(Protocol):
    """An engine whose KV stands in for a larger one (the simulated engine moves a small
    payload for real): how long the real KV of a ``num_tokens`` prompt would take to
    reach this worker, in wall seconds. The decode side waits out the part of it the
    real transfer did not take before committing."""

    def kv_transfer_delay_s(self, num_tokens: int) -> float: ...


@runtime_checkable
class GathersKv(Protocol):
    """An engine whose KV is split across the ranks of its group (``info.kv_ranks`` > 1).
    Its ``PrefillResult.kv`` names where a prefilled sequence's KV lies in the whole
    model's layout, in one of its ``kv_regions``, once ``gather_kv`` has put the ranks'
    shares there: the worker calls it before another worker reads the KV, so that an
    engine that decodes what it prefilled never pays for it."""

    def gather_kv(self, request_id: str) -> None: ...


class AsyncEngine(Protocol):
    """An engine with its own scheduler and its own KV transfer (TensorRT-LLM).

    Such a runtime batches requests itself and streams tokens asynchronously, so there
    is no ``step``: the worker submits requests and consumes per-request streams. Its KV
    moves inside the runtime (TensorRT-LLM's cache transceiver, over NIXL or UCX), not
    through Tandem's transport: ``PrefillResult.kv`` is empty and ``PrefillResult.opaque``
    carries the handle the decode side needs. There is no ``reserve``/``commit`` and no
    ``kv_regions``.

    Prefill side::

        result = await engine.prefill(request_id, prompt, sampling)
        # ship result (first_token, opaque) to the decode worker

    Decode side (``handoff`` is the prefill worker's PrefillResult; without it the
    engine prefills locally)::

        async for out in engine.generate(request_id, prompt, sampling, handoff=result):
            ...  # tokens after result.first_token; the last carries finish_reason

    ``cancel`` aborts a running ``prefill``/``generate`` (the stream then ends with a
    ``CANCELLED`` step or simply stops); closing the ``generate`` iterator early cancels
    too. A stream that ends without a step carrying ``finish_reason`` was cancelled, or
    the runtime reported the end without a new token (treat it as STOP). Every call may
    raise EngineError with a message safe to show a user.
    """

    info: EngineInfo

    async def start(self) -> None:
        """Load the model (may take minutes); call once before anything else."""
        ...

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult: ...

    def generate(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        handoff: PrefillResult | None = None,
    ) -> AsyncIterator[StepOutput]: ...

    async def cancel(self, request_id: str) -> None:
        """Abort a running request (idempotent; unknown ids are ignored)."""
        ...

    async def release(self, request_id: str) -> None:
        """Prefill side: the decode worker is done with this request's KV (idempotent)."""
        ...

    async def stats(self) -> EngineStats: ...

    async def close(self) -> None: ...
