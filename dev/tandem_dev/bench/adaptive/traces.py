"""The section's traces (pure): the issue's five load shapes, sized for the real stack on
a small machine.

Answers are 64 tokens, not 256 or 1k: a 2-core machine's event loops stream only so many
tokens per second on time (as in ``autoscale_live.traces``), and the prompts carry the
load that decides the shape (prefill against decode, aggregated against disaggregated).
"""

from __future__ import annotations

from tandem_dev.autoscale_sim.traces import Phase, RequestShape, Stream, Trace

OUTPUT_TOKENS = 64
SHORT = (RequestShape(1024, OUTPUT_TOKENS),)
LONG = (RequestShape(32768, OUTPUT_TOKENS),)
# A drift's steps: the share of long prompts rises from none to all.
DRIFT_STEPS = 4


def build_adaptive_traces(seconds: float = 240.0, scale: float = 1.0) -> list[Trace]:
    """chat, rag, bursty, ramp and drift over ``seconds``; ``scale`` multiplies every rate."""
    quarter = seconds / 4
    # 32k prompts, so that the peak needs three times the trough's GPUs (a GB200 worker
    # serves 1k chat up to ~11 req/s: a 1k ramp to 4 req/s never left one worker).
    ramp = (0.5, 1, 2, 3, 3, 2, 1, 0.5)
    step = seconds / len(ramp)
    drift = seconds / DRIFT_STEPS
    short_rate, long_rate = 3 * scale, 1.5 * scale
    return [
        Trace(
            "chat",
            f"steady 1k prompts at {short_rate:g} req/s",
            seconds,
            (Stream(SHORT, (Phase(seconds, short_rate),)),),
        ),
        Trace(
            "rag",
            f"steady 32k prompts at {long_rate:g} req/s",
            seconds,
            (Stream(LONG, (Phase(seconds, long_rate),)),),
        ),
        Trace(
            "bursty",
            f"1k prompts at {short_rate:g} req/s, plus {quarter:.0f} s bursts of 32k prompts "
            f"at {2 * long_rate:g} req/s",
            seconds,
            (
                Stream(SHORT, (Phase(seconds, short_rate),)),
                Stream(LONG, (Phase(quarter, 0), Phase(quarter, 2 * long_rate)) * 2),
            ),
        ),
        Trace(
            "ramp",
            f"diurnal: 32k prompts, {step:.0f} s steps from {ramp[0] * scale:g} up to "
            f"{max(ramp) * scale:g} req/s and down",
            seconds,
            (Stream(LONG, tuple(Phase(step, r * scale) for r in ramp)),),
        ),
        Trace(
            "drift",
            f"1k prompts giving way to 32k ones in {DRIFT_STEPS} steps of {drift:.0f} s",
            seconds,
            (
                Stream(
                    SHORT,
                    tuple(
                        Phase(drift, short_rate * (1 - i / (DRIFT_STEPS - 1)))
                        for i in range(DRIFT_STEPS)
                    ),
                ),
                Stream(
                    LONG,
                    tuple(
                        Phase(drift, long_rate * i / (DRIFT_STEPS - 1)) for i in range(DRIFT_STEPS)
                    ),
                ),
            ),
        ),
    ]
