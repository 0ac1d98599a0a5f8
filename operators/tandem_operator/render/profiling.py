"""Profiling an engine that has no step-time database (pure): the Job that measures it,
what it measured, and the ConfigMap that keeps the result.

The reference engine on the cpu profile is planned from a table ``tandem profile``
measures where its workers run (``tandem.sim.spec_setup``). Under planning.mode check or
auto the operator runs ``tandem profile`` as Job ``C-profile`` in a decode worker's pod
(its image, node selector, tolerations, resources, env and pod template overlay), reads
the table from the finished pod's termination message, and keeps it in ConfigMap
``C-perf-table`` (key ``table.json``), annotated with a digest of what was profiled.
A failure is kept there too (annotation ``tandem.dev/profile-failure``), so a Job that
failed is not run again until what it profiles changes or the ConfigMap is deleted.

::

    digest unchanged, recorded   -> the table (or the failure) as recorded
    no Job                       -> render_profile_job: start one
    a Job of another digest      -> delete it (its template cannot change): start anew
    Job Complete                 -> its pod's termination message, validated: record it
    Job Failed                   -> why (its condition, the pod's last log line): record it
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tandem.api.v1alpha1 import (
    API_VERSION,
    AcceleratorProfile,
    EngineKind,
    InferenceCluster,
    InferenceClusterSpec,
    PlanningMode,
    PoolRole,
)
from tandem.engines.trtllm.config import pool_engine_options
from tandem.perf.table import PerfTableError, parse_perf_table
from tandem_operator import names
from tandem_operator.render.children import owner_reference
from tandem_operator.render.pods import (
    PROFILED_CLUSTER_FILE,
    RenderSettings,
    render_profile_pod_template,
)

Manifest = dict[str, Any]

# One retry: a node lost mid-run gets a second pod; a spec that cannot be profiled fails
# twice within seconds, and is then reported, not retried.
BACKOFF_LIMIT = 1
# SmolLM2's default grid takes about a minute on two cores; a worker's request is a
# fraction of a core, and the deadline also covers scheduling and the image pull.
ACTIVE_DEADLINE_SECONDS = 1800
# The outcome lives in the ConfigMap; the finished Job (and its pod's logs) stays an hour.
TTL_SECONDS_AFTER_FINISHED = 3600
# What the kubelet keeps of a termination message (bytes); the table must fit in it.
TERMINATION_MESSAGE_LIMIT = 4096
# A Job that completed while its pod's last update has not reached the cache yet: look
# again after this long; a pod still missing after COMPLETED_POD_GRACE_S is gone.
POD_CATCH_UP_S = 5.0
COMPLETED_POD_GRACE_S = 120.0
CONTAINER = "worker"
PROFILE_COMMAND = [
    "python",
    "-m",
    "tandem.cli.main",
    "profile",
    "-f",
    f"{names.CONFIG_MOUNT_PATH}/{PROFILED_CLUSTER_FILE}",
    "-o",
    "/dev/termination-log",
]


@dataclass(frozen=True, slots=True)
class Profiled:
    """The measured table (``tandem.perf-table/v1`` JSON text, validated)."""

    table: str


@dataclass(frozen=True, slots=True)
class ProfileFailed:
    """No table: why, in one line."""

    message: str


@dataclass(frozen=True, slots=True)
class Profiling:
    """The Job is running (or starting); ``requeue_s``: look again then, when nothing
    else will enqueue the cluster."""

    message: str
    requeue_s: float | None = None


ProfileOutcome = Profiled | ProfileFailed


class TableMessageError(ValueError):
    """A termination message that is not a usable table; the message says why."""


def needs_profile(spec: InferenceClusterSpec) -> bool:
    """Whether planning ``spec`` needs a measured table no database has (the reference
    engine on cpu: ``tandem.sim.spec_setup``)."""
    return (
        spec.planning.mode is not PlanningMode.OFF
        and spec.engine.kind is EngineKind.REFERENCE
        and spec.accelerator.profile is AcceleratorProfile.CPU
    )


def compute_profile_digest(cr: InferenceCluster, settings: RenderSettings) -> str:
    """A hash of what the table depends on: the engine and its decode options, the model
    and its source, the image, and the node class (the profiling pod's node selector,
    affinity, tolerations and resources, which are the decode workers'). A changed
    replica count, SLO or workload measures nothing again."""
    spec = cr.spec
    pod = _pod(cr, settings, "")["spec"]
    container = next(c for c in pod["containers"] if c["name"] == CONTAINER)
    inputs = {
        "engine": spec.engine.kind.value,
        "options": pool_engine_options(spec, PoolRole.DECODE),
        "model": spec.model.name,
        "source": spec.model.source,
        "image": container["image"],
        "node": {key: pod.get(key) for key in ("nodeSelector", "affinity", "tolerations")},
        "resources": container.get("resources"),
    }
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_profile_job(cr: InferenceCluster, settings: RenderSettings) -> Manifest:
    """Job ``C-profile``: ``tandem profile`` of the cluster as written, in a decode
    worker's pod, writing its table to the termination message."""
    cluster = cr.metadata.name
    document = {
        "apiVersion": API_VERSION,
        "kind": "InferenceCluster",
        "metadata": {"name": cluster, "namespace": cr.metadata.namespace or "default"},
        "spec": cr.spec.to_wire(),
    }
    template = _pod(cr, settings, json.dumps(document, sort_keys=True, separators=(",", ":")))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(cr, names.profile_job_name(cluster), settings),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": template,
        },
    }


def render_perf_table(
    cr: InferenceCluster, settings: RenderSettings, outcome: ProfileOutcome
) -> Manifest:
    """ConfigMap ``C-perf-table``: the table under ``table.json``, or why there is none."""
    meta = _meta(cr, names.perf_table_name(cr.metadata.name), settings)
    if isinstance(outcome, Profiled):
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {names.PERF_TABLE_KEY: outcome.table}}  # fmt: skip
    meta["annotations"][names.ANNOTATION_PROFILE_FAILURE] = outcome.message
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


def read_recorded_profile(config_map: Manifest | None, digest: str) -> ProfileOutcome | None:
    """What ConfigMap ``C-perf-table`` holds for ``digest``; None: nothing (yet)."""
    if config_map is None or profiled_digest(config_map) != digest:
        return None
    failure = config_map["metadata"].get("annotations", {}).get(names.ANNOTATION_PROFILE_FAILURE)
    if failure:
        return ProfileFailed(failure)
    text = (config_map.get("data") or {}).get(names.PERF_TABLE_KEY, "")
    try:
        return Profiled(parse_table_message(text))
    except TableMessageError as exc:  # edited by hand since
        name = config_map["metadata"]["name"]
        return ProfileFailed(f"ConfigMap {name} key {names.PERF_TABLE_KEY}: {exc}")


def profiled_digest(obj: Manifest) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(names.ANNOTATION_PROFILE_DIGEST)


def parse_table_message(message: str) -> str:
    """``message`` as a table the planner can use (the reference engine's needs its
    worker), or :class:`TableMessageError`."""
    size = len(message.encode())
    try:
        table = parse_perf_table(json.loads(message))
    except json.JSONDecodeError as exc:
        cut = " (cut at the kubelet's limit?)" if size >= TERMINATION_MESSAGE_LIMIT else ""
        raise TableMessageError(f"not a table: {size} bytes of invalid JSON{cut}: {exc}") from None
    except PerfTableError as exc:
        raise TableMessageError(f"not a table: {exc}") from None
    if table.worker is None:
        raise TableMessageError("not a table: it has no worker (tandem profile records one)")
    return message.strip() + "\n"


def observe_profile_job(
    job: Manifest, pods: list[Manifest], now: datetime
) -> ProfileOutcome | Profiling:
    """What the profiling Job came to, from it and the cluster's pods."""
    name = job["metadata"]["name"]
    done = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or ()
        if c.get("status") == "True"
    }
    uid = job["metadata"].get("uid")
    terminated = [
        state
        for pod in pods
        if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or ())
        for state in _terminated(pod)
    ]
    if "Complete" in done:
        messages = [t.get("message", "") for t in terminated if t.get("exitCode") == 0]
        if not messages:
            if _seconds_since(done["Complete"], now) < COMPLETED_POD_GRACE_S:
                return Profiling(f"Job {name} completed; reading its table", POD_CATCH_UP_S)
            return ProfileFailed(f"Job {name} completed, but its pod (and its table) is gone")
        try:
            return Profiled(parse_table_message(messages[-1]))
        except TableMessageError as exc:
            return ProfileFailed(f"Job {name} completed, but its termination message is {exc}")
    if "Failed" in done:
        condition = done["Failed"]
        why = f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".rstrip(": ")
        logs = [t.get("message", "") for t in terminated if t.get("exitCode") != 0]
        lines = [line.strip() for line in (logs[-1] if logs else "").splitlines() if line.strip()]
        said = f"; its last log line: {lines[-1][:300]}" if lines else ""
        return ProfileFailed(f"Job {name} failed ({why}){said}")
    return Profiling(
        f"profiling the reference engine on the decode pool's nodes (Job {name}); the "
        "shape is planned when it finishes"
    )


def _terminated(pod: Manifest) -> list[Manifest]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return [
        s["state"]["terminated"]
        for s in statuses
        if s.get("name") == CONTAINER and "terminated" in (s.get("state") or {})
    ]


def _seconds_since(condition: Manifest, now: datetime) -> float:
    stamp = condition.get("lastTransitionTime")
    if not stamp:
        return 0.0
    return (now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


def _labels(cluster: str) -> dict[str, str]:
    return {
        **names.cluster_labels(cluster),
        names.LABEL_COMPONENT: names.PROFILE,
        names.LABEL_ROLE: names.PROFILE,
    }


def _pod(cr: InferenceCluster, settings: RenderSettings, document: str) -> Manifest:
    return render_profile_pod_template(
        cr, settings, PROFILE_COMMAND, document, _labels(cr.metadata.name)
    )


def _meta(cr: InferenceCluster, name: str, settings: RenderSettings) -> Manifest:
    cluster = cr.metadata.name
    return {
        "name": name,
        "namespace": cr.metadata.namespace or "default",
        "labels": _labels(cluster),
        "annotations": {names.ANNOTATION_PROFILE_DIGEST: compute_profile_digest(cr, settings)},
        "ownerReferences": [
            owner_reference(API_VERSION, "InferenceCluster", cluster, cr.metadata.uid or "")
        ],
    }
