"""``python -m tandem_dev.bench.autoscale_live``: the live replay of every trace under each
policy variant, judged against the SLO oracle; prints the markdown section (see the
package docstring)."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.engines.simulated.config import SimulatedConfig
from tandem.perf.model import compute_prefill_seconds
from tandem.sim.spec_setup import compute_setup
from tandem.tokenization.harmony import HarmonyTokenizer, load_harmony_tokenizer
from tandem_dev.autoscale_sim.slo_oracle import plan_trace, plan_windows
from tandem_dev.autoscale_sim.traces import Arrival, Trace, generate_arrivals
from tandem_dev.bench.autoscale_live.judge import build_ticks, judge_pool
from tandem_dev.bench.autoscale_live.replay import FIRST_INDEX, replay
from tandem_dev.bench.autoscale_live.report import (
    INTERVAL_S,
    PROFILE,
    SEED,
    SLO,
    TraceResult,
    Variant,
    render_report,
)
from tandem_dev.bench.autoscale_live.traces import build_live_traces
from tandem_dev.bench.goodput.points import Split
from tandem_dev.bench.goodput.stack import render_cluster
from tandem_dev.bench.goodput.workload import build_prompt

MAX_PREFILL, MAX_DECODE = 4, 2
VARIANTS = (
    # docs/autoscaling.md's guidance: 0.8x a worker's prefill rate, the pool free to empty.
    Variant("defaults", prefill_floor=0, target_share=0.8),
    # The same, with the router judging a full prefill pool against the TTFT target.
    Variant("wait limit", prefill_floor=0, target_share=0.8, max_prefill_wait_seconds=2.0),
    # The same, tuned for workers that start in seconds (docs/autoscaling.md): the prefill
    # signals averaged over one interval instead of four, and an idle prefill worker kept
    # two intervals instead of six.
    Variant(
        "wait limit, fast start",
        prefill_floor=0,
        target_share=0.8,
        max_prefill_wait_seconds=2.0,
        prefill_smoothing_seconds=5,
        prefill_scale_down_seconds=10,
    ),
    # The same, long prompts waiting up to 10 s for a prefill worker that is starting
    # rather than prefilling on a decode worker that streams (a start takes 2-5 s here).
    Variant(
        "fast start, start wait",
        prefill_floor=0,
        target_share=0.8,
        max_prefill_wait_seconds=2.0,
        prefill_smoothing_seconds=5,
        prefill_scale_down_seconds=10,
        max_prefill_start_wait_seconds=10.0,
    ),
)


def prefill_target_tokens_per_second(share: float, profile: str = PROFILE) -> int:
    """``share`` of one worker's modelled prefill rate on 32k prompts (on the clock its
    simulated workers run on)."""
    config = SimulatedConfig.from_options({"accelerator": profile, "kv_cache_dtype": "fp8"})
    return int(share * 32768 / compute_prefill_seconds(config.clock, 32768, 8192))


def cluster_name(trace: Trace, variant: Variant) -> str:
    """A DNS label: the trace, the floor, the share in percent, the wait limit in
    tenths of a second (0: none), the prefill smoothing and scale-down window (0: the
    defaults), and the start wait limit in seconds when set."""
    wait = round((variant.max_prefill_wait_seconds or 0) * 10)
    share = round(variant.target_share * 100)
    smoothing = variant.prefill_smoothing_seconds or 0
    down = variant.prefill_scale_down_seconds or 0
    name = f"live-{trace.name}-{variant.prefill_floor}-{share}-{wait}-{smoothing}-{down}"
    start_wait = variant.max_prefill_start_wait_seconds
    return name if start_wait is None else f"{name}-{start_wait:g}"


def render_live_cluster(name: str, variant: Variant, profile: str = PROFILE) -> dict[str, Any]:
    """The goodput section's deployment (TP1 simulated workers, GB200 unless ``profile``
    says otherwise, conditional disaggregation at 2,048 tokens, real time), its pools free
    to scale."""
    document = render_cluster(name, profile, Split(1, 1), 1.0)
    spec = document["spec"]
    floor = variant.prefill_floor
    spec["prefill"].update({"replicas": 1, "minReplicas": floor, "maxReplicas": MAX_PREFILL})
    spec["decode"].update({"replicas": 1, "minReplicas": 1, "maxReplicas": MAX_DECODE})
    target = prefill_target_tokens_per_second(variant.target_share, profile)
    wait = variant.max_prefill_wait_seconds
    disaggregation = spec.setdefault("frontend", {}).setdefault("disaggregation", {})
    if wait is not None:
        disaggregation["maxPrefillWaitSeconds"] = wait
    if variant.max_prefill_start_wait_seconds is not None:
        disaggregation["maxPrefillStartWaitSeconds"] = variant.max_prefill_start_wait_seconds
    prefill: dict[str, int] = {"targetTokensPerSecondPerReplica": target}
    if variant.prefill_smoothing_seconds is not None:
        prefill["smoothingSeconds"] = variant.prefill_smoothing_seconds
    if variant.prefill_scale_down_seconds is not None:
        prefill["scaleDownStabilizationSeconds"] = variant.prefill_scale_down_seconds
    spec["autoscaling"] = {"enabled": True, "intervalSeconds": INTERVAL_S, "prefill": prefill}
    return document


def build_prompts(tokenizer: HarmonyTokenizer, arrivals: Sequence[Arrival]) -> list[str]:
    """Distinct prompts (their first block differs) rendering to each arrival's length."""
    templates: dict[int, str] = {}
    prompts = []
    for index, arrival in enumerate(arrivals):
        isl = arrival.prompt_tokens
        if isl not in templates:
            templates[isl] = build_prompt(tokenizer, isl, FIRST_INDEX)
        head = f"Request {FIRST_INDEX + index}:"
        prompts.append(templates[isl].replace(f"Request {FIRST_INDEX}:", head, 1))
    return prompts


def run_trace(
    home: Path, trace: Trace, variant: Variant, tokenizer: HarmonyTokenizer
) -> TraceResult:
    arrivals = generate_arrivals(trace, SEED)
    prompts = build_prompts(tokenizer, arrivals)
    name = cluster_name(trace, variant)
    document = render_live_cluster(name, variant)
    cluster = InferenceCluster.model_validate(document)
    run = replay(home, name, document, arrivals, prompts, trace.duration_seconds)
    setup, limits = compute_setup(cluster.spec)
    plans = plan_trace(arrivals, trace.duration_seconds, INTERVAL_S, setup, limits, SLO)
    # The need of each constant-load stretch as a whole, for reaction and flaps.
    edges = [0.0, *trace.change_points(), trace.duration_seconds]
    stretches = plan_windows(arrivals, edges, setup, limits, SLO)
    settle = cluster.spec.autoscaling.prefill.scale_down_stabilization_seconds + INTERVAL_S
    records = list(run.ticks.values())
    verdicts = {
        role: judge_pool(
            role,
            trace,
            build_ticks(records, role, run.started_wall, stretches, trace.duration_seconds),
            run.samples,
            plans,
            settle,
        )
        for role in PoolRole
    }
    mismatched = sum(
        1 for s, a in zip(run.served, arrivals, strict=True)
        if not s.error and s.prompt_tokens != a.prompt_tokens
    )  # fmt: skip
    if mismatched:
        logging.warning("%s: %d prompts were not their trace length", name, mismatched)
    return TraceResult(trace, variant, run, plans, verdicts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.autoscale_live")
    parser.add_argument("--seconds", type=float, default=240.0, help="each trace's length")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every rate")
    parser.add_argument("--only", action="append", help="trace names to run")
    parser.add_argument("--variant", action="append", help="variant names to run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    traces = build_live_traces(args.scale, args.seconds)
    traces = [t for t in traces if not args.only or t.name in args.only]
    variants = [v for v in VARIANTS if not args.variant or v.name in args.variant]
    tokenizer = load_harmony_tokenizer()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tandem-autoscale-live-") as tmp:
        results = [
            run_trace(Path(tmp), trace, variant, tokenizer)
            for variant in variants
            for trace in traces
        ]
    targets = {v.name: prefill_target_tokens_per_second(v.target_share) for v in variants}
    print(render_report(results, targets, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
