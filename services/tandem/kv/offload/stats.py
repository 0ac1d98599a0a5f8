"""What the offload tiers report (``tandem_worker_kv_offload_*``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.kv.events import Tier


@dataclass(frozen=True, slots=True)
class OffloadStats:
    """Per tier: blocks held now and the most it can hold (0 once disabled), and since
    start, blocks that entered it, came back from it to the device pool (onboarded),
    were found damaged when coming back (and recomputed instead), or were dropped from
    it for room. ``disabled``: tiers given up after an I/O failure. ``onboard_seconds``:
    the time the onboarded blocks took to come back, per tier (measured by the reference
    engine, modelled by the simulated one; what the router weighs a tier's tokens by)."""

    blocks: Mapping[Tier, int]
    capacity: Mapping[Tier, int]
    offloaded: Mapping[Tier, int]
    onboarded: Mapping[Tier, int]
    damaged: Mapping[Tier, int]
    dropped: Mapping[Tier, int]
    disabled: frozenset[Tier]
    onboard_seconds: Mapping[Tier, float] = field(default_factory=dict)
