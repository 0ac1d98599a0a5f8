"""Both clocks next to the figures they can be checked against.

``python -m tandem_dev.docgen.calibration`` prints the tables in docs/simulated-engine.md
("Calibration") and in the goodput section of docs/benchmarks.md (tests keep both equal
to it).

The first table holds anchors, each citing its primary source by URL:

* **published**: a figure a vendor published, with the bound it gives exactly as it gives
  it. Both are "up to" figures, so both are upper bounds only;
* **derived**: arithmetic from a datasheet's link rate. A transfer cannot beat its line
  rate, so the result is a lower bound.

Each row shows the analytic roofline (``tandem.perf.model``, whose efficiencies were set
once against these rows, not fitted to any benchmark result of this repository) and
AIConfigurator's measured clock (``tandem.perf.measured``) where it prices the figure.
KV transfers come from the link model in both clocks, because the database has no
transfer data.

The second table holds figures that no primary source gives, with the two clocks side by
side: the 32k prefill, anchored until now to "~0.3-1 s" from our own notes with no source
behind it, and the KV pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B, KvDtype, gpu_for
from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.perf.clock import ClockChoice, StepClock, build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.model import PerfModel, compute_kv_capacity, compute_prefill_seconds

GB200, B200 = AcceleratorProfile.GB200, AcceleratorProfile.B200

NVIDIA_BLOG = (
    "https://developer.nvidia.com/blog/delivering-1-5-m-tps-inference-on-nvidia-gb200-nvl72-"
    "nvidia-accelerates-openai-gpt-oss-models-from-cloud-to-edge/"
)
BASETEN_LAUNCH = "https://www.baseten.co/blog/sota-performance-for-gpt-oss-120b-on-nvidia-gpus/"
BASETEN_FOLLOW_UP = (
    "https://www.baseten.co/blog/how-we-made-the-fastest-gpt-oss-on-nvidia-gpus-60-percent-faster/"
)
DGX_B200_GUIDE = "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
GB200_NVL72_PAGE = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"

# Line rates as the datasheets give them: one ConnectX-7 port of 400 Gb/s per B200 (DGX
# B200: eight single-port cards for eight GPUs); NVLink 5 at 1.8 TB/s per GPU counting
# both directions (GB200 NVL72: 130 TB/s over 72 GPUs), so 900 GB/s each way.
RAIL_BYTES_PER_S = 400e9 / 8
NVLINK5_ONE_WAY_BYTES_PER_S = 1.8e12 / 2
PROMPT = 32768
CHUNK = 8192
DECODE_BATCH, DECODE_CONTEXT = 256, 1536  # 1k/1k: mean context 1k + 1k/2
ONE_USER_CONTEXT = 2048
GPUS_PER_NVL72 = 72
PUBLISHED_TOKENS_PER_S_PER_NVL72 = 1.5e6


def _perf(profile: AcceleratorProfile, tp: int = 1, dtype: KvDtype = KvDtype.FP8) -> PerfModel:
    return PerfModel(GPT_OSS_120B, performance_for(profile), tp, dtype)


def analytic_clock(
    profile: AcceleratorProfile, tp: int = 1, dtype: KvDtype = KvDtype.FP8
) -> StepClock:
    return build_clock(_perf(profile, tp, dtype), profile, choice=ClockChoice.ANALYTIC)


def measured_clock(
    profile: AcceleratorProfile, tp: int = 1, dtype: KvDtype = KvDtype.FP8
) -> StepClock:
    return build_clock(_perf(profile, tp, dtype), profile, choice=ClockChoice.MEASURED)


Clock = Callable[..., StepClock]
Figure = Callable[[Clock], float]


@dataclass(frozen=True, slots=True)
class Anchor:
    what: str
    source: str  # who published it, or which datasheet it is derived from, with URLs
    published: str  # the figure as the source gives it, or the arithmetic from it
    low: float | None  # the bound the source gives, in ``unit``; None: it gives none
    high: float | None
    unit: str
    figure: Figure  # the figure on a clock (``analytic_clock`` or ``measured_clock``)
    measured: bool = True  # False: the database does not price it (both use the link model)

    def within(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


@dataclass(frozen=True, slots=True)
class Unanchored:
    what: str
    why: str  # why no published figure anchors it
    unit: str
    figure: Figure
    measured: bool = True


def _kv_gb(tp: int) -> float:
    return kv_bytes_per_gpu(GPT_OSS_120B, PROMPT, dtype=KvDtype.BF16, tensor_parallel_size=tp) / 1e9


def _line_rate_ms(tp: int, bytes_per_second: float) -> float:
    return 1e3 * _kv_gb(tp) * 1e9 / bytes_per_second


def _transfer_ms(profile: AcceleratorProfile, tp: int) -> Figure:
    return lambda clock: 1e3 * clock(profile, tp, KvDtype.BF16).kv_transfer_seconds(PROMPT)


def _decode_tokens_per_second(clock: Clock) -> float:
    """Batch 256 at 1k/1k (mean context 1.5k), one GB200, KV fp8."""
    step = clock(GB200).step_seconds([DECODE_CONTEXT] * DECODE_BATCH, ())
    return DECODE_BATCH / step


def _one_user_tokens_per_second(clock: Clock) -> float:
    return 1 / clock(B200).step_seconds([ONE_USER_CONTEXT], ())


def _prefill_seconds(profile: AcceleratorProfile) -> Figure:
    return lambda clock: compute_prefill_seconds(clock(profile), PROMPT, CHUNK)


def _kv_pool_sequences(clock: Clock) -> float:
    """33k-token sequences (33,792 + 128 tokens of blocks) one GB200's pool holds."""
    pool = compute_kv_capacity(_perf(GB200), gpu_for(GB200)).pool_bytes
    return float(pool // (18 * (33792 + 128) * 1024))


_RAIL_MS = _line_rate_ms(1, RAIL_BYTES_PER_S)
_RAILS_MS = _line_rate_ms(8, RAIL_BYTES_PER_S)
_NVLINK_MS = _line_rate_ms(1, NVLINK5_ONE_WAY_BYTES_PER_S)
_PER_GPU = PUBLISHED_TOKENS_PER_S_PER_NVL72 / GPUS_PER_NVL72

ANCHORS = (
    Anchor(
        f"KV of a 32k gpt-oss-120b prompt (bf16, {_kv_gb(1):.2f} GB), one 400G RDMA rail "
        "(b200, TP1)",
        f"derived from the DGX B200 user guide ({DGX_B200_GUIDE}): eight ConnectX-7 cards "
        "of up to 400 Gb/s for eight GPUs",
        f"{_kv_gb(1):.2f} GB / 50 GB/s: >= {_RAIL_MS:.3g} ms at line rate",
        _RAIL_MS,
        None,
        "ms",
        _transfer_ms(B200, 1),
        measured=False,
    ),
    Anchor(
        "same, 8 rails (b200, TP8: each GPU sends its eighth over its own rail)",
        "derived from the same guide",
        f"{_kv_gb(8):.3f} GB / 50 GB/s: >= {_RAILS_MS:.3g} ms at line rate",
        _RAILS_MS,
        None,
        "ms",
        _transfer_ms(B200, 8),
        measured=False,
    ),
    Anchor(
        "same, NVLink 5 inside a GB200 NVL72 domain (gb200, TP1)",
        f"derived from NVIDIA's GB200 NVL72 page ({GB200_NVL72_PAGE}): 130 TB/s of NVLink "
        "over 72 GPUs, 1.8 TB/s per GPU counting both directions",
        f"{_kv_gb(1):.2f} GB / 900 GB/s: >= {_NVLINK_MS:.3g} ms at line rate",
        _NVLINK_MS,
        None,
        "ms",
        _transfer_ms(GB200, 1),
        measured=False,
    ),
    Anchor(
        "decode throughput per GB200 (TP1, KV fp8; batch 256 at 1k/1k, our choice of a "
        "throughput point: the post gives no batch or lengths)",
        f"NVIDIA technical blog, Aug 2025 ({NVIDIA_BLOG}): gpt-oss 'up to 1.5 million "
        "tokens per second' on a GB200 NVL72",
        f"up to 1.5M tokens/s over 72 GPUs: <= {_PER_GPU:,.0f} tokens/s/GPU",
        None,
        _PER_GPU,
        "tokens/s",
        _decode_tokens_per_second,
    ),
    Anchor(
        "one user, B200 (TP1, KV fp8, decode step at 2k context)",
        f"Baseten, Aug 2025 ({BASETEN_LAUNCH}): gpt-oss-120b at ~500 tokens/s per user on "
        "B200s with tensor parallelism and speculative decoding (Eagle); TP8 per its "
        f"follow-up ({BASETEN_FOLLOW_UP})",
        "~500 tokens/s/user with both: <= 500 for one GPU decoding plainly (no lower bound)",
        None,
        500,
        "tokens/s",
        _one_user_tokens_per_second,
    ),
)

UNANCHORED = (
    Unanchored(
        "prefill of a 32k prompt, one B200 (TP1, KV fp8, chunks of 8192)",
        "no primary source found (the '~0.3-1 s' of our notes has none)",
        "s",
        _prefill_seconds(B200),
    ),
    Unanchored(
        "prefill of a 32k prompt, one GB200 (TP1, KV fp8, chunks of 8192)",
        "no primary source found (the '~0.3-1 s' of our notes has none)",
        "s",
        _prefill_seconds(GB200),
    ),
    Unanchored(
        "KV pool of one GB200 (fp8): 33k-token sequences it holds",
        "derived from the capacity model (HBM 186 GB - 60.8 GiB weights - workspace, x 0.9), "
        "the same in both clocks",
        "sequences",
        _kv_pool_sequences,
        measured=False,
    ),
)


def _show(value: float, unit: str) -> str:
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{shown} {unit}"


def prefill_seconds(profile: AcceleratorProfile, clock: Clock = measured_clock) -> float:
    """A 32k prompt prefilled alone on one GPU of ``profile``, chunks of 8192, KV fp8: the
    figure the docs quote for a long prompt's prefill."""
    return _prefill_seconds(profile)(clock)


def render_table() -> str:
    """The anchors, then the figures no primary source gives, then the measured clock's
    sources."""
    no_measure = "n/a (link model in both)"
    lines = [
        "| figure | source | published, or derived from a datasheet | analytic | "
        "measured (AIConfigurator) | within the bound (analytic / measured) |",
        "|---|---|---|---:|---:|---|",
    ]
    for a in ANCHORS:
        analytic = a.figure(analytic_clock)
        verdicts = ["yes" if a.within(analytic) else "no"]
        if a.measured:
            measured = a.figure(measured_clock)
            shown = _show(measured, a.unit)
            verdicts.append("yes" if a.within(measured) else "no")
        else:
            shown = no_measure
            verdicts.append("n/a")
        lines.append(
            f"| {a.what} | {a.source} | {a.published} | {_show(analytic, a.unit)} | {shown} "
            f"| {' / '.join(verdicts)} |"
        )
    lines += [
        "",
        "| figure with no published anchor | why | analytic | measured (AIConfigurator) |",
        "|---|---|---:|---:|",
    ]
    for u in UNANCHORED:
        shown = _show(u.figure(measured_clock), u.unit) if u.measured else "n/a (capacity model)"
        lines.append(
            f"| {u.what} | {u.why} | {_show(u.figure(analytic_clock), u.unit)} | {shown} |"
        )
    sources = sorted({measured_clock(p).source for p in (GB200, B200)})
    lines += ["", "Measured sources: " + "; ".join(f"`{s}`" for s in sources) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table())
