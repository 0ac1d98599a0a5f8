"""ReferenceEngine: the ``Engine`` protocol over the numpy reference model.

Each sequence is computed on its own, one token at a time in ``step``: no op mixes
rows of different sequences, so a sequence's tokens never depend on its batch
neighbours, and an engine that adopted KV bytes from another engine continues it
bit-identically, given the same config on the same CPU type. Constructing an engine
pins the process's BLAS to ``config.blas_threads`` threads, because BLAS may split a
dot product differently with a different thread count.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from tandem.engines.base import (
    EngineError,
    EngineInfo,
    EngineStats,
    FinishReason,
    KvCapacityError,
    KvLayout,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import (
    build_kv_layout,
    compute_kept_blocks,
    compute_kept_range,
    compute_prefill_peak_blocks,
)
from tandem.engines.reference.kv_pool import KvPool, SequenceKv
from tandem.engines.reference.model import ReferenceModel
from tandem.engines.reference.sampling import check_sampling, derive_seed, sample_token

logger = logging.getLogger(__name__)


class _State(enum.Enum):
    RESERVED = "reserved"  # decode side: KV being written by a transport
    ACTIVE = "active"


@dataclass(slots=True)
class _Sequence:
    tokens: list[int]  # prompt + generated; the last one has no KV yet
    prompt_len: int
    kv: SequenceKv
    state: _State
    finish: FinishReason | None = None


class ReferenceEngine:
    def __init__(self, config: ReferenceModelConfig | None = None) -> None:
        self.config = config or ReferenceModelConfig()
        threadpool_limits(limits=self.config.blas_threads, user_api="blas")
        self.model = ReferenceModel(self.config)
        self.pool = KvPool(self.config)
        self._sequences: dict[str, _Sequence] = {}
        self.info = EngineInfo(
            model_name=self.config.model_name,
            vocab_size=self.config.vocab_size,
            max_context=self.config.max_context,
            kv_block_size=self.config.kv_block_size,
            eos_token_id=self.config.eos_token_id,
            extra={
                "engine": "reference",
                "config_digest": self.config.digest(),
                "num_layers": str(self.config.num_layers),
                "sliding_window": str(self.config.sliding_window),
                "kv_token_bytes": str(self.config.kv_token_bytes),
                "blas_threads": str(self.config.blas_threads),
                # A block holds kv_block_size tokens of one layer, not of all layers.
                "kv_block_scope": "layer",
            },
        )
        logger.info(
            "reference engine ready: %s layers, hidden %s, %s experts, KV pool %s blocks "
            "of %s tokens (%.1f MiB), digest %s",
            self.config.num_layers,
            self.config.hidden,
            self.config.num_experts,
            self.config.num_kv_blocks,
            self.config.kv_block_size,
            self.config.num_kv_blocks * self.config.kv_block_bytes / 2**20,
            self.config.digest(),
        )

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> ReferenceEngine:
        return cls(ReferenceModelConfig.from_options(options))

    def kv_regions(self) -> Sequence[memoryview]:
        return [self.pool.region()]

    def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        check_sampling(sampling)
        self._check_new(request_id, prompt)
        config = self.config
        needed = compute_prefill_peak_blocks(config, len(prompt))
        if needed > self.pool.num_free:
            raise KvCapacityError(
                f"prompt of {len(prompt)} tokens needs {needed} KV blocks at peak, "
                f"{self.pool.num_free} of {self.pool.num_total} free"
            )
        kv = SequenceKv(self.pool, config.num_layers)
        try:
            for start in range(0, len(prompt), config.prefill_chunk):
                chunk = range(start, min(len(prompt), start + config.prefill_chunk))
                for layer in range(config.num_layers):
                    kv.cover(layer, chunk)
                logits = self.model.forward(prompt[chunk.start : chunk.stop], start, kv)
                for layer in range(config.num_layers):
                    kv.drop_before(layer, compute_kept_range(config, layer, chunk.stop).start)
        except BaseException:
            kv.release()
            raise
        position = len(prompt)
        first = sample_token(logits, sampling, self._seed(request_id, sampling), position)
        sequence = _Sequence(
            tokens=[*prompt, first], prompt_len=len(prompt), kv=kv, state=_State.ACTIVE
        )
        sequence.finish = self._finish_reason(sequence, sampling)
        self._sequences[request_id] = sequence
        logger.debug("prefilled %s: %s tokens, %s blocks", request_id, position, kv.num_blocks)
        return PrefillResult(
            first_token=first,
            num_prompt_tokens=position,
            kv=build_kv_layout(config, position, kv.tables()),
            finish_reason=sequence.finish,
        )

    def reserve(self, request_id: str, prompt: Sequence[int], first_token: int) -> KvLayout:
        self._check_new(request_id, prompt)
        self._check_token_ids([first_token])
        config, count = self.config, len(prompt)
        layers = range(config.num_layers)
        needed = sum(len(compute_kept_blocks(config, layer, count)) for layer in layers)
        if needed > self.pool.num_free:
            raise KvCapacityError(
                f"reserving {count} tokens needs {needed} KV blocks, "
                f"{self.pool.num_free} of {self.pool.num_total} free"
            )
        kv = SequenceKv(self.pool, config.num_layers)
        for layer in layers:
            kv.cover(layer, compute_kept_range(config, layer, count))
        self._sequences[request_id] = _Sequence(
            tokens=[*prompt, first_token], prompt_len=count, kv=kv, state=_State.RESERVED
        )
        return build_kv_layout(config, count, kv.tables())

    def commit(self, request_id: str) -> None:
        sequence = self._sequences.get(request_id)
        if sequence is None or sequence.state is not _State.RESERVED:
            raise EngineError(f"request {request_id!r} has no reserved KV to commit")
        sequence.state = _State.ACTIVE

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        """Advance each named sequence by one token. If the pool cannot hold the batch's
        new blocks, raises KvCapacityError before generating anything (the caller
        should release or abort a sequence and step again)."""
        batch = [(rid, self._active(rid), params) for rid, params in sampling.items()]
        for _, _, params in batch:
            check_sampling(params)
        missing = 0
        for _, sequence, _ in batch:
            position = len(sequence.tokens) - 1
            for layer in range(self.config.num_layers):
                # Window layers first let go of what the new query no longer sees.
                sequence.kv.drop_before(
                    layer, compute_kept_range(self.config, layer, position + 1).start
                )
                missing += sequence.kv.count_missing_blocks(layer, range(position, position + 1))
        if missing > self.pool.num_free:
            raise KvCapacityError(
                f"decode step needs {missing} new KV blocks, {self.pool.num_free} free; "
                f"requests: {', '.join(sampling)}"
            )
        return [self._advance(rid, sequence, params) for rid, sequence, params in batch]

    def release(self, request_id: str) -> None:
        sequence = self._sequences.pop(request_id, None)
        if sequence is not None:
            sequence.kv.release()

    def stats(self) -> EngineStats:
        """``active_sequences`` counts sequences still generating; finished or reserved
        ones show up only in the KV counts until released."""
        active = sum(
            1 for s in self._sequences.values() if s.state is _State.ACTIVE and s.finish is None
        )
        return EngineStats(
            active_sequences=active,
            kv_blocks_total=self.pool.num_total,
            kv_blocks_free=self.pool.num_free,
            kv_block_size=self.config.kv_block_size,
        )

    def _advance(self, request_id: str, sequence: _Sequence, params: SamplingParams) -> StepOutput:
        position = len(sequence.tokens) - 1
        for layer in range(self.config.num_layers):
            sequence.kv.cover(layer, range(position, position + 1))
        logits = self.model.forward(sequence.tokens[-1:], position, sequence.kv)
        token = sample_token(logits, params, self._seed(request_id, params), position + 1)
        sequence.tokens.append(token)
        sequence.finish = self._finish_reason(sequence, params)
        return StepOutput(request_id=request_id, token=token, finish_reason=sequence.finish)

    def _finish_reason(self, sequence: _Sequence, params: SamplingParams) -> FinishReason | None:
        token = sequence.tokens[-1]
        if token == self.config.eos_token_id or token in params.stop_token_ids:
            return FinishReason.STOP
        generated = len(sequence.tokens) - sequence.prompt_len
        if generated >= params.max_tokens or len(sequence.tokens) >= self.config.max_context:
            return FinishReason.LENGTH
        return None

    def _active(self, request_id: str) -> _Sequence:
        sequence = self._sequences.get(request_id)
        if sequence is None:
            raise EngineError(f"unknown request {request_id!r}")
        if sequence.state is not _State.ACTIVE:
            raise EngineError(f"request {request_id!r} is reserved but not committed")
        if sequence.finish is not None:
            raise EngineError(f"request {request_id!r} already finished ({sequence.finish})")
        return sequence

    def _check_new(self, request_id: str, prompt: Sequence[int]) -> None:
        if request_id in self._sequences:
            raise EngineError(f"request {request_id!r} already holds KV on this engine")
        if not prompt:
            raise EngineError("prompt must contain at least one token")
        if len(prompt) >= self.config.max_context:
            raise EngineError(
                f"prompt of {len(prompt)} tokens leaves no room in the "
                f"{self.config.max_context}-token context"
            )
        self._check_token_ids(prompt)

    def _check_token_ids(self, token_ids: Sequence[int]) -> None:
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise EngineError(f"token ids must be in [0, {self.config.vocab_size})")

    @staticmethod
    def _seed(request_id: str, params: SamplingParams) -> int:
        return params.seed if params.seed is not None else derive_seed(request_id)
