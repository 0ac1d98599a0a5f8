"""The per-cluster series the chart's alerts read from the operator
(charts/tandem/monitoring/rules.yaml): replicas per pool with the autoscaling ceiling,
and the SLO targets; set from the reconciled spec, removed when they no longer apply."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from tandem.api.v1alpha1 import (
    AutoscalingMode,
    AutoscalingSpec,
    InferenceCluster,
    InferenceClusterStatus,
    PoolRole,
    SloSpec,
    WorkerPoolStatus,
)
from tandem.api.validate import load_inference_cluster
from tandem_operator.controller import _forget_cluster_metrics, _record_cluster_metrics
from tandem_operator.status.compute import StatusResult

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"
KEY = ("metrics-ns", "metrics-c")
RESULT = StatusResult(
    InferenceClusterStatus(),
    {
        PoolRole.PREFILL: WorkerPoolStatus(desired_replicas=2, ready_replicas=1),
        PoolRole.DECODE: WorkerPoolStatus(desired_replicas=4, ready_replicas=4),
    },
    (),
)


def cluster(
    *, autoscaling: bool, slo: SloSpec | None, mode: AutoscalingMode = AutoscalingMode.BUILTIN
) -> InferenceCluster:
    cr = load_inference_cluster(EXAMPLE)
    autoscaling_spec = AutoscalingSpec(enabled=autoscaling, mode=mode)
    spec = cr.spec.model_copy(update={"autoscaling": autoscaling_spec, "slo": slo})
    return cr.model_copy(update={"spec": spec})


def replicas(pool: str, state: str) -> float | None:
    labels = {
        "inference_cluster_namespace": KEY[0],
        "inference_cluster": KEY[1],
        "pool": pool,
        "state": state,
    }
    return REGISTRY.get_sample_value("tandem_operator_pool_replicas", labels)


def target(objective: str) -> float | None:
    labels = {"inference_cluster_namespace": KEY[0], "inference_cluster": KEY[1]}
    return REGISTRY.get_sample_value(
        "tandem_operator_slo_target_seconds", {**labels, "objective": objective}
    )


def test_ceilings_and_targets_follow_the_spec_and_go_with_the_cluster() -> None:
    slo = SloSpec(ttft_p90_seconds=2, itl_p90_seconds=0.03)
    _record_cluster_metrics(KEY, cluster(autoscaling=True, slo=slo), RESULT)
    assert (replicas("prefill", "desired"), replicas("prefill", "ready")) == (2, 1)
    assert (replicas("prefill", "max"), replicas("decode", "max")) == (4, 4)
    assert (target("ttft_p90"), target("itl_p90")) == (2, 0.03)

    # HPA/KEDA keep their own ceilings; autoscaling off, none applies; no spec.slo: no targets.
    external = cluster(autoscaling=True, slo=slo, mode=AutoscalingMode.EXTERNAL)
    _record_cluster_metrics(KEY, external, RESULT)
    assert replicas("decode", "max") is None
    _record_cluster_metrics(KEY, cluster(autoscaling=False, slo=None), RESULT)
    assert replicas("decode", "desired") == 4
    assert replicas("decode", "max") is None
    assert target("ttft_p90") is None

    _forget_cluster_metrics(*KEY)
    assert replicas("decode", "desired") is None
