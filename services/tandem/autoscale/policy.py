"""The autoscaling policy: one pool's load in, desired replicas and a reason out.

Pure: no I/O, no clock, no randomness. The caller (the operator's autoscaler loop, the
local runtime, the simulator) observes the pool once per interval, calls :func:`decide`
with the time of that observation and the state the previous call returned, acts on
``decision.desired`` and keeps the new state for next time::

    state = initial_state(now, current_replicas)
    every interval:
        decision, state = decide(config, observation, state, now=now)
        if decision.changed:
            scale_to(decision.desired)  # drain victims from drain.choose_victims

A decision, in order:

1. **Load -> replicas** with a tolerance band (``recommendation.py``).
2. **Bounds**: clamp to [min_replicas, max_replicas].
3. **Stabilization**, as the HPA does it: scale up only to the smallest recommendation
   of the scale-up window, down only to the largest of the scale-down window, so a
   spike or dip shorter than the window moves nothing.
4. **Steps**: at most ``max_step_up`` added / ``max_step_down`` removed per decision.
5. **Unschedulable**: once pods of the pool have been pending for room for longer
   than ``unschedulable_after_seconds``, hold the current size and report
   ``Unschedulable`` - the pending pods already ask the cluster (and its autoscaler)
   for capacity; more would only pile up. Growth resumes when they are scheduled.
   Scaling down is never held back by this.
6. **Idle window** (``scale_to_zero_idle_seconds``): a pool allowed to reach zero keeps
   its last worker until it has been idle that long without a break; from zero it grows
   at the first sign of demand (a request waiting for a worker). See ``ScalingConfig``
   for why the two directions differ.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.reasons import LimitedBy, LoadSignal, ScaleReason
from tandem.autoscale.recommendation import (
    SignalEstimate,
    compute_raw_replicas,
    compute_recommendation,
    compute_smoothed_signal,
)


@dataclass(frozen=True, slots=True)
class Recommendation:
    at: float
    replicas: int


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What :func:`decide` remembers between calls; treat it as opaque."""

    recommendations: tuple[Recommendation, ...] = ()
    unschedulable_since: float | None = None
    last_scale_time: float | None = None
    # Where a scale-up limited by max_step_up was heading.
    climbing_to: int | None = None
    # Last known mean decode time: nothing finishes in a lull, and the first interval
    # of the next burst must not wait for something to.
    mean_decode_seconds: float | None = None
    # Smoothed load signals (compute_smoothed_signal).
    prompt_tokens_per_second: SignalEstimate | None = None
    requests_per_second: SignalEstimate | None = None
    active_sequences: SignalEstimate | None = None
    queued_requests: SignalEstimate | None = None
    kv_utilization: SignalEstimate | None = None
    # Since when the load has been nil without a break (None: it is not).
    idle_since: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """``desired`` is what to scale to; ``recommended`` is what the load alone asked for
    (after tolerance and bounds); ``limited_by`` names the rule that kept ``desired``
    from following the load, if one did. ``reason`` is a CamelCase constant for status
    and Events; ``message`` says the same for people."""

    desired: int
    current: int
    recommended: int
    reason: ScaleReason
    limited_by: LimitedBy
    signal: LoadSignal
    message: str

    @property
    def changed(self) -> bool:
        return self.desired != self.current

    @property
    def direction(self) -> int:
        """+1 for a scale-up, -1 for a scale-down, 0 for none."""
        return (self.desired > self.current) - (self.desired < self.current)


def initial_state(now: float, current_replicas: int) -> PolicyState:
    """State for a loop that starts (or restarts, e.g. after a leader change) now.

    Seeding the history with the current size makes a fresh loop wait a full
    scale-down window before shrinking the pool, instead of acting on one sample."""
    return PolicyState(recommendations=(Recommendation(now, current_replicas),))


def decide(
    config: ScalingConfig, observation: PoolObservation, state: PolicyState, *, now: float
) -> tuple[ScaleDecision, PolicyState]:
    """One interval's decision for one pool, and the state to pass next time."""
    current = observation.current_replicas
    # Rounds come every interval, or sooner when long prompts are diverted (early.py).
    last = state.recommendations[-1].at if state.recommendations else None
    elapsed = now - last if last is not None and now > last else config.interval_seconds
    estimates = _estimate(config, observation, state, elapsed)
    effective = _apply(observation, estimates, state)
    raw, signal = compute_raw_replicas(config, effective)
    wanted = compute_recommendation(raw, current, config.tolerance)
    if state.climbing_to is not None and raw > current:
        # A scale-up cut short by maxStepUp keeps its destination while the load still
        # exceeds the current size: a noisy interval inside the band must not stop it
        # half way.
        wanted = max(wanted, state.climbing_to)
    limited_by = LimitedBy.NONE

    recommended = min(max(wanted, config.min_replicas), config.max_replicas)
    if recommended < wanted:
        limited_by = LimitedBy.MAX_REPLICAS
    elif recommended > wanted:
        limited_by = LimitedBy.MIN_REPLICAS

    history = _remember(state.recommendations, Recommendation(now, recommended), config, now)
    stabilized = _stabilize(history, recommended, current, config, now)
    if stabilized != recommended:
        limited_by = LimitedBy.STABILIZATION

    stepped = min(max(stabilized, current - config.max_step_down), current + config.max_step_up)
    if stepped != stabilized:
        limited_by = LimitedBy.MAX_STEP
    # Bounds beat steps: a spec edit that moves min/max applies at once.
    desired = min(max(stepped, config.min_replicas), config.max_replicas)
    if desired != stepped:
        limited_by = LimitedBy.MAX_REPLICAS if desired < stepped else LimitedBy.MIN_REPLICAS

    # Idle is a fact, not an estimate: nothing queued, active or arriving right now
    # (the smoothed signals only approach zero).
    _, signal_now = compute_raw_replicas(config, observation)
    idle_since = _idle_since(state.idle_since, signal_now, now)
    if keeps_last_worker(config, current, desired, idle_since, now=now):
        desired = 1
        limited_by = LimitedBy.IDLE_WINDOW

    unschedulable_since = _unschedulable_since(state.unschedulable_since, observation, now)
    stuck = (
        unschedulable_since is not None
        and now - unschedulable_since >= config.unschedulable_after_seconds
    )
    if stuck and desired >= current:
        # Hold (pending pods already ask the cluster for room) and say so, even when
        # the load asks for no more than is pending: the pool is short either way.
        desired = current
        limited_by = LimitedBy.UNSCHEDULABLE

    decision = ScaleDecision(
        desired=desired,
        current=current,
        recommended=recommended,
        reason=_reason(config, current, desired, wanted, signal, limited_by),
        limited_by=limited_by,
        signal=signal,
        message=_message(config, effective, raw, recommended, desired, limited_by)
        + _idle_note(config, limited_by, idle_since, now),
    )
    climbing = limited_by is LimitedBy.MAX_STEP and desired > current
    new_state = PolicyState(
        recommendations=history,
        unschedulable_since=unschedulable_since,
        last_scale_time=now if decision.changed else state.last_scale_time,
        climbing_to=recommended if climbing else None,
        mean_decode_seconds=effective.mean_decode_seconds,
        prompt_tokens_per_second=estimates.prompt_tokens_per_second,
        requests_per_second=estimates.requests_per_second,
        active_sequences=estimates.active_sequences,
        queued_requests=estimates.queued_requests,
        kv_utilization=estimates.kv_utilization,
        idle_since=idle_since,
    )
    return decision, new_state


def keeps_last_worker(
    config: ScalingConfig, current: int, desired: int, idle_since: float | None, *, now: float
) -> bool:
    """Whether a pool about to reach zero keeps one worker: it has not been idle for
    ``scale_to_zero_idle_seconds`` yet (see ``ScalingConfig`` for why)."""
    if desired > 0 or current <= 0 or config.max_replicas < 1:
        return False
    idle_for = now - idle_since if idle_since is not None else 0.0
    return idle_for < config.scale_to_zero_idle_seconds


def _idle_since(since: float | None, signal: LoadSignal, now: float) -> float | None:
    if signal is not LoadSignal.IDLE:
        return None  # any load restarts the idle window
    return now if since is None else since


def _idle_note(
    config: ScalingConfig, limited_by: LimitedBy, idle_since: float | None, now: float
) -> str:
    if limited_by is not LimitedBy.IDLE_WINDOW:
        return ""
    idle_for = now - idle_since if idle_since is not None else 0.0
    return (
        f" (idle {idle_for:.0f}s of the {config.scale_to_zero_idle_seconds:.0f}s before "
        "the last worker goes)"
    )


@dataclass(frozen=True, slots=True)
class _Estimates:
    prompt_tokens_per_second: SignalEstimate | None
    requests_per_second: SignalEstimate | None
    active_sequences: SignalEstimate | None
    queued_requests: SignalEstimate | None
    kv_utilization: SignalEstimate | None


def _estimate(
    config: ScalingConfig, o: PoolObservation, state: PolicyState, elapsed: float
) -> _Estimates:
    def smooth(
        latest: float | None, estimate: SignalEstimate | None, counts_per_unit: float | None
    ) -> SignalEstimate | None:
        return compute_smoothed_signal(
            latest, estimate, config, elapsed_seconds=elapsed, counts_per_unit=counts_per_unit
        )

    # Decode's signals count sequences and requests: a few of them on average jump by
    # 2x or more from sample to sample, and only a jump beyond that noise is a burst.
    # The decode queue is smoothed like the sequences it adds to; prefill's queue is
    # its backlog, taken as it is (the drain term).
    decode = config.role is PoolRole.DECODE
    return _Estimates(
        prompt_tokens_per_second=smooth(
            o.prompt_tokens_per_second, state.prompt_tokens_per_second, None
        ),
        requests_per_second=smooth(o.requests_per_second, state.requests_per_second, elapsed),
        active_sequences=smooth(float(o.active_sequences), state.active_sequences, 1.0),
        queued_requests=(
            smooth(float(o.queued_requests), state.queued_requests, 1.0) if decode else None
        ),
        kv_utilization=smooth(o.kv_utilization, state.kv_utilization, None),
    )


def _value(estimate: SignalEstimate | None) -> float | None:
    return None if estimate is None else estimate.value


def _apply(o: PoolObservation, estimates: _Estimates, state: PolicyState) -> PoolObservation:
    """The observation with smoothed signals and the remembered decode time."""
    mean_decode = o.mean_decode_seconds
    queued = _value(estimates.queued_requests)
    return replace(
        o,
        mean_decode_seconds=mean_decode if mean_decode is not None else state.mean_decode_seconds,
        prompt_tokens_per_second=_value(estimates.prompt_tokens_per_second),
        requests_per_second=_value(estimates.requests_per_second),
        active_sequences=_value(estimates.active_sequences) or 0.0,
        queued_requests=o.queued_requests if queued is None else queued,
        kv_utilization=_value(estimates.kv_utilization) or 0.0,
    )


def _remember(
    history: tuple[Recommendation, ...],
    latest: Recommendation,
    config: ScalingConfig,
    now: float,
) -> tuple[Recommendation, ...]:
    keep_for = config.longest_window_seconds + config.interval_seconds
    return (*(r for r in history if now - r.at <= keep_for), latest)


def _in_window(age: float, window: float, config: ScalingConfig) -> bool:
    """Whether a recommendation ``age`` seconds old speaks for the load of the last
    ``window`` seconds. Each one measured the interval before it (arrivals since the
    round before), so the window holds those measured inside it: a 30 s window at 5 s
    rounds is six of them, now and five back. Half an interval either side keeps the
    count from following a loop's jitter."""
    return window > 0 and age < window - config.interval_seconds / 2


def _stabilize(
    history: tuple[Recommendation, ...],
    recommended: int,
    current: int,
    config: ScalingConfig,
    now: float,
) -> int:
    up_to = recommended  # smallest recommendation in the scale-up window
    down_to = recommended  # largest recommendation in the scale-down window
    for past in history:
        age = now - past.at
        if _in_window(age, config.scale_up_stabilization_seconds, config):
            up_to = min(up_to, past.replicas)
        if _in_window(age, config.scale_down_stabilization_seconds, config):
            down_to = max(down_to, past.replicas)
    if up_to > current:
        return up_to
    if down_to < current:
        return down_to
    return current


def _unschedulable_since(
    since: float | None, observation: PoolObservation, now: float
) -> float | None:
    if observation.unschedulable_replicas <= 0:
        return None  # capacity appeared, or the pending pods were scaled away
    return now if since is None else since


_ABOVE = {
    LoadSignal.QUEUED_TOKENS: ScaleReason.QUEUED_TOKENS_ABOVE_TARGET,
    LoadSignal.PROMPT_TOKEN_RATE: ScaleReason.PROMPT_TOKEN_RATE_ABOVE_TARGET,
    LoadSignal.ACTIVE_SEQUENCES: ScaleReason.ACTIVE_SEQUENCES_ABOVE_TARGET,
    LoadSignal.KV_UTILIZATION: ScaleReason.KV_UTILIZATION_ABOVE_TARGET,
    LoadSignal.IDLE: ScaleReason.BELOW_MIN_REPLICAS,
}
_BELOW = {
    LoadSignal.QUEUED_TOKENS: ScaleReason.QUEUED_TOKENS_BELOW_TARGET,
    LoadSignal.PROMPT_TOKEN_RATE: ScaleReason.PROMPT_TOKEN_RATE_BELOW_TARGET,
    LoadSignal.ACTIVE_SEQUENCES: ScaleReason.ACTIVE_SEQUENCES_BELOW_TARGET,
    LoadSignal.KV_UTILIZATION: ScaleReason.KV_UTILIZATION_BELOW_TARGET,
    LoadSignal.IDLE: ScaleReason.POOL_IDLE,
}


def _reason(
    config: ScalingConfig,
    current: int,
    desired: int,
    wanted: int,
    signal: LoadSignal,
    limited_by: LimitedBy,
) -> ScaleReason:
    if desired > current:
        if current < config.min_replicas:
            return ScaleReason.BELOW_MIN_REPLICAS
        if current == 0:
            return ScaleReason.DEMAND_WHILE_SCALED_TO_ZERO
        return _ABOVE[signal]
    if desired < current:
        if current > config.max_replicas:
            return ScaleReason.ABOVE_MAX_REPLICAS
        return _BELOW[signal]
    if limited_by is LimitedBy.UNSCHEDULABLE:
        return ScaleReason.UNSCHEDULABLE
    if wanted > current:
        if limited_by is LimitedBy.MAX_REPLICAS:
            return ScaleReason.AT_MAX_REPLICAS
        return ScaleReason.SCALE_UP_STABILIZING
    if wanted < current:
        if limited_by is LimitedBy.MIN_REPLICAS:
            return ScaleReason.AT_MIN_REPLICAS
        return ScaleReason.SCALE_DOWN_STABILIZING
    if signal is LoadSignal.IDLE:
        return ScaleReason.POOL_IDLE
    return ScaleReason.WITHIN_TOLERANCE


def _message(
    config: ScalingConfig,
    observation: PoolObservation,
    raw: float,
    recommended: int,
    desired: int,
    limited_by: LimitedBy,
) -> str:
    o = observation
    if config.role is PoolRole.PREFILL:
        load = f"{o.queued_tokens + o.diverted_prefill_tokens} pending prompt tokens"
        if o.prompt_tokens_per_second is not None:
            load += f", {o.prompt_tokens_per_second:.0f} prompt tokens/s arriving"
    else:
        load = (
            f"{o.active_sequences:.1f} active + {o.queued_requests:.1f} queued sequences, "
            f"KV {o.kv_utilization:.0%}"
        )
        if o.requests_per_second is not None and o.mean_decode_seconds is not None:
            load += f", {o.requests_per_second:.1f} req/s x {o.mean_decode_seconds:.1f}s"
    text = (
        f"{config.role.value}: {load} = {raw:.2f} replicas of work; recommended "
        f"{recommended}, desired {desired} (current {o.current_replicas}, ready "
        f"{o.ready_replicas})"
    )
    if limited_by is LimitedBy.UNSCHEDULABLE:
        text += (
            f"; {o.unschedulable_replicas} pod(s) pending for capacity longer than "
            f"{config.unschedulable_after_seconds:.0f}s: holding until they are scheduled"
        )
    elif limited_by is not LimitedBy.NONE:
        text += f"; limited by {limited_by.value}"
    return text
