"""The profiling Job of an engine without a step-time database (pure): it runs in a
decode worker's pod, its digest covers what the table depends on, and what it left in its
termination message becomes a table, or a clear failure."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import parse_object
from tandem.capacity.models import TANDEM_REFERENCE
from tandem.perf.profile import Measurements, compute_profile_grid, render_profile_table
from tandem.perf.table import MeasuredWorker
from tandem_operator import names
from tandem_operator.render.children import PoolHandle, render_pool_children
from tandem_operator.render.profiling import (
    TERMINATION_MESSAGE_LIMIT,
    Profiled,
    ProfileFailed,
    Profiling,
    TableMessageError,
    compute_profile_digest,
    needs_profile,
    observe_profile_job,
    parse_table_message,
    read_recorded_profile,
    render_perf_table,
    render_profile_job,
)

from .test_render import SETTINGS, load

Manifest = dict[str, Any]
TABLE = (Path(__file__).parents[2] / "data" / "perf-table-smollm2-cpu.json").read_text()
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PLANNING = {
    "planning": {"mode": "auto"},
    "slo": {"ttftP90Seconds": 10, "itlP90Seconds": 0.5},
    "workload": {"isl": 256, "osl": 32, "requestsPerSecond": {"max": 0.2}},
}
NODE_CLASS = {
    "nodeSelector": {"node.kubernetes.io/instance-type": "c7i.2xlarge"},
    "tolerations": [{"key": "inference", "operator": "Exists", "effect": "NoSchedule"}],
}


def _cluster(**overrides: Any) -> InferenceCluster:
    return load("reference-cpu.yaml", **{**PLANNING, **overrides})


def _decode_pod(cr: InferenceCluster) -> Manifest:
    handle = PoolHandle(names.pool_name(cr.metadata.name, PoolRole.DECODE), "uid", 1)
    children = render_pool_children(cr, PoolRole.DECODE, handle, SETTINGS)
    template: Manifest = children[0]["spec"]["template"]
    return template


def test_the_job_measures_in_a_pod_like_the_decode_workers() -> None:
    cr = _cluster(decode={"podTemplate": {"spec": NODE_CLASS}})
    job = render_profile_job(cr, SETTINGS)
    kubernetes_validate.validate(job, "1.36", strict=True)
    assert job["metadata"]["name"] == "reference-profile"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "ic-uid"
    assert job["metadata"]["labels"][names.LABEL_CLUSTER] == "reference"
    # Not a decode worker: the pool's status never counts it.
    assert job["spec"]["template"]["metadata"]["labels"][names.LABEL_ROLE] == names.PROFILE
    assert job["spec"]["backoffLimit"] <= 2
    assert 0 < job["spec"]["activeDeadlineSeconds"] <= 3600
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    pod, decode = job["spec"]["template"]["spec"], _decode_pod(cr)["spec"]
    (container,), (worker,) = pod["containers"], decode["containers"]
    for key in ("image", "resources", "env", "securityContext"):
        assert container[key] == worker[key], key
    for key in ("nodeSelector", "tolerations", "securityContext"):
        assert pod[key] == decode[key], key
    assert pod["nodeSelector"] == NODE_CLASS["nodeSelector"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    # The table goes to the default termination message path, failures' logs too.
    assert container["command"][-2:] == ["-o", "/dev/termination-log"]
    assert "terminationMessagePath" not in container
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # No credentials, no worker config: only the cluster file and scratch space.
    assert {v["name"] for v in pod["volumes"]} == {"cluster", "tmp"}


def test_the_job_profiles_the_cluster_as_written() -> None:
    cr = _cluster()
    template = render_profile_job(cr, SETTINGS)["spec"]["template"]
    document = json.loads(template["metadata"]["annotations"][names.ANNOTATION_PROFILED_CLUSTER])
    parsed = parse_object(document)  # what `tandem profile -f` validates
    assert isinstance(parsed, InferenceCluster) and parsed.spec == cr.spec
    (item,) = next(v for v in template["spec"]["volumes"] if v["name"] == "cluster")["downwardAPI"][
        "items"
    ]
    assert item["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{names.ANNOTATION_PROFILED_CLUSTER}']"
    )
    command = template["spec"]["containers"][0]["command"]
    assert command[command.index("-f") + 1] == f"{names.CONFIG_MOUNT_PATH}/{item['path']}"


@pytest.mark.parametrize(
    ("overrides", "changes"),
    [
        ({"engine": {"kind": "reference", "image": "registry.local/tandem:next"}}, True),
        ({"engine": {"kind": "reference", "options": {"num_kv_blocks": 2048}}}, True),
        ({"decode": {"engineOptions": {"max_batch_tokens": 128}}}, True),
        ({"decode": {"resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}}, True),
        ({"decode": {"podTemplate": {"spec": NODE_CLASS}}}, True),
        ({"model": {"source": "/models/other.gguf"}}, True),
        ({"decode": {"replicas": 2}}, False),
        ({"prefill": {"resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}}, False),
        ({"slo": {"ttftP90Seconds": 5, "itlP90Seconds": 0.2}}, False),
        ({"workload": {"isl": 1024, "osl": 32, "requestsPerSecond": {"max": 1}}}, False),
    ],
)
def test_the_digest_changes_with_what_the_table_depends_on(
    overrides: dict[str, Any], changes: bool
) -> None:
    before = compute_profile_digest(_cluster(), SETTINGS)
    after = compute_profile_digest(_cluster(**overrides), SETTINGS)
    assert (before != after) is changes


def test_profiling_is_for_planning_the_reference_engine_on_cpu() -> None:
    assert needs_profile(_cluster().spec)
    assert not needs_profile(load("reference-cpu.yaml").spec)  # planning off
    assert not needs_profile(load("simulated-gpt-oss-120b-gb200.yaml", **PLANNING).spec)


# ---------------------------------------------------------------- the termination message


def test_a_measured_table_is_read_back_as_it_was_written() -> None:
    assert json.loads(parse_table_message(TABLE)) == json.loads(TABLE)


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        (TABLE[: len(TABLE) // 2], "invalid JSON"),
        ("x" * TERMINATION_MESSAGE_LIMIT, "cut at the kubelet's limit"),
        ("Traceback (most recent call last):", "invalid JSON"),
        ("", "invalid JSON"),
        ('{"format": "tandem.perf-table/v0"}', "format must be"),
        (json.dumps({k: v for k, v in json.loads(TABLE).items() if k != "worker"}), "no worker"),
    ],
    ids=["truncated", "cut-at-the-limit", "garbage", "empty", "wrong-format", "no-worker"],
)
def test_a_message_that_is_no_usable_table_says_why(message: str, complaint: str) -> None:
    with pytest.raises(TableMessageError, match=complaint):
        parse_table_message(message)


def test_the_largest_table_profile_writes_fits_a_termination_message() -> None:
    # The largest grid: every prompt up to the default longest, every batch up to 16.
    grid = compute_profile_grid(131_072, lambda batch, tokens: True)
    assert len(grid.batches) == 5
    slow = [123.456789] * grid.repeats  # medians keep four significant digits
    measured = Measurements(
        {n: slow for n in grid.prompts},
        {(b, c): slow for b in grid.batches for c in grid.prompts},
    )
    table = render_profile_table(
        grid, measured, model="HuggingFaceTB/SmolLM2-135M-Instruct", engine="reference",
        accelerator="cpu", source="tandem profile, 2026-12-06: " + "x" * 200,
        worker=MeasuredWorker(TANDEM_REFERENCE, 1 << 40, 16, 8192),
    )  # fmt: skip
    text = json.dumps(table, indent=2) + "\n"  # as `tandem profile -o` writes it
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT


# ---------------------------------------------------------------- the Job's outcome


def _job(*conditions: Manifest) -> Manifest:
    job = render_profile_job(_cluster(), SETTINGS)
    job["metadata"]["uid"] = "job-uid"
    job["status"] = {"conditions": list(conditions)}
    return job


def _pod(exit_code: int, message: str, owner: str = "job-uid") -> Manifest:
    terminated = {"exitCode": exit_code, "message": message}
    return {
        "metadata": {"name": "p", "ownerReferences": [{"uid": owner}]},
        "status": {"containerStatuses": [{"name": "worker", "state": {"terminated": terminated}}]},
    }


def _condition(kind: str, at: str = "2026-01-01T11:59:00Z", **more: str) -> Manifest:
    return {"type": kind, "status": "True", "lastTransitionTime": at, **more}


def test_a_running_job_is_profiling() -> None:
    outcome = observe_profile_job(_job(), [], NOW)
    assert isinstance(outcome, Profiling) and outcome.requeue_s is None
    assert "Job reference-profile" in outcome.message


def test_a_completed_job_yields_its_pods_table() -> None:
    pods = [_pod(0, "not mine", owner="other-uid"), _pod(0, TABLE)]
    assert observe_profile_job(_job(_condition("Complete")), pods, NOW) == Profiled(
        parse_table_message(TABLE)
    )


def test_a_completed_job_with_garbage_for_a_table_fails_saying_so() -> None:
    outcome = observe_profile_job(_job(_condition("Complete")), [_pod(0, TABLE[:900])], NOW)
    assert isinstance(outcome, ProfileFailed)
    assert "termination message is not a table" in outcome.message
    assert "\n" not in outcome.message


def test_a_completed_job_waits_for_its_pod_then_gives_up() -> None:
    waiting = observe_profile_job(_job(_condition("Complete")), [], NOW)
    assert isinstance(waiting, Profiling) and waiting.requeue_s is not None
    gone = observe_profile_job(_job(_condition("Complete", "2026-01-01T11:00:00Z")), [], NOW)
    assert isinstance(gone, ProfileFailed) and "is gone" in gone.message


def test_a_failed_job_says_why_in_one_line() -> None:
    failed = _condition(
        "Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff"
    )
    logs = "tandem profile: prefill 128 tokens\nerror: the KV pool holds no prompt at all\n\n"
    outcome = observe_profile_job(_job(failed), [_pod(2, logs)], NOW)
    assert outcome == ProfileFailed(
        "Job reference-profile failed (BackoffLimitExceeded: Job has reached the specified "
        "backoff); its last log line: error: the KV pool holds no prompt at all"
    )
    deadline = _condition("Failed", reason="DeadlineExceeded")
    assert observe_profile_job(_job(deadline), [], NOW) == ProfileFailed(
        "Job reference-profile failed (DeadlineExceeded)"
    )


# ---------------------------------------------------------------- the ConfigMap


def test_the_recorded_outcome_holds_for_its_digest_only() -> None:
    cr = _cluster()
    digest = compute_profile_digest(cr, SETTINGS)
    table = render_perf_table(cr, SETTINGS, Profiled(parse_table_message(TABLE)))
    kubernetes_validate.validate(table, "1.36", strict=True)
    assert table["metadata"]["name"] == "reference-perf-table"
    assert table["metadata"]["annotations"][names.ANNOTATION_PROFILE_DIGEST] == digest
    assert read_recorded_profile(table, digest) == Profiled(parse_table_message(TABLE))
    assert read_recorded_profile(table, "another") is None
    assert read_recorded_profile(None, digest) is None
    failure = render_perf_table(cr, SETTINGS, ProfileFailed("Job reference-profile failed"))
    assert failure["data"] == {}
    assert read_recorded_profile(failure, digest) == ProfileFailed("Job reference-profile failed")
    table["data"][names.PERF_TABLE_KEY] = "edited by hand"
    edited = read_recorded_profile(table, digest)
    assert isinstance(edited, ProfileFailed) and "table.json: not a table" in edited.message
