"""ScalingConfig from the InferenceCluster spec, and what it refuses."""

from __future__ import annotations

import pytest

from tandem.api import v1alpha1 as api
from tandem.autoscale.config import ScalingConfig, compute_scaling_config


def _spec() -> api.InferenceClusterSpec:
    return api.InferenceClusterSpec.model_validate(
        {
            "model": {"name": "m"},
            "prefill": {"minReplicas": 0, "maxReplicas": 12},
            "decode": {"minReplicas": 2, "maxReplicas": 6, "replicas": 2},
            "autoscaling": {
                "enabled": True,
                "intervalSeconds": 10,
                "prefill": {
                    "targetQueuedTokensPerReplica": 65536,
                    "scaleDownStabilizationSeconds": 45,
                    "maxStepUp": 3,
                    "tolerance": 0.2,
                    "smoothingSeconds": 5,
                },
                "decode": {
                    "targetActiveSequencesPerReplica": 16,
                    "targetKvUtilization": 0.7,
                    "maxStepDown": 2,
                },
            },
        }
    )


def test_prefill_config_from_spec() -> None:
    config = compute_scaling_config(_spec(), api.PoolRole.PREFILL)
    assert (config.min_replicas, config.max_replicas) == (0, 12)
    assert config.interval_seconds == 10
    assert config.target_queued_tokens_per_replica == 65536
    assert config.scale_down_stabilization_seconds == 45
    assert (config.max_step_up, config.tolerance) == (3, 0.2)
    assert config.smoothing_seconds == 5


def test_decode_config_from_spec() -> None:
    config = compute_scaling_config(_spec(), api.PoolRole.DECODE)
    assert (config.min_replicas, config.max_replicas) == (2, 6)
    assert config.target_active_sequences_per_replica == 16
    assert config.target_kv_utilization == 0.7
    assert config.max_step_down == 2
    default = api.DecodeScalingSpec().scale_down_stabilization_seconds
    assert config.scale_down_stabilization_seconds == default == 30
    assert config.smoothing_seconds == api.DecodeScalingSpec().smoothing_seconds == 20


def test_spec_rate_target_and_timeouts_are_read() -> None:
    spec = _spec()
    prefill = spec.autoscaling.prefill.model_copy(
        update={"target_tokens_per_second_per_replica": 40000, "backlog_drain_seconds": 60}
    )
    autoscaling = spec.autoscaling.model_copy(
        update={"prefill": prefill, "unschedulable_timeout_seconds": 90}
    )
    spec = spec.model_copy(update={"autoscaling": autoscaling})
    config = compute_scaling_config(
        spec, api.PoolRole.PREFILL, target_prefill_tokens_per_second_per_replica=1
    )
    assert config.target_prefill_tokens_per_second_per_replica == 40000  # the spec wins
    assert config.backlog_drain_seconds == 60
    assert config.unschedulable_after_seconds == 90


def test_caller_supplies_a_measured_rate_when_the_spec_has_none() -> None:
    config = compute_scaling_config(
        _spec(),
        api.PoolRole.PREFILL,
        target_prefill_tokens_per_second_per_replica=30000,
        unschedulable_after_seconds=300,
    )
    assert config.target_prefill_tokens_per_second_per_replica == 30000
    assert config.unschedulable_after_seconds == 300


@pytest.mark.parametrize(
    "fields",
    [
        {"min_replicas": 3, "max_replicas": 2},
        {"max_step_up": 0},
        {"interval_seconds": 0},
        {"tolerance": 1.0},
        {"target_kv_utilization": 0.0},
        {"target_prefill_tokens_per_second_per_replica": 0},
        {"smoothing_seconds": 0},
        {"scale_down_stabilization_seconds": -1},
    ],
)
def test_invalid_configs_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ScalingConfig(role=api.PoolRole.PREFILL, **fields)  # type: ignore[arg-type]
