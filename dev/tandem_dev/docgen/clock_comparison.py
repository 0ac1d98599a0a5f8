"""The analytic clock next to AIConfigurator's measured one, step by step.

``python -m tandem_dev.docgen.clock_comparison`` prints the tables in
docs/simulated-engine.md (a test keeps the two equal): gpt-oss-120b with an FP8 KV cache,
prefill chunks of 512 to 8192 tokens after 0 to 32k cached ones, and decode steps of 1 to
256 sequences at 1k to 33k keys, on each GPU profile. Each cell is ``analytic /
measured ms``; a ratio outside 0.85-1.15 (measured over analytic) is marked in bold.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B, KvDtype
from tandem.perf.clock import ClockChoice, StepClock, build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.model import Chunk, PerfModel

# TP1 where one GPU holds gpt-oss-120b and the database measured its experts on one GPU;
# the H100 holds it on two (80 GB, and no EP1 measurements on Hopper).
PROFILES = (
    (AcceleratorProfile.GB200, 1),
    (AcceleratorProfile.B200, 1),
    (AcceleratorProfile.H200, 1),
    (AcceleratorProfile.H100, 2),
)
CHUNKS = (512, 2048, 8192)
PRIORS = (0, 8192, 32768)
BATCHES = (1, 16, 64, 256)
KEYS = (1024, 8192, 33792)
TOLERANCE = 0.15

Step = Callable[[StepClock], float]


def _clocks(profile: AcceleratorProfile, tp: int) -> tuple[StepClock, StepClock]:
    perf = PerfModel(GPT_OSS_120B, performance_for(profile), tp, KvDtype.FP8)
    analytic = build_clock(perf, profile, choice=ClockChoice.ANALYTIC)
    return analytic, build_clock(perf, profile, choice=ClockChoice.MEASURED)


def _cell(analytic: float, measured: float) -> str:
    ratio = measured / analytic
    text = f"{analytic * 1e3:.2f} / {measured * 1e3:.2f} ({ratio:.2f}x)"
    return f"**{text}**" if abs(ratio - 1) > TOLERANCE else text


def _table(
    title: str, rows: list[tuple[str, Step]], clocks: list[tuple[StepClock, StepClock]]
) -> list[str]:
    header = [title] + [f"{profile.value} TP{tp}" for profile, tp in PROFILES]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(PROFILES) + "|"]
    for label, step in rows:
        cells = [_cell(step(analytic), step(measured)) for analytic, measured in clocks]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _chunk(new: int, prior: int) -> Step:
    return lambda clock: clock.step_seconds((), (Chunk(prior, new),))


def _decode(batch: int, keys: int) -> Step:
    return lambda clock: clock.step_seconds([keys - 1] * batch, ())


def render_tables() -> str:
    chunks = [
        (f"{new:,} tokens after {prior:,}", _chunk(new, prior))
        for new in CHUNKS
        for prior in PRIORS
    ]
    decodes = [
        (f"{batch} x {keys:,} keys", _decode(batch, keys)) for batch in BATCHES for keys in KEYS
    ]
    clocks = [_clocks(profile, tp) for profile, tp in PROFILES]
    sources = [measured.source for _, measured in clocks]
    return "\n".join(
        [
            *_table("prefill chunk", chunks, clocks),
            "",
            *_table("decode step", decodes, clocks),
            "",
            "Measured sources: " + "; ".join(f"`{s}`" for s in sources) + ".",
        ]
    )


def main() -> None:
    argparse.ArgumentParser(prog="python -m tandem_dev.docgen.clock_comparison").parse_args()
    print(render_tables())


if __name__ == "__main__":
    main()
