"""GPU status (pure): the capacity gate, NVLink-domain placement, RDMA shortages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tandem.api.v1alpha1 import InferenceCluster, InferenceClusterStatus, PoolRole
from tandem.api.validate import load_inference_cluster, parse_object
from tandem.capacity.plan import plan_cluster
from tandem_operator import reasons
from tandem_operator.render.placement import compute_nvlink_placement
from tandem_operator.status.capacity_gate import check_rollout
from tandem_operator.status.compute import compute_status
from tandem_operator.status.observe import (
    Failure,
    Observed,
    PodObservation,
    PoolObservation,
    WorkloadObservation,
    classify_unschedulable,
    observe_pod,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:01:00Z"
GPU_EXAMPLES = ["gpt-oss-120b-gb200.yaml", "gpt-oss-120b-b200.yaml", "gpt-oss-20b-h100.yaml"]


def load(example: str, **spec: Any) -> InferenceCluster:
    doc = load_inference_cluster(EXAMPLES / example).to_wire()
    doc["metadata"] |= {"uid": "u", "generation": 3}
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def too_small() -> InferenceCluster:
    """gpt-oss-120b at TP1 on an 80 GB H100, 64 sequences of 32k per decode worker."""
    return load(
        "gpt-oss-20b-h100.yaml",
        model={"name": "openai/gpt-oss-120b", "source": "pvc://models/gpt-oss-120b"},
        autoscaling={"decode": {"targetActiveSequencesPerReplica": 64}},
    )


# --------------------------------------------------------------------------- gate


@pytest.mark.parametrize("example", [*GPU_EXAMPLES, "reference-cpu.yaml"])
def test_the_examples_may_roll_out(example: str) -> None:
    assert check_rollout(load(example)) is None


def test_a_pool_that_does_not_fit_is_refused_with_the_numbers() -> None:
    cr = too_small()
    failure = check_rollout(cr)
    assert failure is not None
    assert failure.reason == reasons.INSUFFICIENT_GPU_MEMORY
    (decode,) = [p for p in plan_cluster(cr).pools if p.role is PoolRole.DECODE]
    assert not decode.fits
    # The message is the capacity model's own: GPU, TP, batch, KV needed vs. available.
    assert decode.report.message in failure.message
    assert "decode pool (batch 64" in failure.message
    assert "does not fit" in failure.message and "GiB" in failure.message
    assert "H100" in failure.message and "TP1" in failure.message
    # A new cluster: nothing ran before, and the message does not pretend otherwise.
    assert failure.message.endswith(
        "; nothing was applied (no earlier generation of this cluster runs)"
    )
    assert "prefill pool" not in failure.message  # the prefill pool fits


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"engine": {"options": {"no_such_option": 1}}}, "no_such_option"),
        ({"prefill": {"engineOptions": {"disable_overlap_scheduler": False}}}, "overlap"),
        ({"model": {"source": "s3://bucket/gpt-oss-20b"}}, "s3://"),
    ],
)
def test_a_spec_the_engine_cannot_run_is_invalid(spec: dict[str, Any], needle: str) -> None:
    failure = check_rollout(load("gpt-oss-20b-h100.yaml", **spec))
    assert failure is not None
    assert failure.reason == reasons.INVALID_SPEC
    assert needle in failure.message


def healthy(n: int = 1) -> WorkloadObservation:
    return WorkloadObservation(generation=1, observed_generation=1, replicas=n, ready=n, updated=n)


def observed(**kw: Any) -> Observed:
    pools = {
        role: PoolObservation(role=role, desired=1, pool_generation=1, workload=healthy())
        for role in PoolRole
    }
    return replace(Observed(generation=3, pools=pools, frontend=healthy()), **kw)


def conditions(status: InferenceClusterStatus) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in status.conditions}


def test_an_unfit_spec_degrades_and_keeps_the_last_applied_generation() -> None:
    cr = too_small()
    previous = compute_status(cr, observed(generation=2), NOW).cluster  # generation 2 served
    cr = cr.model_copy(update={"status": previous})
    failure = check_rollout(cr)
    assert isinstance(failure, Failure)
    result = compute_status(cr, observed(failure=failure), LATER)
    found = conditions(result.cluster)
    assert found[reasons.DEGRADED][:2] == ("True", reasons.INSUFFICIENT_GPU_MEMORY)
    assert found[reasons.READY][:2] == ("False", reasons.INSUFFICIENT_GPU_MEMORY)
    assert "does not fit" in found[reasons.DEGRADED][2]
    assert found[reasons.DEGRADED][2].endswith(
        "; nothing of this generation was applied; the last applied one (generation 2) "
        "keeps running"
    )
    # Generation 2's pods are settled and nothing of generation 3 was sent: not progressing.
    assert found[reasons.PROGRESSING][:2] == ("False", reasons.INSUFFICIENT_GPU_MEMORY)
    assert result.cluster.observed_generation == 2
    assert [e.reason for e in result.events if e.type == "Warning"] == [
        "NotReady",
        reasons.INSUFFICIENT_GPU_MEMORY,
    ]


def test_a_new_cluster_refused_for_gpu_memory_says_nothing_runs_or_progresses() -> None:
    cr = too_small()
    failure = check_rollout(cr)
    assert isinstance(failure, Failure)
    nothing = {
        role: PoolObservation(role=role, desired=1, pool_generation=1, workload=None)
        for role in PoolRole
    }
    result = compute_status(cr, observed(pools=nothing, frontend=None, failure=failure), NOW)
    found = conditions(result.cluster)
    assert found[reasons.PROGRESSING] == (
        "False",
        reasons.INSUFFICIENT_GPU_MEMORY,
        "nothing in flight: the latest spec was not applied (see Degraded)",
    )
    assert found[reasons.READY][:2] == ("False", reasons.INSUFFICIENT_GPU_MEMORY)
    assert "no earlier generation of this cluster runs" in found[reasons.READY][2]
    assert "keeps running" not in found[reasons.DEGRADED][2]
    assert result.cluster.observed_generation is None
    assert [(e.type, e.reason) for e in result.events] == [
        ("Warning", reasons.INSUFFICIENT_GPU_MEMORY)
    ]


# --------------------------------------------------------------------------- NVLink


NODES = {"t0": "uuid-a.0", "t1": "uuid-a.0", "t2": "uuid-b.0", "cpu": ""}


@pytest.mark.parametrize(
    ("pods", "split", "scheduled"),
    [
        ([], False, 0),
        (["t0", "t0", "t1"], False, 3),
        (["t0", "t2"], True, 2),
        (["t0", "cpu"], True, 2),  # a node outside any domain counts as another domain
        (["t0", "unknown-node"], True, 2),
    ],
)
def test_nvlink_placement_counts_domains(pods: list[str], split: bool, scheduled: int) -> None:
    placement = compute_nvlink_placement(pods, NODES)
    assert placement.split is split
    assert placement.scheduled == scheduled


def test_workers_in_one_domain_are_nvlink_local() -> None:
    cr = load("gpt-oss-120b-gb200.yaml")
    placement = compute_nvlink_placement(["t0", "t1", "t1"], NODES)
    result = compute_status(cr, observed(nvlink=placement), NOW)
    status, reason, message = conditions(result.cluster)[reasons.NVLINK_LOCAL]
    assert (status, reason) == ("True", reasons.SAME_NVLINK_DOMAIN)
    assert "all 3 scheduled workers" in message


def test_a_split_is_visible_but_does_not_block_ready() -> None:
    cr = load("gpt-oss-120b-gb200.yaml")
    split = compute_nvlink_placement(["t0", "t1", "t2"], NODES)
    first = compute_status(cr, observed(nvlink=split), NOW)
    found = conditions(first.cluster)
    status, reason, message = found[reasons.NVLINK_LOCAL]
    assert (status, reason) == ("False", reasons.SPLIT_ACROSS_NVLINK_DOMAINS)
    assert "2 in clique uuid-a.0" in message and "1 in clique uuid-b.0" in message
    assert found[reasons.READY][:2] == ("True", reasons.CLUSTER_READY)
    assert found[reasons.DEGRADED][0] == "False"
    assert reasons.SPLIT_ACROSS_NVLINK_DOMAINS in [e.reason for e in first.events]
    # The event fires on the transition only; the condition's time stays put.
    cr = cr.model_copy(update={"status": first.cluster})
    again = compute_status(cr, observed(nvlink=split), LATER)
    assert reasons.SPLIT_ACROSS_NVLINK_DOMAINS not in [e.reason for e in again.events]
    before = next(c for c in first.cluster.conditions if c.type == reasons.NVLINK_LOCAL)
    after = next(c for c in again.cluster.conditions if c.type == reasons.NVLINK_LOCAL)
    assert after.last_transition_time == before.last_transition_time == NOW


def test_nothing_scheduled_yet_is_unknown_and_other_profiles_have_no_condition() -> None:
    cr = load("gpt-oss-120b-gb200.yaml")
    result = compute_status(cr, observed(nvlink=compute_nvlink_placement([], NODES)), NOW)
    assert conditions(result.cluster)[reasons.NVLINK_LOCAL][:2] == (
        "Unknown",
        reasons.NO_WORKERS_SCHEDULED,
    )
    result = compute_status(load("gpt-oss-20b-h100.yaml"), observed(), NOW)
    assert reasons.NVLINK_LOCAL not in conditions(result.cluster)


def test_pods_report_their_node_until_they_terminate() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "t0"}, "status": {}}
    assert observe_pod(pod) == PodObservation(name="p", node_name="t0")
    pod["metadata"]["deletionTimestamp"] = NOW
    assert observe_pod(pod).node_name == ""


def test_missing_rdma_devices_are_named() -> None:
    message = "0/3 nodes are available: 3 Insufficient rdma/ib."
    assert classify_unschedulable(message) == reasons.INSUFFICIENT_RDMA
    both = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu, 3 Insufficient rdma/ib."
    assert classify_unschedulable(both) == reasons.INSUFFICIENT_GPU


def test_a_missing_model_volume_is_named_once_with_the_fix() -> None:
    # kube-scheduler 1.36's own words for a pod whose PVC does not exist.
    scheduler = '0/15 nodes are available: persistentvolumeclaim "models" not found. not found'
    pod = {
        "metadata": {"name": "p", "namespace": "inference"},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": scheduler,
                }
            ]
        },
    }
    problem = observe_pod(pod).problem
    assert problem is not None
    assert problem.reason == reasons.VOLUME_MISSING
    assert problem.message == (
        "persistentvolumeclaim 'models' does not exist in namespace inference: create it "
        "and put the model there (spec.model.source pvc://models/...; e.g. "
        "manifests/storage/models-pvc.yaml, docs/gpu-deployment.md §2)"
    )
