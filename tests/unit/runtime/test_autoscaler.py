"""``tandem up``'s autoscaler, one round at a time, against the router's real exposition.

The supervisor is replaced by a recorder (processes are tests/integration's job); the
frontend's /metrics text comes from a real ``RouterMetrics`` registry."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.autoscale import WorkerLoad
from tandem.router.messages import WorkerView
from tandem.router.metrics import RouterMetrics
from tandem.router.workers import PoolLoad
from tandem.runtime.autoscaler import (
    LocalAutoscaler,
    autoscales_locally,
    choose_local_victims,
    compute_pool_counts,
)
from tandem.runtime.drainer import drain_worker
from tandem.runtime.plan import ProcessSpec
from tandem.runtime.scaling_record import read_record
from tandem.runtime.state import ClusterState, Phase, ProcessState
from tandem.runtime.status import compute_status, render_status

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "reference-cpu-autoscaling.yaml"
BASE = "http://127.0.0.1:9"


def spec(**autoscaling: object) -> InferenceCluster:
    """The example with ``intervalSeconds: 1`` and ``autoscaling`` merged in (camelCase)."""
    wire = load_inference_cluster(EXAMPLE).to_wire()
    merged = wire["spec"]["autoscaling"] | {"intervalSeconds": 1}
    for key, value in autoscaling.items():
        old = merged.get(key)
        merged[key] = old | value if isinstance(old, dict) and isinstance(value, dict) else value
    wire["spec"]["autoscaling"] = merged
    return InferenceCluster.model_validate(wire)


def worker(role: str, index: int) -> ProcessSpec:
    return ProcessSpec(
        f"{role}-{index}",
        role,
        (),
        40000 + index + (100 if role == "decode" else 0),
        Path("/dev/null"),
    )


class Frontend:
    """What the fetch function serves: the router's exposition and /readyz."""

    def __init__(self) -> None:
        self.loads: dict[str, PoolLoad] = {}
        self.views: list[WorkerView] = []
        self.down = False
        self.diverted_prompts = 0  # long prompts the router sent to decode workers
        self.polls = 0  # reads of one series between rounds (?name[]=)

    def divert(self, prompts: int) -> None:
        self.diverted_prompts += prompts

    def __call__(self, url: str, timeout_s: float) -> bytes:
        if self.down:
            raise OSError("connection refused")
        path, _, query = url.partition("?")
        if path.endswith("/metrics"):
            registry = CollectorRegistry()
            metrics = RouterMetrics(registry)
            metrics.watch(lambda: self.loads, lambda: 0)
            metrics.diverted_prompts.inc(self.diverted_prompts)
            metrics.prefill_prompt_tokens.inc(32768 * self.diverted_prompts)
            names = urllib.parse.parse_qs(query).get("name[]")
            self.polls += names is not None
            return generate_latest(registry.restricted_registry(names) if names else registry)
        assert url.endswith("/readyz")
        return json.dumps({"ready": True, "workers": [asdict(v) for v in self.views]}).encode()

    def serve(self, specs: Sequence[ProcessSpec], in_flight: dict[str, int] | None = None) -> None:
        counts = in_flight or {}
        self.views = [
            WorkerView(s.address, s.component, True, False, s.name, counts.get(s.name, 0), "")
            for s in specs
        ]


class Pools:
    """Records what the autoscaler asks of the supervisor."""

    def __init__(self, prefill: int, decode: int) -> None:
        self.members = {
            PoolRole.PREFILL: [worker("prefill", i) for i in range(prefill)],
            PoolRole.DECODE: [worker("decode", i) for i in range(decode)],
        }
        self.calls: list[tuple[str, object]] = []
        self.stopped = threading.Event()

    def workers(self, role: PoolRole) -> list[ProcessSpec]:
        return list(self.members[role])

    def scale(self, role: PoolRole, replicas: int) -> None:
        self.calls.append(("scale", (role, replicas)))
        have = self.members[role]
        have.extend(worker(role.value, i) for i in range(len(have), replicas))

    def retire(self, names: Sequence[str]) -> list[ProcessSpec]:
        self.calls.append(("retire", list(names)))
        out = []
        for role, specs in self.members.items():
            out += [s for s in specs if s.name in names]
            self.members[role] = [s for s in specs if s.name not in names]
        return out

    def stop_retired(self, names: Sequence[str]) -> None:
        self.calls.append(("stop_retired", list(names)))
        self.stopped.set()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    tmp_path: Path, pools: Pools, frontend: Frontend, clock: Clock, **kw: object
) -> LocalAutoscaler:
    return LocalAutoscaler(
        spec(**kw), pools, frontend_url=BASE, state_dir=tmp_path, fetch=frontend,
        clock=clock, wall_clock=lambda: 1_700_000_000.0, drain_grace_s=5.0,
    )  # fmt: skip


def test_builtin_mode_only() -> None:
    assert autoscales_locally(spec())
    assert not autoscales_locally(spec(mode="external"))
    assert not autoscales_locally(spec(enabled=False))


def test_counts_and_victims_come_from_the_routers_view() -> None:
    specs = [worker("decode", i) for i in range(3)]
    loads = {
        specs[0].address: WorkerLoad(specs[0].address, active_sequences=3),
        specs[1].address: WorkerLoad(specs[1].address, active_sequences=1),
        # decode-2 is not known to the router yet: starting, nothing to finish
    }
    counts = compute_pool_counts(specs, loads)
    assert (counts.current, counts.ready, counts.starting) == (3, 2, 1)
    assert choose_local_victims(specs, loads, 1) == ["decode-2"]
    assert choose_local_victims(specs, loads, 2) == ["decode-2", "decode-1"]


def test_a_queue_grows_the_prefill_pool_in_one_round(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(1, 1), Frontend(), Clock()
    frontend.serve(pools.workers(PoolRole.PREFILL) + pools.workers(PoolRole.DECODE))
    scaler = make(tmp_path, pools, frontend, clock)
    frontend.loads = {
        "prefill": PoolLoad(workers=1, healthy=1, queued_requests=6, queued_tokens=6 * 8192)
    }
    scaler.tick()
    assert pools.calls == [("scale", (PoolRole.PREFILL, 3))]  # +2: maxStepUp
    record = read_record(tmp_path)
    assert record is not None and record.ticks == 1
    (event,) = record.events
    assert (event.tick, event.pool, event.from_replicas, event.to_replicas) == (1, "prefill", 1, 3)
    assert record.pools["prefill"].last_scale_reason == "QueuedTokensAboveTarget"
    assert record.recent[-1].pools["prefill"].queued_tokens == 6 * 8192
    scaler.tick()  # same interval: nothing more
    assert len(pools.calls) == 1 and read_record(tmp_path).ticks == 1  # type: ignore[union-attr]


def test_a_scale_down_retires_idle_workers_and_stops_them_once_drained(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(3, 1), Frontend(), Clock()
    prefill = pools.workers(PoolRole.PREFILL)
    frontend.serve(prefill + pools.workers(PoolRole.DECODE), {"prefill-0": 2, "prefill-2": 1})
    scaler = make(tmp_path, pools, frontend, clock, prefill={"scaleDownStabilizationSeconds": 0})
    frontend.loads = {
        "prefill": PoolLoad(workers=3, healthy=3, queued_requests=1, queued_tokens=100)
    }
    scaler.tick()
    assert pools.calls == [("retire", ["prefill-1"])]  # the idle one; one step (maxStepDown 1)
    # The router forgets prefill-1 once nothing is in flight there: the drain ends.
    frontend.serve([s for s in prefill if s.name != "prefill-1"], {"prefill-0": 2})
    deadline = time.monotonic() + 20
    while ("stop_retired", ["prefill-1"]) not in pools.calls:
        assert time.monotonic() < deadline, pools.calls
        scaler.tick()
        time.sleep(0.05)
    record = read_record(tmp_path)
    assert record is not None
    kinds = [(e.kind, e.worker) for e in record.events]
    assert ("retire", "prefill-1") in kinds and ("drained", "prefill-1") in kinds
    scaler.close()


def test_an_unreachable_frontend_means_no_action(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(1, 1), Frontend(), Clock()
    frontend.down = True
    scaler = make(tmp_path, pools, frontend, clock)
    scaler.tick()
    assert pools.calls == []
    record = read_record(tmp_path)
    assert record is not None and "connection refused" in record.error


def test_a_drain_waits_until_the_router_has_nothing_in_flight() -> None:
    frontend = Frontend()
    target = worker("decode", 5)  # nothing listens there: the Drain RPC is refused
    frontend.serve([target], {"decode-5": 1})
    ended = threading.Event()

    def stream_ends() -> None:
        frontend.serve([])  # the router forgets a removed worker once it is idle
        ended.set()

    timer = threading.Timer(0.3, stream_ends)
    timer.start()
    try:
        result = drain_worker(
            "decode-5", target.address, f"{BASE}/readyz", 60.0,
            closing=threading.Event(), fetch=frontend,
        )  # fmt: skip
    finally:
        timer.cancel()
    assert ended.is_set() and result.in_flight_left == 0


def test_a_drain_gives_up_after_the_grace() -> None:
    frontend = Frontend()
    target = worker("decode", 6)
    frontend.serve([target], {"decode-6": 2})  # never finishes
    result = drain_worker(
        "decode-6", target.address, f"{BASE}/readyz", 0.3, closing=threading.Event(),
        fetch=frontend,
    )  # fmt: skip
    assert result.in_flight_left == 2


def test_status_shows_desired_and_the_last_decision(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(1, 1), Frontend(), Clock()
    frontend.serve(pools.workers(PoolRole.PREFILL) + pools.workers(PoolRole.DECODE))
    frontend.loads = {
        "prefill": PoolLoad(workers=1, healthy=1, queued_requests=6, queued_tokens=6 * 8192)
    }
    make(tmp_path, pools, frontend, clock).tick()

    def proc(name: str, component: str, port: int) -> ProcessState:
        return ProcessState(name, component, port, 1, 1, "log")

    state = ClusterState(
        cluster="c", phase=Phase.RUNNING, endpoint=f"{BASE}/v1", supervisor_pid=1,
        supervisor_start_ticks=1, frontend=proc("frontend", "frontend", 9),
        workers=[proc("prefill-0", "prefill", 40000), proc("decode-0", "decode", 40100)],
    )  # fmt: skip
    status = compute_status(state, {"supervisor": True}, [], read_record(tmp_path))
    assert status["pools"]["prefill"]["autoscaling"]["desired"] == 3
    text = render_status(status)
    assert "desired 3" in text and "last scale: QueuedTokensAboveTarget" in text
    assert "autoscale every 1s, 1 rounds" in text


@pytest.mark.parametrize("missing", [True, False])
def test_status_without_a_record_has_no_autoscaling(tmp_path: Path, missing: bool) -> None:
    if not missing:
        (tmp_path / "autoscaling.json").write_text("{not json")
    assert read_record(tmp_path) is None


def test_a_diverted_prompt_brings_the_round_forward(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(0, 1), Frontend(), Clock()
    frontend.serve(pools.workers(PoolRole.DECODE))
    scaler = make(tmp_path, pools, frontend, clock, intervalSeconds=10)
    scaler.tick()  # t=100: the first round, nothing to do; the next is due at 110
    clock.now = 100.6
    scaler.tick()  # nothing diverted: no round
    clock.now = 101.0
    scaler.tick()  # read less than a second after the last read: not even polled
    assert pools.calls == [] and frontend.polls == 1
    frontend.divert(1)  # a 32k prompt prefilled on the decode worker: the pool is at zero
    clock.now = 101.7
    scaler.tick()
    assert pools.calls == [("scale", (PoolRole.PREFILL, 1))]
    record = read_record(tmp_path)
    assert record is not None and [t.early for t in record.recent] == [False, True]
    # With a worker in the pool, the next early round waits half an interval, so the
    # arrival rate it sizes from covers at least that long.
    frontend.serve(pools.workers(PoolRole.PREFILL) + pools.workers(PoolRole.DECODE))
    frontend.loads = {
        "prefill": PoolLoad(workers=1, healthy=1, queued_requests=4, queued_tokens=4 * 8192)
    }
    frontend.divert(3)  # the one worker is saturated
    for now in (103.0, 104.5, 106.0):
        clock.now = now
        scaler.tick()
    assert [t.early for t in read_record(tmp_path).recent] == [False, True]  # type: ignore[union-attr]
    clock.now = 106.8  # 5.1 s on
    scaler.tick()
    assert pools.calls[-1] == ("scale", (PoolRole.PREFILL, 3))  # 4 x 8192 queued: +2
    assert [t.early for t in read_record(tmp_path).recent] == [False, True, True]  # type: ignore[union-attr]
    # The cadence restarts from the early round: nothing before 116.8.
    clock.now = 116.7
    scaler.tick()
    assert read_record(tmp_path).ticks == 3  # type: ignore[union-attr]
    clock.now = 116.8
    scaler.tick()
    assert [t.early for t in read_record(tmp_path).recent] == [False, True, True, False]  # type: ignore[union-attr]


def test_no_early_round_at_the_pools_maximum(tmp_path: Path) -> None:
    pools, frontend, clock = Pools(3, 1), Frontend(), Clock()  # prefill maxReplicas: 3
    frontend.serve(pools.workers(PoolRole.PREFILL) + pools.workers(PoolRole.DECODE))
    scaler = make(tmp_path, pools, frontend, clock, intervalSeconds=10)
    scaler.tick()
    frontend.divert(5)  # saturated, but nothing could be added
    for now in (106.0, 108.0):
        clock.now = now
        scaler.tick()
    assert frontend.polls == 0 and read_record(tmp_path).ticks == 1  # type: ignore[union-attr]
