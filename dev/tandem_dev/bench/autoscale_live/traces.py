"""The live replay's traces (pure): four load shapes, sized for the real stack on a small
machine.

The prefill pool carries the load: 32k-token prompts at a few per second need several
GB200 prefill workers (one prefills a 32k prompt in 0.3 modelled s on the analytic clock,
0.4 s on the measured one), while each
request's 64 output tokens keep the decode pool's streamed tokens within what a 2-core
machine's event loops deliver on time. The decode pool's scaling is barely exercised
here (1-2 workers): a second decode worker's tokens/s are beyond this machine in real
time.
"""

from __future__ import annotations

from tandem_dev.autoscale_sim.traces import Phase, RequestShape, Stream, Trace

OUTPUT_TOKENS = 64
LONG = (RequestShape(32768, OUTPUT_TOKENS),)
SHORT = (RequestShape(1024, OUTPUT_TOKENS),)
CHAT = (
    RequestShape(1024, OUTPUT_TOKENS, 3),
    RequestShape(4096, OUTPUT_TOKENS, 3),
    RequestShape(8192, OUTPUT_TOKENS, 2),
    RequestShape(32768, OUTPUT_TOKENS, 2),
)


def build_live_traces(scale: float = 1.0, seconds: float = 240.0) -> list[Trace]:
    """steady, bursty, ramp and 32k-burst over ``seconds``; ``scale`` multiplies every
    rate (requests per second)."""
    quarter = seconds / 4
    steps = [r * scale for r in (1, 2, 3, 4, 5, 6)]
    step = seconds / (2 * len(steps))
    return [
        Trace(
            "steady",
            f"Chat mix (1k-32k prompts) at {4 * scale:g} req/s",
            seconds,
            (Stream(CHAT, (Phase(seconds, 4 * scale),)),),
        ),
        Trace(
            "bursty",
            f"32k prompts: {quarter:.0f} s at {5 * scale:g} req/s, {quarter:.0f} s of silence, "
            "twice",
            seconds,
            (Stream(LONG, (Phase(quarter, 5 * scale), Phase(quarter, 0)) * 2),),
        ),
        Trace(
            "ramp",
            f"32k prompts, {step:.0f} s steps from {steps[0]:g} up to {steps[-1]:g} req/s and "
            "back down",
            seconds,
            (Stream(LONG, tuple(Phase(step, r) for r in (*steps, *reversed(steps)))),),
        ),
        Trace(
            "32k-burst",
            f"1k prompts at {3 * scale:g} req/s, plus {quarter:.0f} s bursts of 32k prompts at "
            f"{5 * scale:g} req/s",
            seconds,
            (
                Stream(SHORT, (Phase(seconds, 3 * scale),)),
                Stream(
                    LONG,
                    (
                        Phase(quarter / 2, 0),
                        Phase(quarter, 5 * scale),
                        Phase(quarter, 0),
                        Phase(quarter, 5 * scale),
                    ),
                ),
            ),
        ),
    ]
