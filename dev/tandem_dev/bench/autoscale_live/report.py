"""The live replay's markdown (pure): a verdict table against the issue's targets and a
table that says why each target was met or missed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.router.policy import DecisionReason
from tandem.sim.metrics import Slo
from tandem_dev.autoscale_sim.figures import compute_percentile
from tandem_dev.autoscale_sim.slo_oracle import IntervalPlan
from tandem_dev.autoscale_sim.traces import Trace
from tandem_dev.bench.autoscale_live.judge import (
    PoolVerdict,
    as_outcome,
    compute_live_attainment,
)
from tandem_dev.bench.autoscale_live.replay import LiveRun
from tandem_dev.bench.autoscale_live.traces import OUTPUT_TOKENS

PROFILE = "gb200"
SEED = 7
INTERVAL_S = 5
# The goodput section's SLO for 32k prompts.
SLO = Slo(ttft_p90_s=2.0, itl_p90_s=0.006)
# The targets.
MIN_ATTAINMENT, MAX_GPU_RATIO, MAX_REACTION, MAX_FLAPS = 0.95, 1.25, 2, 1
# Router decisions that sent a long prompt to its decode worker.
DIVERTED = (
    DecisionReason.NO_PREFILL_WORKERS,
    DecisionReason.PREFILL_UNHEALTHY,
    DecisionReason.PREFILL_SATURATED,
)


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    prefill_floor: int  # prefill.minReplicas
    target_share: float  # of a worker's 32k prefill rate: targetTokensPerSecondPerReplica
    # frontend.disaggregation.maxPrefillWaitSeconds; None: the router's token threshold.
    max_prefill_wait_seconds: float | None = None
    # autoscaling.prefill.smoothingSeconds / scaleDownStabilizationSeconds; None: defaults.
    prefill_smoothing_seconds: int | None = None
    prefill_scale_down_seconds: int | None = None
    # frontend.disaggregation.maxPrefillStartWaitSeconds; None: prompts never wait.
    max_prefill_start_wait_seconds: float | None = None

    def describe(self, target_tokens_per_second: int) -> str:
        wait = self.max_prefill_wait_seconds
        router = (
            "a prefill worker with 4 prompts' worth queued is saturated"
            if wait is None
            else f"maxPrefillWaitSeconds {wait:g}"
        )
        text = (
            f"**{self.name}**: prefill minReplicas {self.prefill_floor}, "
            f"targetTokensPerSecondPerReplica {target_tokens_per_second:,} "
            f"({self.target_share:g}x a worker's modelled 32k prefill rate), {router}"
        )
        if self.prefill_smoothing_seconds is not None:
            text += f", prefill smoothingSeconds {self.prefill_smoothing_seconds}"
        if self.prefill_scale_down_seconds is not None:
            text += f", prefill scaleDownStabilizationSeconds {self.prefill_scale_down_seconds}"
        if self.max_prefill_start_wait_seconds is not None:
            text += f", maxPrefillStartWaitSeconds {self.max_prefill_start_wait_seconds:g}"
        return text


@dataclass(frozen=True, slots=True)
class TraceResult:
    trace: Trace
    variant: Variant
    run: LiveRun
    plans: Sequence[IntervalPlan]
    verdicts: Mapping[PoolRole, PoolVerdict]

    @property
    def attainment(self) -> float:
        """Within the SLO, of the requests in intervals the oracle serves at 100%."""
        return compute_live_attainment(self.run.served, SLO, self.plans)

    @property
    def gpu_seconds(self) -> float:
        """Both pools' worker-seconds (TP1 workers: one GPU each)."""
        return sum(v.worker_seconds for v in self.verdicts.values())

    @property
    def oracle_gpu_seconds(self) -> float:
        return sum(v.oracle_worker_seconds for v in self.verdicts.values())

    @property
    def gpu_ratio(self) -> float:
        oracle = self.oracle_gpu_seconds
        return self.gpu_seconds / oracle if oracle else float("nan")

    @property
    def reactions(self) -> list[int | None]:
        return [r for v in self.verdicts.values() for r in v.reactions]

    @property
    def flaps(self) -> int | None:
        found = [v.flaps_per_30 for v in self.verdicts.values() if v.flaps_per_30 is not None]
        return max(found) if found else None

    def missed(self) -> list[str]:
        missed = []
        if self.attainment < MIN_ATTAINMENT:
            missed.append(f"attainment {self.attainment:.0%}")
        if self.gpu_ratio > MAX_GPU_RATIO:
            missed.append("GPU-s")
        slow = sum(1 for r in self.reactions if r is None or r > MAX_REACTION)
        if slow:
            missed.append(f"reaction {slow}/{len(self.reactions)} > {MAX_REACTION}")
        if self.flaps is not None and self.flaps > MAX_FLAPS:
            missed.append("flaps")
        return missed


def _reactions(values: Sequence[int | None]) -> str:
    return ",".join("-" if r is None else str(r) for r in values) or "n/a"


def render_verdict_row(result: TraceResult) -> str:
    prefill = result.verdicts[PoolRole.PREFILL]
    decode = result.verdicts[PoolRole.DECODE]
    every = all(p.attainable for p in result.plans)
    missed = result.missed()
    return (
        f"| {result.variant.name} | {result.trace.name} | "
        f"{compute_live_attainment(result.run.served, SLO):.1%} | "
        f"{result.attainment:.1%}{'' if every else ' (attainable intervals)'} | "
        f"{result.gpu_seconds:,.0f} vs {result.oracle_gpu_seconds:,.0f} "
        f"({result.gpu_ratio:.2f}x) | "
        f"{_reactions(prefill.reactions)} | {_reactions(decode.reactions)} | "
        f"{'n/a' if result.flaps is None else result.flaps} | "
        f"{'missed: ' + ', '.join(missed) if missed else 'met'} |"
    )


def render_why_row(result: TraceResult) -> str:
    run = result.run
    outcomes = [(s, as_outcome(s)) for s in run.served]
    answered = [o for _, o in outcomes if o is not None]
    slow_first = sum(1 for o in answered if o.ttft > SLO.ttft_p90_s)
    slow_tokens = sum(1 for o in answered if o.itl > SLO.itl_p90_s)
    failed = len(run.served) - len(answered)
    diverted = ", ".join(f"{run.decisions.get(r, 0):.0f}" for r in DIVERTED)
    queued = run.decisions.get(DecisionReason.DECODE_BUSY, 0)
    waited = ", ".join(f"{run.start_waits.get(p, 0):.0f}" for p in ("remote", "local"))
    early = sum(1 for tick in run.ticks.values() if tick.early)
    prefill = result.verdicts[PoolRole.PREFILL]
    decode = result.verdicts[PoolRole.DECODE]
    lag = max((p.lag for p in run.pacing.values()), default=0.0)
    return (
        f"| {result.variant.name} | {result.trace.name} | {len(run.served)} | "
        f"{compute_percentile([o.ttft for o in answered], 0.9):.2f} / "
        f"{compute_percentile([o.itl for o in answered], 0.9) * 1e3:.1f} | "
        f"{slow_first} / {slow_tokens} / {failed} | {diverted} | {queued:.0f} | {waited} | "
        f"{len(run.ticks)} ({early}) | "
        f"{prefill.worker_seconds:,.0f} / {prefill.oracle_worker_seconds:,.0f}, "
        f"{decode.worker_seconds:,.0f} / {decode.oracle_worker_seconds:,.0f} | "
        f"{prefill.peak_desired}/{prefill.peak_needed}, "
        f"{decode.peak_desired}/{decode.peak_needed} | {lag:.0%} |"
    )


def render_report(results: Sequence[TraceResult], targets: Mapping[str, int], wall_s: float) -> str:
    verdicts = "\n".join(render_verdict_row(r) for r in results)
    why = "\n".join(render_why_row(r) for r in results)
    traces = list({r.trace.name: r.trace for r in results}.values())
    described = "; ".join(f"**{t.name}**: {t.description}" for t in traces)
    variants = list({r.variant.name: r.variant for r in results}.values())
    policies = "; ".join(v.describe(targets[v.name]) for v in variants)
    return (
        "| policy | trace | within SLO | within SLO where the oracle serves all | "
        "GPU-s vs oracle | reaction prefill | reaction decode | flaps/30 | targets |\n"
        "|---|---|---:|---:|---|---|---|---|---|\n"
        f"{verdicts}\n\n"
        "Why: what missed the SLO, where long prompts went, and what each pool held.\n\n"
        "| policy | trace | requests | TTFT p90 s / ITL p90 ms | over TTFT / over ITL / "
        "failed | long prompts prefilled on decode workers (no prefill worker, none "
        "ready, all saturated) | queued past the wait limit (decode worker streaming) | "
        "waited for a starting prefill worker (then remote, local) | "
        "autoscaler rounds (early) | worker-s live / oracle (prefill, decode) | peak desired / "
        "needed (prefill, decode) | plumbing lag |\n"
        "|---|---|---:|---|---|---|---:|---|---|---|---|---:|\n"
        f"{why}\n\n"
        f"Traces ({traces[0].duration_seconds:.0f} s each, seed {SEED}, {OUTPUT_TOKENS} "
        f"output tokens per request): {described}.\n\n"
        f"Deployment: gpt-oss-120b on simulated {PROFILE.upper()} TP1 workers in real time "
        "(speed-up 1), starting with 1 prefill and 1 decode worker (prefill up to 4, decode "
        "1-2), prompts of 2,048+ tokens disaggregated (to decode workers while the prefill "
        "pool is empty, or saturated and the decode worker streams and prefills nothing); "
        f"the builtin autoscaler every {INTERVAL_S} s (sooner when long prompts are diverted) "
        f"with its defaults and, per policy, {policies}. SLO per request: "
        f"TTFT <= {SLO.ttft_p90_s:g} s and mean ITL "
        f"<= {SLO.itl_p90_s * 1e3:g} ms. Oracle: per {INTERVAL_S} s interval, the fewest "
        "workers (GPUs, then prefill workers) that serve every request of the interval "
        "within the SLO in virtual time, starting idle; reaction (rounds until desired "
        "reaches the need) and flaps use the need of each constant-load stretch planned as "
        "a whole. A worker's cold start here is a process start (seconds), not a GPU pod's "
        "weight load (minutes). Plumbing lag: the most wall time any engine waited on the "
        "event loop or overran its modelled step, over its modelled work. Targets: "
        f">= {MIN_ATTAINMENT:.0%} within SLO where the oracle serves all, GPU-s <= "
        f"{MAX_GPU_RATIO}x the oracle, reaction <= {MAX_REACTION} rounds, flaps <= "
        f"{MAX_FLAPS} per 30 rounds. ({wall_s:.0f} s)"
    )
