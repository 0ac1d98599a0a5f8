"""From metric samples to a :class:`~tandem.autoscale.policy.PoolObservation`.

Actuators scrape the router's series once per interval (Prometheus in Kubernetes, the
router's registry in-process for ``tandem up``), sum them over frontends, and hand two
consecutive samples to :func:`compute_observation`. Gauges are taken as they are;
counters become rates over the time between the samples. A counter that went
backwards (a frontend restarted) gives no rate for that interval rather than a wrong
one; the policy then sizes the pool from the gauges alone.

Where each field comes from (``pool`` label = the pool being scaled; see
docs/autoscaling.md for the series still proposed):

============================  ====================================================
field                         series
============================  ====================================================
queued_requests               tandem_router_queue_depth_requests{pool}
queued_tokens                 tandem_router_queue_depth_tokens{pool}
diverted_prefill_tokens       tandem_router_diverted_prefill_tokens
active_sequences              tandem_router_active_sequences{pool}
kv_utilization                tandem_router_kv_utilization_ratio{pool}
prompt_tokens_total           prompt tokens of requests long enough for the prefill
                              pool, counted at admission (counter; proposed)
diverted_prompts_total        tandem_router_diverted_prompts_total (counter; read
                              between rounds too, see ``early.py``)
requests_total                requests admitted (counter; proposed)
decode_seconds_sum / _count   first token to last, per finished sequence
                              (histogram sum and count; proposed)
============================  ====================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.autoscale.observation import PoolObservation


@dataclass(frozen=True, slots=True)
class PoolCounts:
    """The pool's workers as the actuator sees them (Deployment/pods, or processes)."""

    current: int  # the target size now (WorkerPool spec.replicas)
    ready: int
    starting: int = 0  # created, not ready; includes unschedulable
    unschedulable: int = 0  # pending: no node with room


@dataclass(frozen=True, slots=True)
class LoadSample:
    """The router's series for one pool at one moment, summed over frontends."""

    at: float
    queued_requests: int = 0
    queued_tokens: int = 0
    diverted_prefill_tokens: int = 0
    active_sequences: int = 0
    kv_utilization: float = 0.0
    prompt_tokens_total: float | None = None
    diverted_prompts_total: float | None = None
    requests_total: float | None = None
    decode_seconds_sum: float | None = None
    decode_seconds_count: float | None = None


def compute_counter_delta(latest: float | None, previous: float | None) -> float | None:
    """How much a counter grew; None if unknown or reset in between."""
    if latest is None or previous is None or latest < previous:
        return None
    return latest - previous


def compute_rate(latest: LoadSample, previous: LoadSample | None, name: str) -> float | None:
    """Per-second growth of counter ``name`` between the samples."""
    if previous is None or latest.at <= previous.at:
        return None
    delta = compute_counter_delta(getattr(latest, name), getattr(previous, name))
    return None if delta is None else delta / (latest.at - previous.at)


def compute_observation(
    counts: PoolCounts,
    latest: LoadSample,
    previous: LoadSample | None,
    *,
    decode_baseline: LoadSample | None = None,
) -> PoolObservation:
    """The observation :func:`~tandem.autoscale.policy.decide` takes, from two samples
    (``previous`` is the one the last interval used; None on the first interval).

    ``decode_baseline`` is an older sample (minutes back, say 10) for the mean decode
    time: over a single interval that mean is biased - when load rises the first
    sequences to finish are the short ones. Defaults to ``previous``."""
    base = decode_baseline if decode_baseline is not None else previous
    finished = compute_counter_delta(
        latest.decode_seconds_count, base.decode_seconds_count if base else None
    )
    decode_time = compute_counter_delta(
        latest.decode_seconds_sum, base.decode_seconds_sum if base else None
    )
    mean_decode = decode_time / finished if finished and decode_time is not None else None
    return PoolObservation(
        current_replicas=counts.current,
        ready_replicas=counts.ready,
        starting_replicas=counts.starting,
        unschedulable_replicas=counts.unschedulable,
        queued_requests=latest.queued_requests,
        queued_tokens=latest.queued_tokens,
        diverted_prefill_tokens=latest.diverted_prefill_tokens,
        active_sequences=latest.active_sequences,
        kv_utilization=latest.kv_utilization,
        prompt_tokens_per_second=compute_rate(latest, previous, "prompt_tokens_total"),
        requests_per_second=compute_rate(latest, previous, "requests_total"),
        mean_decode_seconds=mean_decode,
    )
