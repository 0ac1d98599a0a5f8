"""One pool's autoscaling knobs, flattened from the InferenceCluster spec.

The policy never reads the pydantic API models directly: the operator and the local
runtime call :func:`compute_scaling_config` once per spec generation and hand the
frozen result to :func:`tandem.autoscale.policy.decide` on every interval.

The dataclass defaults are the values the simulator recommends (docs/autoscaling.md);
:func:`compute_scaling_config` takes whatever the spec says instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.api.v1alpha1 import InferenceClusterSpec, PoolRole, ScalingBehavior

# How long a pod may wait for room (GPUs, nodes) before the scale-up is reported as
# Unschedulable and held. Long enough for a cluster autoscaler to add a node.
DEFAULT_UNSCHEDULABLE_AFTER_SECONDS = 120.0
# Clear a prefill backlog within two minutes, on top of the arrivals (about two GPU
# cold starts: sooner would only start workers that arrive after the backlog is gone).
DEFAULT_BACKLOG_DRAIN_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class ScalingConfig:
    """Everything :func:`~tandem.autoscale.policy.decide` needs to know about one pool.

    Times are seconds. Steps are replicas per decision (one decision per interval).
    Only the targets of the pool's role are used: queued tokens for prefill; active
    sequences and KV utilization for decode.
    """

    role: PoolRole
    min_replicas: int = 0
    max_replicas: int = 8
    interval_seconds: float = 5.0
    scale_up_stabilization_seconds: float = 0.0
    scale_down_stabilization_seconds: float = 30.0
    max_step_up: int = 4
    max_step_down: int = 4
    tolerance: float = 0.1
    target_queued_tokens_per_replica: int = 32768
    target_prefill_tokens_per_second_per_replica: float | None = None
    backlog_drain_seconds: float = DEFAULT_BACKLOG_DRAIN_SECONDS
    smoothing_seconds: float = 20.0
    jump: float = 0.5
    target_active_sequences_per_replica: int = 32
    target_kv_utilization: float = 0.8
    unschedulable_after_seconds: float = DEFAULT_UNSCHEDULABLE_AFTER_SECONDS
    # How long the pool must have been idle before its last worker goes (0: as soon as
    # the scale-down window allows). Hysteresis: scaling up from zero happens at the
    # first waiting request, but down to zero only after a window well above a cold
    # start, so that a lull shorter than it never makes the next request pay one
    # (seconds to minutes on a GPU: image, weights, warm-up), while an idle worker
    # costs at most this window of GPU time per lull.
    scale_to_zero_idle_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"need 0 <= min_replicas <= max_replicas, got {self.min_replicas}, "
                f"{self.max_replicas}"
            )
        if self.max_step_up < 1 or self.max_step_down < 1:
            raise ValueError("max_step_up and max_step_down must be at least 1")
        if self.interval_seconds <= 0:
            raise ValueError("interval_seconds must be positive")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must lie in [0, 1)")
        if (
            self.target_queued_tokens_per_replica < 1
            or self.target_active_sequences_per_replica < 1
        ):
            raise ValueError("per-replica targets must be at least 1")
        if not 0 < self.target_kv_utilization <= 1:
            raise ValueError("target_kv_utilization must lie in (0, 1]")
        if min(self.scale_up_stabilization_seconds, self.scale_down_stabilization_seconds) < 0:
            raise ValueError("stabilization windows must not be negative")
        rate = self.target_prefill_tokens_per_second_per_replica
        if rate is not None and rate <= 0:
            raise ValueError("target_prefill_tokens_per_second_per_replica must be positive")
        if min(self.backlog_drain_seconds, self.smoothing_seconds) <= 0 or self.jump <= 0:
            raise ValueError("backlog_drain_seconds, smoothing_seconds and jump must be positive")
        if self.unschedulable_after_seconds < 0 or self.scale_to_zero_idle_seconds < 0:
            raise ValueError(
                "unschedulable_after_seconds and scale_to_zero_idle_seconds must not be negative"
            )

    @property
    def longest_window_seconds(self) -> float:
        return max(self.scale_up_stabilization_seconds, self.scale_down_stabilization_seconds)


def compute_scaling_config(
    spec: InferenceClusterSpec,
    role: PoolRole,
    *,
    target_prefill_tokens_per_second_per_replica: float | None = None,
    unschedulable_after_seconds: float | None = None,
) -> ScalingConfig:
    """The scaling config of one pool of ``spec``: bounds from the pool, knobs from
    ``spec.autoscaling``. Whether autoscaling is enabled (and builtin) is the caller's
    question; this only translates.

    ``target_prefill_tokens_per_second_per_replica`` stands in when the spec leaves
    ``prefill.targetTokensPerSecondPerReplica`` unset (``tandem up`` can pass a measured
    rate); ``unschedulable_after_seconds`` overrides the spec's timeout (tests)."""
    pool = spec.prefill if role is PoolRole.PREFILL else spec.decode
    autoscaling = spec.autoscaling
    behavior: ScalingBehavior = (
        autoscaling.prefill if role is PoolRole.PREFILL else autoscaling.decode
    )
    spec_rate = autoscaling.prefill.target_tokens_per_second_per_replica
    rate = spec_rate if spec_rate is not None else target_prefill_tokens_per_second_per_replica
    unschedulable = (
        unschedulable_after_seconds
        if unschedulable_after_seconds is not None
        else autoscaling.unschedulable_timeout_seconds
    )
    return ScalingConfig(
        role=role,
        min_replicas=pool.min_replicas,
        max_replicas=pool.max_replicas,
        interval_seconds=float(autoscaling.interval_seconds),
        scale_up_stabilization_seconds=float(behavior.scale_up_stabilization_seconds),
        scale_down_stabilization_seconds=float(behavior.scale_down_stabilization_seconds),
        max_step_up=behavior.max_step_up,
        max_step_down=behavior.max_step_down,
        tolerance=behavior.tolerance,
        target_queued_tokens_per_replica=autoscaling.prefill.target_queued_tokens_per_replica,
        target_prefill_tokens_per_second_per_replica=rate,
        backlog_drain_seconds=float(autoscaling.prefill.backlog_drain_seconds),
        smoothing_seconds=float(behavior.smoothing_seconds),
        target_active_sequences_per_replica=(
            autoscaling.decode.target_active_sequences_per_replica
        ),
        target_kv_utilization=autoscaling.decode.target_kv_utilization,
        unschedulable_after_seconds=float(unschedulable),
        # Only decode: an empty prefill pool costs no cold start (the decode workers
        # prefill locally meanwhile), so it keeps following the scale-down window.
        scale_to_zero_idle_seconds=(
            float(autoscaling.decode.scale_to_zero_idle_seconds) if role is PoolRole.DECODE else 0.0
        ),
    )
