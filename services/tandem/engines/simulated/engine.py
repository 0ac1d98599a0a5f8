"""SimulatedEngine: the ``Engine`` protocol with real token ids and a GPU-shaped clock.

Prompts arrive as the frontend's real token ids; answers are real ids of the same
vocabulary, chosen by a hash chain over the prompt (``tokens``), so they are
deterministic and the same wherever the sequence runs. Nothing is computed on a GPU:
each ``step`` asks the clock (``tandem.perf``) how long the batch it schedules would take
on the modelled GPUs, and ends that long (divided by ``speedup``) after it began
(``pacing``). KV is accounted in the capacity model's blocks (HBM - weights - workspace)
with TensorRT-LLM's no-evict admission (``scheduler``), so queueing and KV pressure come
from the load. A handoff moves a real 64-byte payload per sequence through the worker's
KV transport; the time the real KV would take is the clock's ``kv_transfer_seconds``,
which the worker waits out (``kv_transfer_delay_s``) before the decode side commits.
With ``prefix_cache`` a prompt's leading blocks that an earlier sequence left in the pool
are not computed again, and with offload tiers (``offload_*_bytes``) blocks evicted from
the pool go to host memory, then disk, and come back on a hit for their bytes over the
profile's host or disk link (``kv_reuse``; ``drain_kv_events`` says which tier holds
what, as the reference engine's events do).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from collections.abc import Sequence as Seq

import numpy as np

from tandem.engines.base import (
    EngineError,
    EngineInfo,
    EngineStats,
    FinishReason,
    KvCapacityError,
    KvLayout,
    KvRange,
    PrefillResult,
    SamplingParams,
    StepOutput,
    compute_prompt_share,
)
from tandem.engines.priority import (
    admission_order,
    holds_prompts,
    prefill_order,
    step_token_budget,
)
from tandem.engines.simulated.config import SimulatedConfig
from tandem.engines.simulated.kv_reuse import KvReuse
from tandem.engines.simulated.pacing import Pacer
from tandem.engines.simulated.scheduler import Waiting, choose_admissions, plan_chunks
from tandem.engines.simulated.sequence import Sequence, SequenceState
from tandem.engines.simulated.tokens import (
    PAYLOAD_BYTES,
    Payload,
    PayloadError,
    advance_state,
    choose_token,
    decode_payload,
    encode_payload,
    hash_prompt,
)
from tandem.kv.block_hashes import BlockName, compute_block_names
from tandem.kv.events import KvCacheEvent, Tier
from tandem.kv.offload.stats import OffloadStats
from tandem.perf.model import Chunk, KvCapacity, compute_onboard_seconds, compute_sequence_blocks

logger = logging.getLogger(__name__)

# Wall seconds to wait when nothing can run yet (sequences waiting for KV that other
# sequences hold until a worker releases them).
IDLE_TICK_S = 0.001
# How often a busy engine logs its pacing books (wall seconds).
PACING_LOG_INTERVAL_S = 2.0


class SimulatedEngine:
    def __init__(self, config: SimulatedConfig) -> None:
        self.config = config
        options = config.options
        self.capacity: KvCapacity = config.compute_capacity(
            free_gpu_memory_fraction=options.free_gpu_memory_fraction,
            max_num_tokens=options.max_num_tokens,
            tokens_per_block=options.tokens_per_block,
        )
        self._free_blocks = self.capacity.blocks
        self._reuse = (
            KvReuse(config.offload_blocks(self.capacity)) if options.prefix_cache else None
        )
        self._offloading = bool(options.offload_host_bytes or options.offload_disk_bytes)
        self._region = np.zeros(options.kv_slots * PAYLOAD_BYTES, dtype=np.uint8)
        self._free_slots = list(range(options.kv_slots - 1, -1, -1))
        self._sequences: dict[str, Sequence] = {}
        self._waiting: dict[str, None] = {}  # arrival order
        self._prefilling: dict[str, None] = {}
        self._computed_tokens = 0
        self._cached_tokens = 0  # prompt tokens reused from the device pool
        self._onboarded_tokens = 0  # ... and brought back from the offload tiers
        # Modelled seconds: computing prompt tokens (a step's share), onboarding per tier.
        self._prefill_seconds = 0.0
        self._onboard_seconds: dict[Tier, float] = {}
        self.pacer = Pacer(options.speedup)
        self._work_waited = False
        self._busy = False
        self._logged_at = 0.0
        self.info = EngineInfo(
            model_name=config.architecture.name,
            vocab_size=options.vocab_size,
            max_context=config.max_context,
            kv_block_size=options.tokens_per_block,
            eos_token_id=options.eos_token_id,
            extra={
                "engine": "simulated",
                "config_digest": config.digest(),
                "accelerator": options.accelerator.value,
                "tensor_parallel_size": str(options.tensor_parallel_size),
                "kv_cache_dtype": config.kv_dtype.value,
                "speedup": f"{options.speedup:g}",
                "clock": config.clock.source,
            },
        )
        logger.info(
            "simulated engine: %s on %s x%d (%s KV), %d KV blocks of %d tokens "
            "(%.1f GiB per GPU), speedup %g, clock: %s",
            config.architecture.name,
            options.accelerator.value,
            options.tensor_parallel_size,
            config.kv_dtype.value,
            self.capacity.blocks,
            options.tokens_per_block,
            self.capacity.pool_bytes / 2**30,
            options.speedup,
            self.info.extra["clock"],
        )

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SimulatedEngine:
        return cls(SimulatedConfig.from_options(options))

    def kv_regions(self) -> Seq[memoryview]:
        return [self._region.data]

    def kv_transfer_delay_s(self, num_tokens: int) -> float:
        """Wall seconds the real KV of a ``num_tokens`` prompt would take to arrive."""
        return self.config.clock.kv_transfer_seconds(num_tokens) / self.config.options.speedup

    # -- prefill ----------------------------------------------------------------------

    def start_prefill(self, request_id: str, prompt: Seq[int], sampling: SamplingParams) -> None:
        self._check_new(request_id, prompt)
        sequence = Sequence(
            prompt_len=len(prompt),
            slot=self._take_slot(),
            state=SequenceState.WAITING,
            local=True,
            max_tokens=sampling.max_tokens,
            priority=sampling.priority,
            prompt=list(prompt),
            seed=sampling.seed if sampling.temperature > 0 else None,
            stop_ids=sampling.stop_token_ids,
            names=self._names(prompt),
        )
        self._sequences[request_id] = sequence
        self._waiting[request_id] = None

    def prefill(self, request_id: str, prompt: Seq[int], sampling: SamplingParams) -> PrefillResult:
        """The whole prompt now, alone; KvCapacityError if its KV is not free now."""
        self.start_prefill(request_id, prompt, sampling)
        try:
            self._admit()
            if self._sequences[request_id].state is SequenceState.WAITING:
                raise KvCapacityError(
                    f"prompt of {len(prompt)} tokens and {sampling.max_tokens} answer tokens "
                    f"need {self._need(self._sequences[request_id])} KV blocks, "
                    f"{self._free_blocks} of {self.capacity.blocks} free"
                )
            while True:
                started = self.pacer.now()
                outputs, modelled = self._run({}, only=request_id)
                self.pacer.finish_step(started, modelled, work_waited=False)
                for output in outputs:
                    if output.prefill is not None:
                        return output.prefill
        except BaseException:
            self.release(request_id)
            raise

    # -- decode side of a handoff -----------------------------------------------------

    def reserve(self, request_id: str, prompt: Seq[int], first_token: int) -> KvLayout:
        self._check_new(request_id, prompt)
        self._check_token(first_token)
        slot = self._take_slot()
        self._region[slot * PAYLOAD_BYTES : (slot + 1) * PAYLOAD_BYTES] = 0
        self._sequences[request_id] = Sequence(
            prompt_len=len(prompt),
            slot=slot,
            state=SequenceState.RESERVED,
            local=False,
            max_tokens=None,
            generated=1,
            last_token=first_token,
            names=self._names(prompt),
        )
        return self._layout(len(prompt), slot)

    def commit(self, request_id: str) -> None:
        sequence = self._sequences.get(request_id)
        if sequence is None or sequence.state is not SequenceState.RESERVED:
            raise EngineError(f"request {request_id!r} has no reserved KV to commit")
        start = sequence.slot * PAYLOAD_BYTES
        data = self._region[start : start + PAYLOAD_BYTES].tobytes()
        try:
            payload = decode_payload(data, sequence.prompt_len, sequence.last_token)
        except PayloadError as exc:
            raise EngineError(f"request {request_id!r}: {exc}") from exc
        sequence.hash_state = advance_state(payload.state, payload.first_token)
        sequence.state = SequenceState.WAITING
        self._waiting[request_id] = None

    # -- the batch step ---------------------------------------------------------------

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        """``advance``, ended ``modelled / speedup`` wall seconds after it began."""
        started = self.pacer.now()
        outputs, modelled = self.advance(sampling)
        if modelled == 0.0:
            self._log_pacing_when_idle()
            self.pacer.idle(IDLE_TICK_S)
            self._work_waited = bool(self._waiting or sampling)
            return outputs
        self._busy = True
        self.pacer.finish_step(started, modelled, work_waited=self._work_waited)
        # Work waits for the next step: queued or prefilling sequences, or decode rows
        # that did not finish (a finished prefill waits for a decode worker, not for us).
        self._work_waited = bool(
            self._waiting
            or self._prefilling
            or any(o.finish_reason is None and o.prefill is None for o in outputs)
        )
        if self.pacer.now() - self._logged_at >= PACING_LOG_INTERVAL_S:
            self._log_pacing()
        return outputs

    def advance(self, sampling: Mapping[str, SamplingParams]) -> tuple[list[StepOutput], float]:
        """One step without waiting: its outputs and the modelled seconds it takes (0.0
        when nothing could run). ``step`` paces it in wall time; a virtual-time driver
        (``tandem.sim``) advances its own clock instead."""
        for request_id, params in sampling.items():
            sequence = self._sequences.get(request_id)
            if sequence is None:
                raise EngineError(f"unknown request {request_id!r}")
            if sequence.state in (SequenceState.RESERVED, SequenceState.PREFILLING):
                raise EngineError(f"request {request_id!r} is not ready to decode")
            if sequence.finish is not None:
                raise EngineError(f"request {request_id!r} already finished ({sequence.finish})")
            sequence.stop_ids = params.stop_token_ids
            sequence.priority = params.priority
            if sequence.max_tokens is None:
                sequence.max_tokens = params.max_tokens
        return self._run(sampling)

    def _run(
        self, sampling: Mapping[str, SamplingParams], only: str | None = None
    ) -> tuple[list[StepOutput], float]:
        self._admit()
        rows = [rid for rid in sampling if self._sequences[rid].state is SequenceState.READY]
        prefilling = [only] if only is not None else self._prefill_order()
        if prefilling and only is None:
            ranks = [(self._sequences[r].priority, self._sequences[r].generated) for r in rows]
            if holds_prompts(ranks, self._sequences[prefilling[0]].priority):
                prefilling = []
        remaining = [
            self._sequences[rid].prompt_len - self._sequences[rid].computed for rid in prefilling
        ]
        budget = self.config.options.max_num_tokens
        if prefilling:
            priorities = [self._sequences[rid].priority for rid in rows]
            budget = step_token_budget(budget, priorities, self._sequences[prefilling[0]].priority)
        chunks = plan_chunks(budget, len(rows), remaining)
        work = [(rid, n) for rid, n in zip(prefilling, chunks, strict=True) if n]
        if not rows and not work:
            return [], 0.0
        contexts = [self._context(self._sequences[rid]) for rid in rows]
        modelled = self.config.clock.step_seconds(
            contexts, [Chunk(self._sequences[rid].computed, n) for rid, n in work]
        )
        prompt_tokens = sum(n for _, n in work)
        self._prefill_seconds += compute_prompt_share(
            modelled, prompt_tokens, prompt_tokens + len(rows)
        )
        for rid, _ in work:
            # A hit's blocks come back from the tiers before its first chunk runs, and
            # the whole step waits for them: TensorRT-LLM copies them on its own stream
            # (KVCacheTransferManager's onboard stream), but syncTransfers makes the
            # compute stream wait for that stream before the step (checked in
            # cpp/tensorrt_llm/batch_manager/kvCacheTransferManager.cpp, 2025 sources).
            modelled += self._sequences[rid].onboard_s
            self._sequences[rid].onboard_s = 0.0
        outputs = [self._decode(rid) for rid in rows]
        outputs += [out for rid, n in work if (out := self._advance(rid, n)) is not None]
        return outputs, modelled

    def _log_pacing_when_idle(self) -> None:
        if self._busy:
            self._busy = False
            self._log_pacing()

    def _log_pacing(self) -> None:
        """Whether the plumbing keeps up with the modelled clock: cumulative books, at
        most every PACING_LOG_INTERVAL_S while busy and when the engine goes idle."""
        self._logged_at = self.pacer.now()
        logger.info("%s", self.pacer.describe())

    def _next_token(self, state: bytes, generated: int) -> int:
        """The answer's token number ``generated`` (0-based), from the chain's state."""
        prefix = self.config.options.answer_prefix
        if generated < len(prefix):
            return prefix[generated]
        return choose_token(state, self.config.options.output_token_limit)

    def _decode(self, request_id: str) -> StepOutput:
        sequence = self._sequences[request_id]
        token = self._next_token(sequence.hash_state, sequence.generated)
        sequence.hash_state = advance_state(sequence.hash_state, token)
        sequence.last_token = token
        sequence.generated += 1
        sequence.finish = self._finish_reason(sequence)
        return StepOutput(request_id, token, sequence.finish)

    def _advance(self, request_id: str, tokens: int) -> StepOutput | None:
        sequence = self._sequences[request_id]
        sequence.computed += tokens
        self._computed_tokens += tokens
        if sequence.computed < sequence.prompt_len:
            return None
        assert sequence.prompt is not None
        state = hash_prompt(sequence.prompt, sequence.seed)
        token = self._next_token(state, 0)
        sequence.prompt = None
        sequence.hash_state = advance_state(state, token)
        sequence.last_token = token
        sequence.generated = 1
        sequence.finish = self._finish_reason(sequence)
        sequence.state = SequenceState.READY
        del self._prefilling[request_id]
        self._hold_all(sequence)
        start = sequence.slot * PAYLOAD_BYTES
        payload = encode_payload(Payload(state, sequence.prompt_len, token))
        self._region[start : start + PAYLOAD_BYTES] = np.frombuffer(payload, dtype=np.uint8)
        result = PrefillResult(
            first_token=token,
            num_prompt_tokens=sequence.prompt_len,
            kv=self._layout(sequence.prompt_len, sequence.slot),
            finish_reason=sequence.finish,
        )
        return StepOutput(request_id, token, sequence.finish, prefill=result)

    def _prefill_order(self) -> list[str]:
        queued = list(self._prefilling)
        return [queued[i] for i in prefill_order([self._sequences[r].priority for r in queued])]

    def _admit(self) -> None:
        waiting = list(self._waiting)
        ranks = admission_order([self._sequences[rid].priority for rid in waiting])
        order = [waiting[i] for i in ranks]
        entries = [
            Waiting(self._sequences[rid].max_tokens is not None, self._need(self._sequences[rid]))
            for rid in order
        ]
        admitted = sum(1 for s in self._sequences.values() if s.blocks)
        room = self.config.options.max_batch_size - admitted
        for index in choose_admissions(entries, self._free_blocks, room):
            rid = order[index]
            sequence = self._sequences[rid]
            sequence.blocks = entries[index].blocks
            self._free_blocks -= sequence.blocks
            del self._waiting[rid]
            if sequence.local:
                sequence.state = SequenceState.PREFILLING
                self._prefilling[rid] = None
                self._reuse_prefix(sequence)
            else:
                sequence.state = SequenceState.READY
                self._hold_all(sequence)
        if self._reuse is not None:
            self._reuse.evict(self._free_blocks)

    def _reuse_prefix(self, sequence: Sequence) -> None:
        """Start ``sequence``'s prefill after the blocks the cache and the tiers hold
        (at least its last prompt token is computed: it yields the first answer token)."""
        if self._reuse is None:
            return
        hit = self._reuse.acquire(sequence.names)
        sequence.held = hit.blocks
        block = self.config.options.tokens_per_block
        sequence.computed = min(hit.blocks * block, sequence.prompt_len - 1)
        cached = min(hit.device * block, sequence.computed)
        self._cached_tokens += cached
        self._onboarded_tokens += sequence.computed - cached
        by_tier = {
            tier: compute_onboard_seconds(self.config.perf, {tier: blocks * block})
            for tier, blocks in hit.onboarded.items()
        }
        for tier, seconds in by_tier.items():
            self._onboard_seconds[tier] = self._onboard_seconds.get(tier, 0.0) + seconds
        sequence.onboard_s = sum(by_tier.values())  # the tiers one after the other

    def _hold_all(self, sequence: Sequence) -> None:
        """The rest of ``sequence``'s prompt blocks are in the pool now (computed, or
        received from a prefill worker)."""
        if self._reuse is not None:
            self._reuse.hold(sequence.names, sequence.held)
            sequence.held = len(sequence.names)

    # -- bookkeeping ------------------------------------------------------------------

    def release(self, request_id: str) -> None:
        sequence = self._sequences.pop(request_id, None)
        if sequence is None:
            return
        self._waiting.pop(request_id, None)
        self._prefilling.pop(request_id, None)
        self._free_blocks += sequence.blocks
        self._free_slots.append(sequence.slot)
        if self._reuse is not None:
            self._reuse.release(sequence.names[: sequence.held])

    def drain_kv_events(self) -> list[KvCacheEvent]:
        """Where the prefix cache's blocks went since the previous call, tier by tier
        (none without ``prefix_cache``)."""
        return [] if self._reuse is None else self._reuse.drain_events()

    def stats(self) -> EngineStats:
        active = sum(
            1
            for s in self._sequences.values()
            if s.state is SequenceState.READY and s.generated and s.finish is None
        )
        return EngineStats(
            active_sequences=active,
            kv_blocks_total=self.capacity.blocks,
            kv_blocks_free=self._free_blocks,
            kv_block_size=self.config.options.tokens_per_block,
            queued_requests=len(self._waiting),
            prompt_tokens_cached=self._cached_tokens,
            prompt_tokens_onboarded=self._onboarded_tokens,
            prompt_tokens_computed=self._computed_tokens,
            prefill_seconds=self._prefill_seconds,
            kv_blocks_cached=self._reuse.cached if self._reuse else 0,
            offload=self._offload_stats(),
        )

    def _offload_stats(self) -> OffloadStats | None:
        if self._reuse is None or not self._offloading:
            return None
        return dataclasses.replace(self._reuse.stats(), onboard_seconds=dict(self._onboard_seconds))

    def _need(self, sequence: Sequence) -> int:
        """Blocks for the prompt and the whole answer; a sequence longer than the pool
        (checked in ``_check_new``: its prompt fits) reserves the whole pool rather than
        waiting forever, and may run out of context first."""
        tokens = sequence.prompt_len + (sequence.max_tokens or 1)
        need = compute_sequence_blocks(self.config.perf, self.capacity, tokens)
        return min(need, self.capacity.blocks)

    def _names(self, prompt: Seq[int]) -> tuple[BlockName, ...]:
        if self._reuse is None:
            return ()
        return tuple(compute_block_names(prompt, self.config.options.tokens_per_block))

    @staticmethod
    def _context(sequence: Sequence) -> int:
        """Tokens in KV before this step's token (the prompt and all but the newest)."""
        return sequence.prompt_len + sequence.generated - 1

    def _finish_reason(self, sequence: Sequence) -> FinishReason | None:
        if (
            sequence.last_token in sequence.stop_ids
            or sequence.last_token == self.info.eos_token_id
        ):
            return FinishReason.STOP
        assert sequence.max_tokens is not None
        if (
            sequence.generated >= sequence.max_tokens
            or sequence.prompt_len + sequence.generated >= self.config.max_context
        ):
            return FinishReason.LENGTH
        return None

    def _layout(self, num_tokens: int, slot: int) -> KvLayout:
        return KvLayout(num_tokens, (KvRange(0, slot * PAYLOAD_BYTES, PAYLOAD_BYTES),))

    def _take_slot(self) -> int:
        if not self._free_slots:
            raise KvCapacityError(
                f"all {self.config.options.kv_slots} sequence slots are in use (option kv_slots)"
            )
        return self._free_slots.pop()

    def _check_new(self, request_id: str, prompt: Seq[int]) -> None:
        if request_id in self._sequences:
            raise EngineError(f"request {request_id!r} already holds KV on this engine")
        if not prompt:
            raise EngineError("prompt must contain at least one token")
        if len(prompt) >= self.config.max_context:
            raise EngineError(
                f"prompt of {len(prompt)} tokens leaves no room in the "
                f"{self.config.max_context}-token context"
            )
        if min(prompt) < 0 or max(prompt) >= self.info.vocab_size:
            raise EngineError(f"token ids must be in [0, {self.info.vocab_size})")
        need = compute_sequence_blocks(self.config.perf, self.capacity, len(prompt) + 1)
        if need > self.capacity.blocks:
            raise EngineError(
                f"prompt of {len(prompt)} tokens needs {need} KV blocks; the whole pool "
                f"holds {self.capacity.blocks}"
            )

    def _check_token(self, token: int) -> None:
        if not 0 <= token < self.info.vocab_size:
            raise EngineError(f"token ids must be in [0, {self.info.vocab_size})")
