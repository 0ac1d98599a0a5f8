"""The analytic clock next to the published figures it is calibrated against.

``python -m tandem_dev.docgen.calibration`` prints the table in docs/simulated-engine.md (a
test keeps the two equal). Each row names its source; the model's efficiencies
(``Efficiency``) were set once so that these rows land within their published ranges,
not fitted to any benchmark result of this repository.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B, KvDtype, gpu_for
from tandem.perf.hardware import performance_for
from tandem.perf.model import (
    PerfModel,
    compute_kv_capacity,
    compute_kv_transfer_seconds,
    compute_prefill_seconds,
)

GB200, B200 = AcceleratorProfile.GB200, AcceleratorProfile.B200


def _model(profile: AcceleratorProfile, tp: int = 1, dtype: KvDtype = KvDtype.FP8) -> PerfModel:
    return PerfModel(GPT_OSS_120B, performance_for(profile), tp, dtype)


@dataclass(frozen=True, slots=True)
class Anchor:
    what: str
    source: str
    published: str
    low: float  # the published range, in ``unit``
    high: float
    unit: str
    compute: Callable[[], float]


def _max_decode_tokens_per_second() -> float:
    """Batch 256 at 1k/1k (mean context 1.5k), one GB200, KV fp8."""
    perf = _model(GB200)
    step = perf.step_seconds([1536] * 256, ())
    return 256 / step


ANCHORS = (
    Anchor(
        "KV of a 32k gpt-oss-120b prompt (bf16, 1.21 GB), one 400G RDMA rail (b200, TP1)",
        "shared/notes/stack-facts.md, published anchors",
        "~28 ms (85% of line rate)",
        25,
        31,
        "ms",
        lambda: 1e3 * compute_kv_transfer_seconds(_model(B200, 1, KvDtype.BF16), 32768),
    ),
    Anchor(
        "same, 8 rails (b200, TP8)",
        "shared/notes/stack-facts.md, published anchors",
        "~3 ms",
        2.5,
        4,
        "ms",
        lambda: 1e3 * compute_kv_transfer_seconds(_model(B200, 8, KvDtype.BF16), 32768),
    ),
    Anchor(
        "same, NVLink 5 inside a GB200 NVL72 domain (gb200, TP1)",
        "shared/notes/stack-facts.md, published anchors",
        "~1.4 ms",
        1.2,
        1.7,
        "ms",
        lambda: 1e3 * compute_kv_transfer_seconds(_model(GB200, 1, KvDtype.BF16), 32768),
    ),
    Anchor(
        "prefill of a 32k prompt, one B200 (chunks of 8192)",
        "shared/notes/stack-facts.md, published anchors",
        "~0.3-1 s",
        0.3,
        1.0,
        "s",
        lambda: compute_prefill_seconds(_model(B200), 32768, 8192),
    ),
    Anchor(
        "prefill of a 32k prompt, one GB200 (chunks of 8192)",
        "shared/notes/stack-facts.md, published anchors",
        "~0.3-1 s",
        0.25,
        1.0,
        "s",
        lambda: compute_prefill_seconds(_model(GB200), 32768, 8192),
    ),
    Anchor(
        "decode throughput at batch 256, 1k/1k, per GB200",
        "NVIDIA technical blog, Aug 2025: gpt-oss-120b up to 1.5M tokens/s on a GB200 "
        "NVL72 (72 GPUs)",
        "~20,800 tokens/s/GPU",
        16_000,
        24_000,
        "tokens/s",
        _max_decode_tokens_per_second,
    ),
    Anchor(
        "one user, B200 (decode step at 2k context)",
        "Baseten launch write-up: gpt-oss-120b at ~500 tokens/s/user on NVIDIA GPUs, "
        "with speculative decoding (an upper bound for plain decoding)",
        "<= ~500 tokens/s/user",
        250,
        500,
        "tokens/s",
        lambda: 1 / _model(B200).step_seconds([2048], ()),
    ),
    Anchor(
        "KV pool of one GB200 (fp8): 33k-token sequences it holds",
        "capacity model (HBM 186 GB - 60.8 GiB weights - workspace, x 0.9)",
        "derived, not published",
        0,
        float("inf"),
        "sequences",
        lambda: float(
            compute_kv_capacity(_model(GB200), gpu_for(GB200)).pool_bytes
            // (18 * (33792 + 128) * 1024)
        ),
    ),
)


def render_table() -> str:
    lines = [
        "| anchor | source | published | model | within range |",
        "|---|---|---|---:|---|",
    ]
    for a in ANCHORS:
        value = a.compute()
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        in_range = a.low <= value <= a.high
        ok = "n/a" if a.high == float("inf") else "yes" if in_range else "no"
        lines.append(f"| {a.what} | {a.source} | {a.published} | {shown} {a.unit} | {ok} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table())
