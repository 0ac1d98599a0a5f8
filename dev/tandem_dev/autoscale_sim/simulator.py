"""Replay a trace through a scaling controller and the pool model; compare with an oracle.

Two controllers drive the same :class:`~tandem_dev.autoscale_sim.pool_model.SimCluster` with
the same requests: the policy (``decide`` once per interval per pool, fed through
``signals.compute_observation`` exactly as an actuator would) and the oracle (knows the
load each stretch of the trace actually gets, runs exactly the needed size of each
pool - see ``oracle.py`` - and starts workers one cold start ahead). ``figures.py``
turns the two runs into the numbers docs/benchmarks.md reports.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.policy import PolicyState, ScaleDecision, decide, initial_state
from tandem.autoscale.signals import LoadSample, compute_observation
from tandem_dev.autoscale_sim.figures import (
    PoolFigures,
    Tick,
    TraceFigures,
    compute_percentile,
    compute_reactions,
    compute_steady_flaps,
    count_direction_changes,
)
from tandem_dev.autoscale_sim.oracle import PoolHardware, compute_needed_replicas
from tandem_dev.autoscale_sim.pool_model import SimCluster, SimRequest
from tandem_dev.autoscale_sim.traces import (
    Arrival,
    RealizedLoad,
    Trace,
    compute_realized_load,
    generate_arrivals,
)

# After the trace, in-flight requests get this long to finish (for the TTFT figures).
TAIL_SECONDS = 600.0
# Mean decode time over this window, like rate(sum[10m]) / rate(count[10m]).
DECODE_WINDOW_SECONDS = 600.0
# The simulator's operating point: a prefill worker is sized to run 80% busy.
TARGET_PREFILL_UTILIZATION = 0.8


def build_standard_configs(
    hardware: PoolHardware,
    *,
    with_rates: bool = True,
    prefill_max_replicas: int = 16,
    decode_max_replicas: int = 16,
) -> dict[PoolRole, ScalingConfig]:
    """The configs the standard traces run: ScalingConfig's defaults (the recommended
    values), prefill able to scale to zero, decode floored at one. ``with_rates``
    False is what the v1alpha1 API can express today (queues only)."""
    rate = hardware.prefill_tokens_per_second * TARGET_PREFILL_UTILIZATION
    return {
        PoolRole.PREFILL: ScalingConfig(
            role=PoolRole.PREFILL,
            min_replicas=0,
            max_replicas=prefill_max_replicas,
            target_prefill_tokens_per_second_per_replica=rate if with_rates else None,
        ),
        PoolRole.DECODE: ScalingConfig(
            role=PoolRole.DECODE, min_replicas=1, max_replicas=decode_max_replicas
        ),
    }


class Controller(Protocol):
    def desire(self, role: PoolRole, observation: PoolObservation, now: float) -> int: ...


@dataclass(slots=True)
class PolicyController:
    """The real policy, one state per pool, exactly as an actuator loop would hold it."""

    configs: Mapping[PoolRole, ScalingConfig]
    states: dict[PoolRole, PolicyState] = field(default_factory=dict)
    decisions: dict[PoolRole, list[ScaleDecision]] = field(default_factory=dict)

    def desire(self, role: PoolRole, observation: PoolObservation, now: float) -> int:
        state = self.states.get(role) or initial_state(now, observation.current_replicas)
        decision, self.states[role] = decide(self.configs[role], observation, state, now=now)
        self.decisions.setdefault(role, []).append(decision)
        return decision.desired


@dataclass(frozen=True, slots=True)
class OracleController:
    """Runs the needed size of the most demanding moment between now and one cold
    start (plus an interval) ahead, so workers are ready when the load arrives. It
    knows the load each stretch of the trace actually got, not just the expected one."""

    trace: Trace
    load: RealizedLoad
    configs: Mapping[PoolRole, ScalingConfig]
    hardware: PoolHardware

    def needed(self, role: PoolRole, t: float) -> int:
        return compute_needed_replicas(role, self.load.at(t), self.configs[role], self.hardware)

    def desire(self, role: PoolRole, observation: PoolObservation, now: float) -> int:
        horizon = now + self.hardware.cold_start_seconds + self.configs[role].interval_seconds
        moments = [now, *(p for p in self.trace.change_points() if now < p <= horizon)]
        return max(self.needed(role, t) for t in moments)


@dataclass(frozen=True, slots=True)
class RunLog:
    ticks: dict[PoolRole, list[Tick]]
    gpu_seconds: dict[PoolRole, float]
    requests: list[SimRequest]


def run_controller(
    oracle: OracleController,
    arrivals: Sequence[Arrival],
    controller: Controller,
    schedulable_limits: Mapping[PoolRole, int | None] | None = None,
) -> RunLog:
    """One run of ``controller``; the cluster starts at the size ``oracle`` needs for
    the first load, and each tick records what ``oracle`` needed then."""
    trace, configs, hardware = oracle.trace, oracle.configs, oracle.hardware
    interval = min(c.interval_seconds for c in configs.values())
    cluster = SimCluster(
        hardware,
        {role: oracle.needed(role, 0.0) for role in configs},
        dict(schedulable_limits or {}),
    )
    cluster.add_arrivals(arrivals)
    ticks: dict[PoolRole, list[Tick]] = {role: [] for role in configs}
    history: dict[PoolRole, deque[LoadSample]] = {role: deque() for role in configs}
    for k in range(1, int(trace.duration_seconds // interval) + 1):
        now = k * interval
        cluster.run_until(now)
        for role in configs:
            sample, past = cluster.sample(role), history[role]
            while past and now - past[0].at > DECODE_WINDOW_SECONDS:
                past.popleft()
            observation = compute_observation(
                cluster.counts(role),
                sample,
                past[-1] if past else None,
                decode_baseline=past[0] if past else None,
            )
            past.append(sample)
            desired = controller.desire(role, observation, now)
            cluster.scale(role, desired)
            ticks[role].append(
                # The need behind this decision: the load of the interval just ended.
                Tick(now, desired, oracle.needed(role, now - 1e-6), observation.ready_replicas)
            )
    gpu = {role: cluster.gpu_seconds(role, trace.duration_seconds) for role in configs}
    cluster.run_until(trace.duration_seconds + TAIL_SECONDS)
    return RunLog(ticks, gpu, list(cluster.finished))


def _ttfts(requests: Sequence[SimRequest]) -> list[float]:
    return [r.first_token_at - r.arrival.at for r in requests if r.first_token_at is not None]


def simulate(
    trace: Trace,
    configs: Mapping[PoolRole, ScalingConfig],
    hardware: PoolHardware,
    *,
    seed: int = 7,
) -> TraceFigures:
    """Run the policy and the oracle over the same arrivals and compare them."""
    arrivals = generate_arrivals(trace, seed)
    oracle = OracleController(trace, compute_realized_load(trace, arrivals), configs, hardware)
    policy = run_controller(oracle, arrivals, PolicyController(configs))
    perfect = run_controller(oracle, arrivals, oracle)
    pools = {}
    for role, config in configs.items():
        ticks = policy.ticks[role]
        settle = hardware.cold_start_seconds + config.scale_down_stabilization_seconds
        flaps, steady = compute_steady_flaps(ticks, trace, settle)
        pools[role] = PoolFigures(
            role=role,
            reactions=tuple(compute_reactions(ticks)),
            max_steady_flaps=flaps,
            steady_intervals=steady,
            direction_changes=count_direction_changes([t.desired for t in ticks]),
            gpu_seconds=policy.gpu_seconds[role],
            oracle_gpu_seconds=perfect.gpu_seconds[role],
            peak_desired=max(t.desired for t in ticks),
            peak_needed=max(t.needed for t in ticks),
        )
    ttft, oracle_ttft = _ttfts(policy.requests), _ttfts(perfect.requests)
    return TraceFigures(
        trace=trace,
        pools=pools,
        ttft_p50=compute_percentile(ttft, 0.5),
        ttft_p95=compute_percentile(ttft, 0.95),
        oracle_ttft_p50=compute_percentile(oracle_ttft, 0.5),
        oracle_ttft_p95=compute_percentile(oracle_ttft, 0.95),
        requests=len(arrivals),
        completed=len(ttft),
    )
