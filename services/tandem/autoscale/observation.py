"""What the policy is told about a pool at one moment: :class:`PoolObservation`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """One pool, as measured at one moment (build it with ``signals.compute_observation``).

    Sizes: ``current_replicas`` is the size the pool is asked to have now (WorkerPool
    ``spec.replicas``, or the local runtime's target). It includes ``starting_replicas``
    (created, not ready yet: cold start), which include ``unschedulable_replicas``
    (pending, no node with room).

    Load, pool-wide sums over the router's metrics:

    - ``queued_requests`` / ``queued_tokens``: requests sent to the pool whose first
      token is not back yet, and their prompt tokens (whole prompts: a 32k prompt
      counts 32k until it is prefilled).
    - ``diverted_prefill_tokens``: prompt tokens the router prefilled locally on decode
      workers although they were long enough for the prefill pool (it was empty,
      unhealthy or saturated): demand the prefill pool should absorb. Prefill only.
    - ``active_sequences`` and ``kv_utilization`` (mean over ready workers, 0..1):
      decode only.

    Arrival rates, optional (None = unknown; the policy then sizes from queues alone):

    - ``prompt_tokens_per_second``: prompt tokens of requests eligible for the prefill
      pool, admitted per second over the last interval. Prefill only.
    - ``requests_per_second`` and ``mean_decode_seconds`` (first token to last, over a
      window of minutes): their product is the number of sequences the current
      arrivals keep busy (Little's law). Decode only.
    """

    current_replicas: int
    ready_replicas: int
    starting_replicas: int = 0
    unschedulable_replicas: int = 0
    queued_requests: float = 0
    queued_tokens: int = 0
    diverted_prefill_tokens: int = 0
    active_sequences: float = 0
    kv_utilization: float = 0.0
    prompt_tokens_per_second: float | None = None
    requests_per_second: float | None = None
    mean_decode_seconds: float | None = None
