"""The reference engine as a planner sees it (pure): its model in the capacity model's
terms (``ModelArchitecture``) and the KV pool and step budget its options set.

A planner cannot read these off a spec: the shape of a GGUF model is in the file, and
the pool is preallocated from options whose defaults only the engine's config knows.
``tandem profile`` records them beside the step times it measures
(``tandem.perf.table``'s ``worker``).
"""

from __future__ import annotations

from tandem.capacity.models import KvDtype, ModelArchitecture
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import compute_kept_blocks, compute_prefill_peak_blocks
from tandem.engines.reference.linear import Linear
from tandem.engines.reference.weights import ModelWeights
from tandem.perf.table import MeasuredWorker


def describe_architecture(config: ReferenceModelConfig, weights: ModelWeights) -> ModelArchitecture:
    """The model as loaded: even layers slide when there is a window (``is_sliding``),
    parameters are counted from the weights, which are held in float32."""
    params = count_parameters(weights)
    experts = config.num_experts
    active = config.experts_per_token if experts else 0
    # An expert is its gate/up and down projections, in every layer.
    expert_params = 3 * config.hidden * config.intermediate * config.num_layers
    return ModelArchitecture(
        name=config.model_name,
        num_layers=config.num_layers,
        hidden_size=config.hidden,
        num_attention_heads=config.num_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        sliding_window=config.sliding_window or None,
        sliding_layers=sum(config.is_sliding(layer) for layer in range(config.num_layers)),
        num_experts=experts,
        experts_per_token=active,
        total_params=params,
        active_params=params - (experts - active) * expert_params,
        weight_bytes=weights.nbytes,
        max_context=config.max_context,
        vocab_size=config.vocab_size,
        native_kv_dtype=KvDtype.FP32,
    )


def describe_worker(config: ReferenceModelConfig, weights: ModelWeights) -> MeasuredWorker:
    """The pool is ``num_kv_blocks`` blocks of ``kv_block_size`` tokens of one layer. A
    planner counts blocks of ``kv_block_size`` tokens of every full layer in the same
    bytes, so a sequence takes as many of them as the engine gives it in each layer. A
    step with decode rows computes ``max_batch_tokens`` tokens at most."""
    return MeasuredWorker(
        describe_architecture(config, weights),
        kv_pool_bytes=config.num_kv_blocks * config.kv_block_bytes,
        tokens_per_block=config.kv_block_size,
        max_num_tokens=config.max_batch_tokens,
    )


def fits_pool(config: ReferenceModelConfig, batch: int, tokens: int) -> bool:
    """Whether ``batch`` sequences of ``tokens`` tokens, each decoding one more, fit the
    pool at once, and one such prompt prefills in it alone."""
    kept = sum(
        len(compute_kept_blocks(config, layer, tokens + 1)) for layer in range(config.num_layers)
    )
    peak = compute_prefill_peak_blocks(config, tokens)
    return max(batch * kept, peak) <= config.num_kv_blocks


def count_parameters(weights: ModelWeights) -> int:
    """Weights as the model defines them (``Linear`` pads its columns; those are not
    parameters)."""
    linears: list[Linear] = [weights.unembedding]
    vectors = weights.final_norm.size + (0 if weights.embedding is None else weights.embedding.size)
    for layer in weights.layers:
        linears += [layer.qkv, layer.out, *layer.gate_up, *layer.down]
        linears += [] if layer.router is None else [layer.router]
        vectors += layer.attn_norm.size + layer.mlp_norm.size
    return int(vectors + sum(x.in_features * x.out_features for x in linears))
