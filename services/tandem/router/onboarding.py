"""What a cached prompt token is worth to the router, by the tier that holds it.

A token the device pool holds is reused as is; one in an offload tier must first be
onboarded (copied back into the pool), which costs its KV bytes over the tier's
bandwidth, while computing it instead costs one token of prefill. So a token in a tier
saves ``1 - onboard_seconds / prefill_seconds`` of a token's prefill, never less than 0
(a tier slower than recomputing is worth nothing).

Each worker reports what it measured (Stats: seconds per prompt token computed, and per
token onboarded from each tier; the simulated engine reports its modelled GPU's), and the
router weighs that worker's tiers by them (:func:`measured_tier_weights`). A tier the
worker has not onboarded from yet, or a worker that has computed no prompt yet, gets the
default weight.

Default weights come from the reference engine on this project's CPU test machine
(2 cores, shared with a test run while measured, so they are a floor): ``OffloadStore``
(``tandem.kv.offload``) offloaded 64 SmolLM2-shaped blocks (30 layers, 3 KV heads, head
dim 64, 16 tokens: 737,280 bytes each) and onboarded them back with ``load``, timed over
the 64 loads, digest check included: host 0.72 GB/s (1.0 ms a block), disk through NIXL's
POSIX backend 0.49 GB/s (1.5 ms a block, the file in the page cache). Against the
reference engine's prefill of SmolLM2 (265 tokens/s at 512 tokens,
docs/benchmarks.md) onboarding is 40-60x cheaper than computing, so both tiers are worth
nearly a device token. An engine whose prefill is fast relative to its tiers (a GPU's
prefill against its disk) gets lower weights from its own measurements.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tandem.kv.events import Tier

# Measured as the module docstring says.
HOST_ONBOARD_BYTES_PER_SECOND = 0.72e9
DISK_ONBOARD_BYTES_PER_SECOND = 0.49e9
REFERENCE_KV_BYTES_PER_TOKEN = 46_080  # SmolLM2-135M: 30 layers x 2 x 3 heads x 64 x fp32
REFERENCE_PREFILL_TOKENS_PER_SECOND = 265.0


def onboarding_weight(
    kv_bytes_per_token: float, onboard_bytes_per_second: float, prefill_tokens_per_second: float
) -> float:
    """The fraction of a token's prefill that onboarding it from a tier saves."""
    return _saving(kv_bytes_per_token / onboard_bytes_per_second, 1.0 / prefill_tokens_per_second)


def _saving(onboard_s: float, prefill_s: float) -> float:
    return min(1.0, max(0.0, 1.0 - onboard_s / prefill_s))


def measured_tier_weights(
    prefill_seconds_per_token: float,
    onboard_seconds_per_token: Mapping[Tier, float],
    defaults: Mapping[Tier, float],
) -> Mapping[Tier, float]:
    """One worker's weights from its own measurements (seconds per token; 0 or absent:
    not measured yet): ``defaults`` for each tier it has no figure for."""
    if prefill_seconds_per_token <= 0 or not onboard_seconds_per_token:
        return defaults
    weights = dict(defaults)
    for tier, onboard_s in onboard_seconds_per_token.items():
        if tier is not Tier.DEVICE and onboard_s > 0:
            weights[tier] = _saving(onboard_s, prefill_seconds_per_token)
    return weights


def _reference_weight(onboard_bytes_per_second: float) -> float:
    return onboarding_weight(
        REFERENCE_KV_BYTES_PER_TOKEN, onboard_bytes_per_second, REFERENCE_PREFILL_TOKENS_PER_SECOND
    )


DEFAULT_TIER_WEIGHTS: Mapping[Tier, float] = MappingProxyType(
    {
        Tier.DEVICE: 1.0,
        Tier.HOST: _reference_weight(HOST_ONBOARD_BYTES_PER_SECOND),
        Tier.DISK: _reference_weight(DISK_ONBOARD_BYTES_PER_SECOND),
    }
)


def saved_tokens(held: Mapping[Tier, int], weights: Mapping[Tier, float]) -> int:
    """Prompt tokens a worker would not have to compute, each tier's tokens (``held``)
    weighted by what onboarding them costs; a tier without a weight saves nothing."""
    return round(sum(tokens * weights.get(tier, 0.0) for tier, tokens in held.items()))
