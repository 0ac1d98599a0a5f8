"""``tandem up`` under spec.planning, without processes: the pure roll decisions, the
plan at start, and the re-planner round by round against a frontend's real length
histograms, with the supervisor replaced by a recorder and the planner by a table of
answers (the planner itself is tests/unit/sim's)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tandem.api.v1alpha1 import (
    InferenceCluster,
    InferenceClusterSpec,
    PlannedPool,
    PlanningMode,
    PlanOutcome,
    PlanStatus,
    PoolRole,
)
from tandem.frontend.metrics import FrontendMetrics
from tandem.runtime.plan import ProcessSpec
from tandem.runtime.planning_record import read_record
from tandem.runtime.replanner import LocalReplanner, describe_plan, plan_at_start
from tandem.runtime.reshape import PoolRoll, compute_rolls, compute_scrape_seconds
from tandem.runtime.state import ClusterState, Phase
from tandem.runtime.status import compute_status, render_status
from tandem.runtime.supervisor import StartupError
from tandem.sim.plan_process import PlanningFailed
from tandem.sim.planned_spec import apply_cluster_plan

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"
BASE = "http://127.0.0.1:9"


def cluster(mode: str = "auto", **replan: object) -> InferenceCluster:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["slo"] = {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.008}
    doc["spec"]["workload"] = {"isl": 200, "osl": 32, "requestsPerSecond": {"min": 0.5, "max": 2}}
    doc["spec"]["planning"] = {
        "mode": mode,
        "replan": {"windowSeconds": 30, "minIntervalSeconds": 60, **replan},
    }
    return InferenceCluster.model_validate(doc)


def plan(
    prefill: int, decode: int, *, mode: str = "auto", tokens: int | None = None, met: bool = True
) -> PlanStatus:
    return PlanStatus(
        spec_hash="h",
        mode=PlanningMode(mode),
        outcome=PlanOutcome.MET if met else PlanOutcome.MISSED,
        shape=f"{prefill}P+{decode}D",
        prefill=PlannedPool(workers=prefill, tensor_parallel_size=1) if prefill else None,
        decode=PlannedPool(workers=decode, tensor_parallel_size=1, max_num_tokens=tokens),
        message=f"{prefill}P+{decode}D",
    )


# ---------------------------------------------------------------------------- rolls (pure)


def test_a_pool_whose_workers_run_the_same_command_is_resized_not_replaced() -> None:
    written = cluster()
    agg, disagg = apply_cluster_plan(written, plan(0, 1)), apply_cluster_plan(written, plan(1, 2))
    rolls = compute_rolls(agg, disagg, {PoolRole.PREFILL: 0, PoolRole.DECODE: 1})
    assert rolls == [
        PoolRoll(PoolRole.PREFILL, 0, 1, replace=False),
        PoolRoll(PoolRole.DECODE, 1, 2, replace=False),
    ]
    assert [(r.start, r.retire) for r in rolls] == [(1, 0), (1, 0)]
    back = compute_rolls(disagg, agg, {PoolRole.PREFILL: 1, PoolRole.DECODE: 2})
    assert [(r.role, r.start, r.retire) for r in back] == [
        (PoolRole.PREFILL, 0, 1),
        (PoolRole.DECODE, 0, 1),
    ]


def test_a_new_step_budget_replaces_every_worker_of_its_pool() -> None:
    written = cluster()
    before = apply_cluster_plan(written, plan(1, 2))
    after = apply_cluster_plan(written, plan(1, 2, tokens=4096))
    (roll,) = compute_rolls(before, after, {PoolRole.PREFILL: 1, PoolRole.DECODE: 2})
    assert roll == PoolRoll(PoolRole.DECODE, 2, 2, replace=True)
    assert (roll.start, roll.retire) == (2, 2)
    # The same plan again changes nothing.
    assert compute_rolls(after, after, {PoolRole.PREFILL: 1, PoolRole.DECODE: 2}) == []


def test_a_window_holds_ten_scrapes_and_scrapes_are_at_most_fifteen_seconds_apart() -> None:
    assert compute_scrape_seconds(30) == 3.0
    assert compute_scrape_seconds(300) == 15.0


# ---------------------------------------------------------------------------- plan at start


def test_auto_starts_the_planned_shape_and_check_the_written_one() -> None:
    lines: list[str] = []
    status, started = plan_at_start(cluster(), progress=lines.append, plan=lambda s: plan(0, 1))
    assert status.shape == "0P+1D"
    assert (started.spec.prefill.replicas, started.spec.decode.replicas) == (0, 1)
    assert any(line.startswith("plan (auto, met)") for line in lines)

    checked = cluster("check")
    missed = plan(1, 1, mode="check", met=False)
    status, started = plan_at_start(checked, progress=lines.append, plan=lambda s: missed)
    assert status.outcome is PlanOutcome.MISSED
    assert started is checked


def test_a_plan_that_does_not_come_back_starts_the_written_shape_and_says_why() -> None:
    def fails(spec: InferenceClusterSpec) -> PlanStatus:
        raise PlanningFailed("planning gave up after 120 s")

    written = cluster()
    status, started = plan_at_start(written, progress=lambda line: None, plan=fails)
    assert status.outcome is PlanOutcome.FAILED
    assert "gave up" in status.message
    assert started is written
    assert "failed" in describe_plan(status)


# ---------------------------------------------------------------------------- the re-planner


def worker(role: PoolRole, index: int) -> ProcessSpec:
    port = 41000 + index + (100 if role is PoolRole.DECODE else 0)
    return ProcessSpec(f"{role.value}-{index}", role.value, (), port, Path("/dev/null"))


class Pools:
    """Records what the re-planner asks of the supervisor."""

    def __init__(self, prefill: int, decode: int) -> None:
        self.members = {
            PoolRole.PREFILL: [worker(PoolRole.PREFILL, i) for i in range(prefill)],
            PoolRole.DECODE: [worker(PoolRole.DECODE, i) for i in range(decode)],
        }
        self.next = {role: len(m) for role, m in self.members.items()}
        self.calls: list[tuple[str, object]] = []
        self.running: InferenceCluster | None = None
        self.stopped: list[str] = []
        self.broken = False  # new workers exit while starting

    def workers(self, role: PoolRole) -> list[ProcessSpec]:
        return list(self.members[role])

    def add_workers(self, role: PoolRole, count: int) -> list[ProcessSpec]:
        if self.broken:
            self.calls.append(("add failed", (role, count)))
            raise StartupError(f"{role.value}-{self.next[role]} exited with status 1")
        added = [worker(role, self.next[role] + i) for i in range(count)]
        self.next[role] += count
        self.members[role].extend(added)
        self.calls.append(("add", (role, count)))
        return added

    def retire(self, names: Sequence[str]) -> list[ProcessSpec]:
        self.calls.append(("retire", sorted(names)))
        out = []
        for role, members in self.members.items():
            out += [w for w in members if w.name in names]
            self.members[role] = [w for w in members if w.name not in names]
        return out

    def stop_retired(self, names: Sequence[str]) -> None:
        self.calls.append(("stop", sorted(names)))
        self.stopped.extend(names)

    def reshape(self, cluster: InferenceCluster) -> None:
        self.running = cluster


class Frontend:
    """The frontend's /metrics (real length histograms) and /readyz (the workers it
    routes to)."""

    def __init__(self, pools: Pools) -> None:
        self.metrics = FrontendMetrics(CollectorRegistry())
        self.pools = pools
        self.routed = True  # whether the router already uses newly started workers
        self.known: set[str] = {w.address for m in pools.members.values() for w in m}

    def serve(self, prompts: int, count: int) -> None:
        for _ in range(count):
            self.metrics.prompt_length.observe(prompts)
            self.metrics.answer_length.observe(32)

    def __call__(self, url: str, timeout_s: float) -> bytes:
        if "/metrics" in url:
            return generate_latest(self.metrics.registry)
        assert url.endswith("/readyz")
        members = {w.address for m in self.pools.members.values() for w in m}
        if self.routed:
            self.known |= members
        # The router keeps a removed worker until nothing is in flight there: none here.
        self.known &= members
        views = [{"address": a, "healthy": True, "in_flight": 0} for a in sorted(self.known)]
        return json.dumps({"ready": True, "workers": views}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def replanner(
    tmp_path: Path, written: InferenceCluster, started: PlanStatus, answers: list[PlanStatus]
) -> tuple[LocalReplanner, Pools, Frontend, Clock, list[InferenceClusterSpec]]:
    running = apply_cluster_plan(written, started)
    pools = Pools(running.spec.prefill.replicas, running.spec.decode.replicas)
    frontend, clock = Frontend(pools), Clock()
    asked: list[InferenceClusterSpec] = []

    def planner(spec: InferenceClusterSpec) -> PlanStatus:
        asked.append(spec)
        return answers.pop(0)

    replanner = LocalReplanner(
        written,
        started,
        pools,
        frontend_url=BASE,
        state_dir=tmp_path,
        plan_function=planner,
        fetch=frontend,
        clock=clock,
        drain_grace_s=1.0,
    )
    return replanner, pools, frontend, clock, asked


def run_for(
    r: LocalReplanner, clock: Clock, frontend: Frontend, seconds: float, prompts: int
) -> None:
    """``seconds`` of rounds every 3 s (the scrape period at a 30 s window), with four
    requests of ``prompts`` tokens served between rounds (40 a window: enough to judge)."""
    end = clock.now + seconds
    while clock.now < end:
        frontend.serve(prompts, 4)
        clock.now += 3
        r.tick()


def settle(r: LocalReplanner, until: Any) -> None:
    """Rounds without time passing until ``until()``: the plan's thread and the drains
    finish on their own threads."""
    for _ in range(500):
        r.tick()
        if until():
            return
        time.sleep(0.01)
    raise AssertionError("the re-planner did not settle")


def test_a_drift_held_for_a_window_re_plans_once_and_rolls_the_pools(tmp_path: Path) -> None:
    r, pools, frontend, clock, asked = replanner(tmp_path, cluster(), plan(0, 1), [plan(1, 1)])
    try:
        run_for(r, clock, frontend, 60, prompts=200)
        assert asked == [] and pools.calls == []
        run_for(r, clock, frontend, 20, prompts=16000)  # outside, not yet for a window
        assert asked == []
        run_for(r, clock, frontend, 40, prompts=16000)
        settle(r, lambda: r.record.rollouts == 1)
    finally:
        r.close()
    (spec,) = asked
    assert spec.workload is not None and spec.workload.isl > 10_000  # the observed median
    assert pools.calls == [("add", (PoolRole.PREFILL, 1))]  # nothing to retire
    assert pools.running is not None and pools.running.spec.prefill.replicas == 1
    record = read_record(tmp_path)
    assert record is not None
    assert record.workload is not None and record.workload.replans == 1
    assert record.shape == "1P+1D" and record.rolling == ""


def test_a_roll_retires_the_old_workers_only_once_the_router_uses_the_new(
    tmp_path: Path,
) -> None:
    new_budget = plan(0, 2, tokens=4096)
    r, pools, frontend, clock, _ = replanner(tmp_path, cluster(), plan(0, 2), [new_budget])
    frontend.routed = False
    try:
        run_for(r, clock, frontend, 60, prompts=200)
        run_for(r, clock, frontend, 60, prompts=16000)
        settle(r, lambda: ("add", (PoolRole.DECODE, 2)) in pools.calls)
        r.tick()
        assert not any(call[0] == "retire" for call in pools.calls)
        frontend.routed = True
        settle(r, lambda: r.record.rollouts == 1)
    finally:
        r.close()
    assert pools.calls[:2] == [("add", (PoolRole.DECODE, 2)), ("retire", ["decode-0", "decode-1"])]
    # Each drain ends on its own thread: stopped together or one by one.
    assert sorted(pools.stopped) == ["decode-0", "decode-1"]
    assert [w.name for w in pools.workers(PoolRole.DECODE)] == ["decode-2", "decode-3"]


def test_a_roll_whose_new_workers_do_not_start_keeps_every_old_one(tmp_path: Path) -> None:
    new_budget = plan(0, 2, tokens=4096)
    r, pools, frontend, clock, _ = replanner(tmp_path, cluster(), plan(0, 2), [new_budget])
    pools.broken = True
    try:
        run_for(r, clock, frontend, 60, prompts=200)
        run_for(r, clock, frontend, 60, prompts=16000)
        settle(r, lambda: ("add failed", (PoolRole.DECODE, 2)) in pools.calls)
        r.tick()
    finally:
        r.close()
    assert pools.calls == [("add failed", (PoolRole.DECODE, 2))]  # nothing retired
    assert r.record.rollouts == 0 and r.record.rolling == ""
    assert "exited with status 1" in r.record.error


def test_check_mode_reports_the_drift_and_never_re_plans(tmp_path: Path) -> None:
    checked = cluster("check")
    r, pools, frontend, clock, asked = replanner(tmp_path, checked, plan(1, 1, mode="check"), [])
    try:
        run_for(r, clock, frontend, 120, prompts=16000)
    finally:
        r.close()
    assert asked == [] and pools.calls == []
    record = read_record(tmp_path)
    assert record is not None and record.workload is not None
    assert record.workload.outside is not None and "median prompt" in record.workload.outside
    assert record.workload.replans == 0


def test_a_missed_re_plan_keeps_the_running_shape(tmp_path: Path) -> None:
    r, pools, frontend, clock, asked = replanner(
        tmp_path, cluster(), plan(0, 1), [plan(1, 1, met=False)]
    )
    try:
        run_for(r, clock, frontend, 60, prompts=16000)
        settle(r, lambda: r.record.plan is not None and r.record.plan.outcome is PlanOutcome.MISSED)
    finally:
        r.close()
    assert len(asked) == 1 and pools.calls == [] and pools.running is None
    assert r.record.shape == "0P+1D"


def test_status_shows_the_plan_its_prediction_and_planned_against_observed(
    tmp_path: Path,
) -> None:
    r, _, frontend, clock, _ = replanner(tmp_path, cluster("check"), plan(1, 1, mode="check"), [])
    try:
        run_for(r, clock, frontend, 9, prompts=16000)
    finally:
        r.close()
    state = ClusterState("c", Phase.RUNNING, f"{BASE}/v1", 1, 1, None, [])
    status = compute_status(state, {"supervisor": True}, [], None, read_record(tmp_path))
    text = render_status(status)
    assert "plan      check, met: 1P+1D" in text
    assert "workload  planned ISL 200 OSL 32 (spec); 0 re-plan(s), 0 rollout(s)" in text
    assert "observed ISL p50" in text


@pytest.mark.parametrize("mode", ["auto", "check"])
def test_the_record_is_written_at_once(tmp_path: Path, mode: str) -> None:
    r, *_ = replanner(tmp_path, cluster(mode), plan(0, 1, mode=mode), [])
    r.close()
    record = read_record(tmp_path)
    assert record is not None and record.plan is not None and record.plan.mode.value == mode
