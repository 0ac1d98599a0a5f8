"""ReferenceEngine: the ``Engine`` protocol over the numpy reference model.

Each ``step`` is one forward pass over every running sequence: one row per decoding
sequence plus the next chunk of each queued prefill, under ``max_batch_tokens``
(``step_plan``). A token's arithmetic never depends on its batch, its prefill chunk or
whether it was a prompt or a generated token (``linear``, ``attention``), so a sequence
produces the same tokens alone or in any batch, and an engine that adopted KV bytes
from another engine continues it bit-identically, given the same config on the same CPU
type. Constructing an engine pins the process's BLAS to ``config.blas_threads`` threads,
because BLAS may split a dot product differently with a different thread count, and
tunes the allocator to keep freed memory (``malloc``).

Full KV blocks go into a prefix cache (``prefix_cache``) unless ``prefix_cache`` is off:
a new prompt reuses its longest cached prefix and prefills only the rest, and the cache
reports what it holds as KV events (``drain_kv_events``). With offload tiers
(``offload_*`` options) evicted blocks go down to host memory and disk, and a prompt's
blocks found there come back before it is prefilled (``offload``), read on the onboarding
thread while the engine steps its other sequences.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Mapping
from collections.abc import Sequence as Seq

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
    compute_prompt_share,
)
from tandem.engines.priority import holds_prompts, prefill_order, step_token_budget
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import (
    build_kv_layout,
    compute_kept_blocks,
    compute_kept_range,
    compute_prefill_peak_blocks,
    list_kept_physical_blocks,
)
from tandem.engines.reference.kv_pool import KvPool, SequenceKv
from tandem.engines.reference.loading import load_model
from tandem.engines.reference.malloc import keep_freed_memory
from tandem.engines.reference.model import ReferenceModel, Segment
from tandem.engines.reference.offload import Onboarding, claim_onboarding, open_offload
from tandem.engines.reference.prefix_cache import PrefixCache
from tandem.engines.reference.sampling import check_sampling, derive_seed, sample_token
from tandem.engines.reference.sequence import Sequence, SequenceState
from tandem.engines.reference.step_plan import compute_attention_tokens, plan_prefill_chunks
from tandem.engines.reference.tp.ray_ranks import RankGroup, start_ranks
from tandem.engines.reference.tp.shard import plan_shard, shard_config, shard_weights
from tandem.engines.reference.tp.whole_kv import WholeKv
from tandem.engines.reference.weights import ModelWeights, init_weights
from tandem.kv.block_hashes import BlockName, compute_block_names
from tandem.kv.events import KvCacheEvent

logger = logging.getLogger(__name__)

# With nothing to compute but blocks coming back from the tiers, a step waits this long
# for them before it returns (empty), so that new work can be queued between steps.
ONBOARDING_WAIT_S = 0.005


class ReferenceEngine:
    def __init__(
        self,
        config: ReferenceModelConfig | None = None,
        weights: ModelWeights | None = None,
        ranks: RankGroup | None = None,
        *,
        onboarding_reader: concurrent.futures.Executor | None = None,
    ) -> None:
        """``ranks``: the follower ranks of a tensor-parallel group, which this engine
        leads as rank 0 (``tp``); needed exactly when ``tensor_parallel_size > 1``.
        ``onboarding_reader`` reads blocks back from the offload tiers: by default a
        thread of its own; one that runs what it is given at once reads them on the
        engine's thread, before the prompt is queued (the benchmark's baseline)."""
        self.config = config or ReferenceModelConfig()
        threadpool_limits(limits=self.config.blas_threads, user_api="blas")
        keep_freed_memory()
        if (ranks is None) != (self.config.tensor_parallel_size == 1):
            raise EngineError(
                f"tensor_parallel_size {self.config.tensor_parallel_size} needs "
                f"{self.config.tensor_parallel_size - 1} follower rank(s)"
            )
        self._ranks = ranks
        local, weights = self.config, weights or init_weights(self.config)
        if ranks is not None:
            shard = plan_shard(self.config, 0, self.config.tensor_parallel_size)
            local, weights = (
                shard_config(self.config, shard),
                shard_weights(weights, self.config, shard),
            )
        self.model = ReferenceModel(local, weights, None if ranks is None else ranks.link.reduce)
        self.pool = KvPool(local)
        # A TP group's KV moves to and from other workers through a region in the whole
        # model's layout (``tp.whole_kv``), its kv_regions' second.
        self._whole_kv = None if ranks is None else WholeKv(self.config)
        self._handoff_region = 0 if ranks is None else 1
        self.cache = PrefixCache(self.pool) if self.config.prefix_cache else None
        self.offload = open_offload(self.config, self.pool, self.cache)
        self._reader = onboarding_reader
        if self.offload is not None and self._reader is None:
            self._reader = concurrent.futures.ThreadPoolExecutor(1, "kv-onboarding")
        self._onboarding: list[tuple[str, Sequence, Onboarding]] = []  # oldest first
        self._sequences: dict[str, Sequence] = {}
        self._prefilling: dict[str, None] = {}  # arrival order
        self._cached_tokens = 0
        self._onboarded_tokens = 0
        self._computed_tokens = 0
        self._prefill_seconds = 0.0
        self._attention_tokens = compute_attention_tokens(self.config)
        self.info = EngineInfo(
            model_name=self.config.model_name,
            vocab_size=self.config.vocab_size,
            max_context=self.config.max_context,
            kv_block_size=self.config.kv_block_size,
            eos_token_id=self.config.eos_token_id,
            kv_ranks=self.config.tensor_parallel_size,
            extra={
                "engine": "reference",
                "config_digest": self.config.digest(),
                "weights": "gguf" if self.config.weights_digest else "random",
                "num_layers": str(self.config.num_layers),
                "sliding_window": str(self.config.sliding_window),
                "kv_token_bytes": str(self.config.kv_token_bytes),
                "blas_threads": str(self.config.blas_threads),
                "tensor_parallel_size": str(self.config.tensor_parallel_size),
                # A block holds kv_block_size tokens of one layer, not of all layers.
                "kv_block_scope": "layer",
            },
        )
        logger.info(
            "reference engine ready: %s, %s layers, hidden %s, %s experts, KV pool %s "
            "blocks of %s tokens (%.1f MiB), prefix cache %s, digest %s",
            self.config.model_name,
            self.config.num_layers,
            self.config.hidden,
            self.config.num_experts,
            self.config.num_kv_blocks,
            self.config.kv_block_size,
            self.config.num_kv_blocks * self.config.kv_block_bytes / 2**20,
            "on" if self.cache is not None else "off",
            self.config.digest(),
        )

    @classmethod
    def from_options(
        cls, options: Mapping[str, object], model_source: str | None = None
    ) -> ReferenceEngine:
        config, weights = load_model(options, model_source)
        ranks = None
        if config.tensor_parallel_size > 1:
            ranks = start_ranks(options, model_source, config.tensor_parallel_size)
        return cls(config, weights, ranks)

    def kv_regions(self) -> Seq[memoryview]:
        """The pool, then (in a tensor-parallel group) the whole-layout region."""
        own = [self.pool.region()]
        return own if self._whole_kv is None else [*own, self._whole_kv.region()]

    # -- prefill ----------------------------------------------------------------------

    def prefill(self, request_id: str, prompt: Seq[int], sampling: SamplingParams) -> PrefillResult:
        """The whole prompt now (other queued prefills wait)."""
        self.start_prefill(request_id, prompt, sampling)
        try:
            while True:
                self._settle_onboarding()
                ready = self._sequences[request_id].state is SequenceState.PREFILLING
                for output in self._run([], [request_id] if ready else []):
                    assert output.prefill is not None
                    return output.prefill
        except BaseException:
            self.release(request_id)
            raise

    def start_prefill(self, request_id: str, prompt: Seq[int], sampling: SamplingParams) -> None:
        """Queue a prefill: ``step`` computes it chunk by chunk, and the step that
        finishes it returns a ``StepOutput`` carrying its ``PrefillResult``. Reuses the
        longest cached prefix. Raises KvCapacityError when the pool cannot hold it."""
        check_sampling(sampling)
        self._check_new(request_id, prompt)
        config = self.config
        names = compute_block_names(prompt, config.kv_block_size) if self.cache else []
        reusable = self._reusable(names, len(prompt))
        reused = self.cache.match(reusable) if self.cache else []
        onboarding = None
        if self.cache and self.offload:
            onboarding = claim_onboarding(
                self.pool,
                self.cache,
                self.offload,
                reusable,
                reused,
                config.num_layers,
                self._available,
            )
        # The blocks coming back are the sequence's from now on, as if cached: if some do
        # not come back, it takes the prefix again when they are in (``_settle``).
        blocks = [entry.blocks for entry in reused] + (onboarding.blocks if onboarding else [])
        cached = len(blocks) * config.kv_block_size
        shared = self._reused_blocks(blocks, cached)
        peak = compute_prefill_peak_blocks(config, len(prompt))
        in_use = sum(1 for layer in shared for b in layer if self.pool.refs(b))
        if peak - in_use > self._available():
            if onboarding is not None:
                onboarding.cancel()
            raise KvCapacityError(
                f"prompt of {len(prompt)} tokens needs {peak - in_use} KV blocks at peak, "
                f"{self._available()} of {self.pool.num_total} free"
            )
        sequence = Sequence(
            tokens=list(prompt),
            prompt_len=len(prompt),
            kv=self._adopt(shared, cached),
            state=SequenceState.ONBOARDING if onboarding else SequenceState.PREFILLING,
            sampling=sampling,
            computed=cached,
            names=names,
            stored=len(blocks),
            peak_blocks=peak,
        )
        self._sequences[request_id] = sequence
        self._prefilling[request_id] = None
        self._cached_tokens += len(reused) * config.kv_block_size
        if onboarding is not None:
            assert self._reader is not None
            onboarding.start(self._reader)
            self._onboarding.append((request_id, sequence, onboarding))
        if cached:
            logger.debug(
                "%s: %d of %d prompt tokens from the cache (%d coming back from the tiers)",
                request_id,
                cached,
                len(prompt),
                cached - len(reused) * config.kv_block_size,
            )

    def _reusable(self, names: list[BlockName], prompt_len: int) -> list[BlockName]:
        """The leading blocks of a prompt's ``names`` a cache may give it: at least its
        last token is computed, since its logits give the first token."""
        return names[: (prompt_len - 1) // self.config.kv_block_size]

    def _adopt(self, shared: list[list[int]], cached: int) -> SequenceKv:
        """A new sequence's KV holding the cached blocks it keeps."""
        kv = SequenceKv(self.pool, self.config.num_layers)
        for layer, blocks in enumerate(shared):
            if blocks:
                kv.adopt(layer, compute_kept_blocks(self.config, layer, cached).start, blocks)
        return kv

    def _settle_onboarding(self) -> None:
        """Take in every onboarding whose blocks are read: its sequence prefills on from
        what came back. One that came back short takes its prefix again from the cache."""
        config, pending = self.config, []
        for request_id, sequence, onboarding in self._onboarding:
            if not onboarding.done():
                pending.append((request_id, sequence, onboarding))
                continue
            loaded = onboarding.finish()
            if self._sequences.get(request_id) is not sequence:  # released meanwhile
                continue
            self._onboarded_tokens += loaded * config.kv_block_size
            if loaded < len(onboarding.blocks):
                assert self.cache is not None
                sequence.kv.release()
                reusable = self._reusable(sequence.names, sequence.prompt_len)
                blocks = [entry.blocks for entry in self.cache.match(reusable)]
                sequence.computed = len(blocks) * config.kv_block_size
                sequence.stored = len(blocks)
                shared = self._reused_blocks(blocks, sequence.computed)
                sequence.kv = self._adopt(shared, sequence.computed)
            sequence.state = SequenceState.PREFILLING
        self._onboarding = pending

    def gather_kv(self, request_id: str) -> None:
        """Put a prefilled sequence's KV, every rank's heads, into the whole-layout region
        its ``PrefillResult.kv`` names (``tp.whole_kv``); nothing to do without ranks."""
        if self._ranks is None or self._whole_kv is None:
            return
        sequence = self._sequences.get(request_id)
        if sequence is None or sequence.state is not SequenceState.ACTIVE:
            raise EngineError(f"request {request_id!r} has no prefilled KV to gather")
        blocks = self._kept_blocks(sequence)
        shares = self._ranks.link.gather(blocks, self._whole_kv.share_bytes(len(blocks)))
        self._whole_kv.assemble(blocks, self.pool.blocks[blocks], shares)

    # -- decode side of a handoff -----------------------------------------------------

    def reserve(self, request_id: str, prompt: Seq[int], first_token: int) -> KvLayout:
        """In a tensor-parallel group the layout is in the whole-layout region, the same
        blocks as the pool's; ``commit`` splits them across the ranks."""
        self._check_new(request_id, prompt)
        self._check_token_ids([first_token])
        config, count = self.config, len(prompt)
        layers = range(config.num_layers)
        needed = sum(len(compute_kept_blocks(config, layer, count)) for layer in layers)
        if needed > self._available():
            raise KvCapacityError(
                f"reserving {count} tokens needs {needed} KV blocks, "
                f"{self._available()} of {self.pool.num_total} free"
            )
        kv = SequenceKv(self.pool, config.num_layers)
        for layer in layers:
            kv.cover(layer, compute_kept_range(config, layer, count))
        self._sequences[request_id] = Sequence(
            tokens=[*prompt, first_token],
            prompt_len=count,
            kv=kv,
            state=SequenceState.RESERVED,
            sampling=SamplingParams(max_tokens=1),
            computed=count,
        )
        return build_kv_layout(config, count, kv.tables(), self._handoff_region)

    def commit(self, request_id: str) -> None:
        sequence = self._sequences.get(request_id)
        if sequence is None or sequence.state is not SequenceState.RESERVED:
            raise EngineError(f"request {request_id!r} has no reserved KV to commit")
        if self._ranks is not None and self._whole_kv is not None:
            blocks = self._kept_blocks(sequence)
            own, shares = self._whole_kv.split(blocks)
            self.pool.blocks[blocks] = own
            self._ranks.link.scatter(blocks, shares)
        sequence.state = SequenceState.ACTIVE
        self._store_full_blocks(sequence)  # received blocks are as good as computed ones

    # -- the batch step ---------------------------------------------------------------

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        """Advance each named sequence by one token and every queued prefill by its next
        chunk. If the pool cannot hold the decode rows' new blocks, raises
        KvCapacityError before computing anything (the caller should release or abort
        a sequence and step again)."""
        batch = [(rid, self._active(rid), params) for rid, params in sampling.items()]
        for _, _, params in batch:
            check_sampling(params)
        missing = 0
        for _, sequence, _ in batch:
            position = sequence.computed
            for layer in range(self.config.num_layers):
                # Window layers first let go of what the new query no longer sees.
                sequence.kv.drop_before(
                    layer, compute_kept_range(self.config, layer, position + 1).start
                )
                missing += sequence.kv.count_missing_blocks(layer, range(position, position + 1))
        if missing > self._available():
            raise KvCapacityError(
                f"decode step needs {missing} new KV blocks, {self._available()} free; "
                f"requests: {', '.join(sampling)}"
            )
        for _, sequence, params in batch:
            sequence.sampling = params
        self._settle_onboarding()
        return self._run([rid for rid, _, _ in batch], self._prefill_order())

    def _prefill_order(self) -> list[str]:
        """The queued prefills this step advances (not those still onboarding), in budget
        order: the highest priority's, by arrival (``tandem.engines.priority``)."""
        queued = [
            rid
            for rid in self._prefilling
            if self._sequences[rid].state is SequenceState.PREFILLING
        ]
        ranks = prefill_order([self._sequences[rid].sampling.priority for rid in queued])
        return [queued[i] for i in ranks]

    def _run(self, decodes: list[str], prefills: list[str]) -> list[StepOutput]:
        config = self.config
        pending = [self._sequences[rid] for rid in prefills]
        budget = config.max_batch_tokens
        if pending:
            rows = [self._sequences[rid] for rid in decodes]
            top = pending[0].sampling.priority
            ranks = [(s.sampling.priority, len(s.tokens) - s.prompt_len) for s in rows]
            if holds_prompts(ranks, top):
                prefills, pending = [], []
            budget = step_token_budget(budget, [s.sampling.priority for s in rows], top)
        chunks = plan_prefill_chunks(
            budget,
            len(decodes),
            [(s.computed, s.prompt_len) for s in pending],
            self._attention_tokens,
            idle_budget=config.prefill_chunk,
        )
        # (request, sequence, how many new tokens): decode rows first, then chunks.
        planned = [(rid, self._sequences[rid], 1) for rid in decodes]
        planned += [(rid, s, n) for rid, s, n in zip(prefills, pending, chunks, strict=True) if n]
        work = [(rid, s, range(s.computed, s.computed + n)) for rid, s, n in planned]
        if not work:
            if self._onboarding:  # see ONBOARDING_WAIT_S
                self._onboarding[0][2].wait(ONBOARDING_WAIT_S)
            return []
        segments = []
        for _, sequence, positions in work:
            for layer in range(config.num_layers):
                sequence.kv.cover(layer, positions)
            segments.append(
                Segment(
                    sequence.tokens[positions.start : positions.stop],
                    positions.start,
                    sequence.kv,
                    wants_logits=positions.stop >= sequence.prompt_len,
                )
            )
        started = time.perf_counter()
        if self._ranks is not None:
            self._ranks.send_step(segments)
        logits = iter(self.model.forward_batch(segments))
        prompt = sum(len(p) for _, s, p in work if s.state is SequenceState.PREFILLING)
        self._prefill_seconds += compute_prompt_share(
            time.perf_counter() - started, prompt, sum(len(p) for _, _, p in work)
        )
        outputs = []
        for (rid, sequence, positions), segment in zip(work, segments, strict=True):
            sequence.computed = positions.stop
            self._store_full_blocks(sequence)
            for layer in range(config.num_layers):
                sequence.kv.drop_before(
                    layer, compute_kept_range(config, layer, sequence.computed).start
                )
            if sequence.state is SequenceState.PREFILLING:
                self._computed_tokens += len(positions)
            if segment.wants_logits:
                outputs.append(self._sample(rid, sequence, next(logits)))
        return outputs

    def _sample(self, request_id: str, sequence: Sequence, logits: np.ndarray) -> StepOutput:
        params = sequence.sampling
        position = sequence.computed
        token = sample_token(logits, params, self._seed(request_id, params), position)
        sequence.tokens.append(token)
        sequence.finish = self._finish_reason(sequence, params)
        if sequence.state is not SequenceState.PREFILLING:
            return StepOutput(request_id=request_id, token=token, finish_reason=sequence.finish)
        sequence.state = SequenceState.ACTIVE
        del self._prefilling[request_id]
        layout = build_kv_layout(
            self.config, sequence.prompt_len, sequence.kv.tables(), self._handoff_region
        )
        result = PrefillResult(
            first_token=token,
            num_prompt_tokens=sequence.prompt_len,
            kv=layout,
            finish_reason=sequence.finish,
        )
        logger.debug("prefilled %s: %s tokens", request_id, sequence.prompt_len)
        return StepOutput(request_id, token, sequence.finish, prefill=result)

    # -- bookkeeping ------------------------------------------------------------------

    def release(self, request_id: str) -> None:
        sequence = self._sequences.pop(request_id, None)
        self._prefilling.pop(request_id, None)
        if sequence is not None:
            sequence.kv.release()

    def stats(self) -> EngineStats:
        """``active_sequences`` counts sequences still generating; finished or reserved
        ones show up only in the KV counts until released."""
        active = sum(
            1
            for s in self._sequences.values()
            if s.state is SequenceState.ACTIVE and s.finish is None
        )
        return EngineStats(
            active_sequences=active,
            kv_blocks_total=self.pool.num_total,
            kv_blocks_free=self.pool.num_free,
            kv_block_size=self.config.kv_block_size,
            prompt_tokens_cached=self._cached_tokens,
            prompt_tokens_onboarded=self._onboarded_tokens,
            prompt_tokens_computed=self._computed_tokens,
            prefill_seconds=self._prefill_seconds,
            kv_blocks_cached=0 if self.cache is None else len(self.cache),
            offload=None if self.offload is None else self.offload.stats(),
        )

    def drain_kv_events(self) -> list[KvCacheEvent]:
        """The prefix cache's events (the device tier), then the offload tiers' (each
        list names one tier, so their relative order does not matter)."""
        events = [] if self.cache is None else self.cache.drain_events()
        if self.offload is not None:
            events += self.offload.drain_events()
        return events

    def _kept_blocks(self, sequence: Sequence) -> np.ndarray:
        """The blocks a handoff of ``sequence``'s prompt moves (every layer's)."""
        tables = sequence.kv.tables()
        return np.asarray(
            list_kept_physical_blocks(self.config, sequence.prompt_len, tables), dtype=np.int32
        )

    def _available(self) -> int:
        """Free blocks not promised to queued prefills."""
        queued = (self._sequences[rid] for rid in self._prefilling)
        promised = sum(max(0, s.peak_blocks - s.kv.num_blocks) for s in queued)
        return self.pool.num_free - promised

    def _reused_blocks(self, reused: list[tuple[int, ...]], cached: int) -> list[list[int]]:
        """Per layer, the cached physical blocks (``reused``: each logical block's, one per
        layer) that a prompt whose first ``cached`` tokens are cached keeps: all of them
        for full layers, those of the last window for window layers."""
        out = []
        for layer in range(self.config.num_layers):
            kept = compute_kept_blocks(self.config, layer, cached)
            out.append([reused[j][layer] for j in kept])
        return out

    def _store_full_blocks(self, sequence: Sequence) -> None:
        """Offer the sequence's newly full blocks to the prefix cache (before a window
        layer lets go of them)."""
        if self.cache is None or not sequence.caching:
            return
        names = sequence.full_block_names(self.config.kv_block_size)
        if len(names) <= sequence.stored:
            return
        blocks = []
        for logical in range(sequence.stored, len(names)):
            physical = [
                sequence.kv.block(layer, logical) for layer in range(self.config.num_layers)
            ]
            if None in physical:  # a window layer never received it (a KV transfer)
                sequence.caching = False
                break
            blocks.append((names[logical], tuple(b for b in physical if b is not None)))
        parent = names[sequence.stored - 1].block_hash if sequence.stored else None
        if blocks and not self.cache.store(parent, blocks):
            sequence.caching = False
        sequence.stored = len(names)

    def _finish_reason(self, sequence: Sequence, params: SamplingParams) -> FinishReason | None:
        token = sequence.tokens[-1]
        if token == self.config.eos_token_id or token in params.stop_token_ids:
            return FinishReason.STOP
        generated = len(sequence.tokens) - sequence.prompt_len
        if generated >= params.max_tokens or len(sequence.tokens) >= self.config.max_context:
            return FinishReason.LENGTH
        return None

    def _active(self, request_id: str) -> Sequence:
        sequence = self._sequences.get(request_id)
        if sequence is None:
            raise EngineError(f"unknown request {request_id!r}")
        if sequence.state is SequenceState.RESERVED:
            raise EngineError(f"request {request_id!r} is reserved but not committed")
        if sequence.state in (SequenceState.ONBOARDING, SequenceState.PREFILLING):
            raise EngineError(f"request {request_id!r} is still prefilling")
        if sequence.finish is not None:
            raise EngineError(f"request {request_id!r} already finished ({sequence.finish})")
        return sequence

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
        self._check_token_ids(prompt)

    def _check_token_ids(self, token_ids: Seq[int]) -> None:
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise EngineError(f"token ids must be in [0, {self.config.vocab_size})")

    @staticmethod
    def _seed(request_id: str, params: SamplingParams) -> int:
        return params.seed if params.seed is not None else derive_seed(request_id)
