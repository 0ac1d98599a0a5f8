"""The live replay's harness on a short trace: `tandem up` of simulated workers with the
builtin autoscaler, every request streamed by the openai client at its time, the
autoscaler's rounds and the workers read back (figures are the benchmark's, not
asserted here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.tokenization.harmony import load_harmony_tokenizer
from tandem_dev.autoscale_sim.traces import generate_arrivals
from tandem_dev.bench.autoscale_live.__main__ import VARIANTS, build_prompts, render_live_cluster
from tandem_dev.bench.autoscale_live.replay import replay
from tandem_dev.bench.autoscale_live.report import INTERVAL_S
from tandem_dev.bench.autoscale_live.traces import build_live_traces

pytestmark = pytest.mark.integration

SECONDS = 30.0


def test_a_short_bursty_trace_is_served_and_its_autoscaler_rounds_recorded(
    tmp_path: Path,
) -> None:
    trace = next(t for t in build_live_traces(0.4, SECONDS) if t.name == "bursty")
    arrivals = generate_arrivals(trace, seed=3)
    prompts = build_prompts(load_harmony_tokenizer(), arrivals)
    document = render_live_cluster("live-test", VARIANTS[0])

    run = replay(tmp_path, "live-test", document, arrivals, prompts, SECONDS)

    assert len(run.served) == len(arrivals) > 0
    assert [s.error for s in run.served if s.error] == []
    asked = [(a.prompt_tokens, a.output_tokens) for a in arrivals]
    assert [(s.prompt_tokens, s.output_tokens) for s in run.served] == asked
    # Rounds every INTERVAL_S from the start, each with both pools.
    during = [t for t in run.ticks.values() if 0 <= t.at - run.started_wall <= SECONDS]
    assert len(during) >= SECONDS / INTERVAL_S - 2
    assert all(set(t.pools) == {"prefill", "decode"} for t in during)
    # The workers were sampled across the trace, the decode pool never empty.
    assert run.samples[0].at < 1.0 and run.samples[-1].at >= SECONDS - 1.0
    assert all(s.decode >= 1 for s in run.samples)
    assert run.pacing  # every worker's engine logged its books
    assert sum(run.decisions.values()) == len(arrivals)  # the router's, one per request
