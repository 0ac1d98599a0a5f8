"""How many replicas a load *needs*: the yardstick the simulator measures the policy by.

"Needed" is defined in the policy's own terms, so that a policy tracking it perfectly
is possible: the fewest replicas at which the pool's *mean* load signal sits within the
policy's tolerance of its target (above that size the policy would not scale up on
average; below it, it would).

- Decode: Little's law is exact for the means. Active sequences = arrival rate x decode
  time; KV tokens in use = arrival rate x E[decode time x (prompt + output)].
- Prefill: the signal is pending prompt tokens (waiting + being prefilled, counted
  whole). By Little's law, weighted by tokens, that is
  ``rate x (E[P] x Wq + E[P^2] / prefill_rate)``; the queueing delay ``Wq`` of a pool
  of R workers comes from the Erlang C formula (M/M/R) scaled by (1 + cs^2) / 2 for
  general service times (the Allen-Cunneen approximation).

The oracle that knows the future runs exactly these sizes, started one cold start early.
``slo_oracle`` sizes pools by what users get instead (every request within its TTFT and
ITL targets on the simulated engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem_dev.autoscale_sim.traces import LoadLevel


@dataclass(frozen=True, slots=True)
class PoolHardware:
    """What one worker can do; defaults are an H200-class GPU on a ~100B MoE model."""

    prefill_tokens_per_second: float = 40_000.0
    # A decode worker prefilling a prompt itself (the router's fallback while the
    # prefill pool is empty) shares its GPU with decoding: slower than a prefill worker.
    local_prefill_tokens_per_second: float = 20_000.0
    decode_tokens_per_second_per_sequence: float = 50.0
    decode_max_sequences: int = 64
    decode_kv_capacity_tokens: int = 1_000_000
    cold_start_seconds: float = 60.0


def compute_erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/``servers`` queue (Erlang C)."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    blocking = 1.0  # Erlang B, built up one server at a time (no factorials)
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return servers * blocking / (servers - offered_load * (1 - blocking))


def compute_mean_pending_prefill_tokens(
    load: LoadLevel, replicas: int, hardware: PoolHardware
) -> float:
    """Mean pending prompt tokens in a prefill pool of ``replicas`` under ``load``;
    infinite when the pool cannot keep up."""
    if load.requests_per_second <= 0:
        return 0.0
    mean_service = load.mean_prompt_tokens / hardware.prefill_tokens_per_second
    offered = load.requests_per_second * mean_service
    if replicas <= 0 or offered >= replicas:
        return math.inf
    variability = load.mean_prompt_tokens_squared / load.mean_prompt_tokens**2 - 1.0
    wait_mmc = compute_erlang_c(replicas, offered) * mean_service / (replicas - offered)
    wait = wait_mmc * (1.0 + variability) / 2.0
    in_service = load.mean_prompt_tokens_squared / hardware.prefill_tokens_per_second
    return load.requests_per_second * (load.mean_prompt_tokens * wait + in_service)


def compute_needed_replicas(
    role: PoolRole, load: LoadLevel, config: ScalingConfig, hardware: PoolHardware
) -> int:
    """The fewest replicas whose mean load signal is within tolerance of the target,
    clamped to the pool's bounds."""
    slack = 1.0 + config.tolerance
    if load.requests_per_second <= 0:
        needed = 0
    elif role is PoolRole.DECODE:
        per_sequence = hardware.decode_tokens_per_second_per_sequence
        active = load.requests_per_second * load.mean_output_tokens / per_sequence
        kv_tokens = load.requests_per_second * load.mean_output_times_context / per_sequence
        by_sequences = active / (config.target_active_sequences_per_replica * slack)
        by_kv = kv_tokens / (
            hardware.decode_kv_capacity_tokens * config.target_kv_utilization * slack
        )
        needed = max(1, math.ceil(max(by_sequences, by_kv) - 1e-9))
    else:
        needed = 1
        while needed < config.max_replicas:
            pending = compute_mean_pending_prefill_tokens(load, needed, hardware)
            if _mean_prefill_signal(load, pending, config) <= needed * slack:
                break
            needed += 1
    return min(max(needed, config.min_replicas), config.max_replicas)


def _mean_prefill_signal(load: LoadLevel, pending: float, config: ScalingConfig) -> float:
    """The policy's prefill signal, in replicas, for mean ``pending`` tokens."""
    target_rate = config.target_prefill_tokens_per_second_per_replica
    if target_rate is None:
        return pending / config.target_queued_tokens_per_replica
    by_rate = (load.prompt_tokens_per_second + pending / config.backlog_drain_seconds) / target_rate
    return by_rate
