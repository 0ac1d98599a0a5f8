"""The measured clock against AIConfigurator's own measurements: the rows of its
database read by hand (pandas over the parquet files the package ships), and its other
public estimator; and what happens where the database has no answer."""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path

import pandas as pd
import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_20B, GPT_OSS_120B, KvDtype
from tandem.capacity.models import ModelArchitecture
from tandem.perf.clock import AnalyticClock, ClockChoice, ClockError, build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.measured import MeasuredClock, MeasuredSource, StepShape, build_measured_clock
from tandem.perf.model import Chunk, PerfModel
from tandem.perf.table import PerfTable

GB200 = AcceleratorProfile.GB200
DATA_VERSION = "1.3.0rc20"  # the trtllm data aiconfigurator-core 0.12.0 calls current


def perf(
    profile: AcceleratorProfile = GB200,
    tp: int = 4,
    model: ModelArchitecture = GPT_OSS_120B,
    kv: KvDtype = KvDtype.BF16,
) -> PerfModel:
    return PerfModel(model, performance_for(profile), tp, kv)


def generation_attention_ms(system: str, *, heads: int, kv_heads: int, batch: int, keys: int,
                            window: int) -> float:  # fmt: skip
    """One layer's decode attention as measured: the row of the database's table (its
    rows store the keys a query attends to as ``isl + step``)."""
    import aiconfigurator_core

    table = (
        Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / "attention"
        / "trtllm" / DATA_VERSION / "generation_attention_perf.parquet"
    )  # fmt: skip
    rows = pd.read_parquet(table)
    row = rows[
        (rows.num_heads == heads)
        & (rows.num_key_value_heads == kv_heads)
        & (rows.head_dim == 64)
        & (rows.window_size == window)
        & (rows.kv_cache_dtype == "bfloat16")
        & (rows.batch_size == batch)
        & (rows.isl + rows.step == keys)
    ]
    assert len(row) == 1, f"expected one measured row, found {len(row)}"
    return float(row.latency.iloc[0])


@pytest.mark.parametrize(("tp", "batch"), [(4, 64), (1, 16), (8, 64)])
def test_decode_attention_grows_as_the_measured_rows_say(tp: int, batch: int) -> None:
    # Between two decode steps of the same batch only attention changes with the context:
    # gpt-oss-120b has 18 full-attention and 18 sliding-window (128) layers, 64 query and
    # 8 KV heads of 64, split over TP ranks.
    clock = build_measured_clock(perf(tp=tp), GB200)
    short, long = 1024, 8192  # keys each row attends to: its context plus its new token
    modelled = clock.step_seconds([long - 1] * batch, ()) - clock.step_seconds(
        [short - 1] * batch, ()
    )
    heads = {"heads": 64 // tp, "kv_heads": 8 // tp, "batch": batch}
    measured_ms = 18 * sum(
        generation_attention_ms("gb200", keys=long, window=window, **heads)
        - generation_attention_ms("gb200", keys=short, window=window, **heads)
        for window in (0, 128)
    )
    assert modelled == pytest.approx(measured_ms / 1e3, rel=0.05)


def _run_mixed_ms(tp: int, new: int, prior: int, decodes: int, keys: int) -> float:
    """The same step through AIConfigurator's ``run_mixed``. It prices context attention
    as the mean chunk of an ``isl``-token prompt (divided by ``ceil(isl / new)``), and
    decode attention at ``isl + osl // 2 + 1`` keys; both undone here."""
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.step_estimate import MixedStepInput

    from tandem.perf.measured import KV_DTYPES, choose_moe_dtype

    from aiconfigurator_core.sdk import common  # isort: skip

    config = ModelConfig(
        tp_size=tp,
        moe_tp_size=1,
        moe_ep_size=tp,
        moe_quant_mode=common.MoEQuantMode[choose_moe_dtype(GB200)],
        kvcache_quant_mode=common.KVCacheQuantMode[KV_DTYPES[KvDtype.BF16]],
    )
    model = get_model("openai/gpt-oss-120b", config, "trtllm")
    database = perf_database.get_database("gb200", "trtllm", "current")
    isl = prior + new
    osl = 1 if decodes == 0 else 2 * (keys - isl - 1)
    runtime = RuntimeConfig(isl=isl, osl=osl, prefix=prior)
    estimate = get_backend("trtllm").run_mixed(
        model, database, runtime, MixedStepInput(new, decodes)
    )
    parts = estimate.component_latency_ms
    return float(
        parts["shared_non_attention"]
        + parts["context_attention"] * math.ceil(isl / new)
        + parts["decode_attention"]
    )


@pytest.mark.parametrize(
    ("new", "prior", "decodes", "keys"),
    [(2048, 0, 0, 0), (2048, 32768, 0, 0), (8192, 8192, 0, 0), (2048, 8192, 64, 18432)],
)
def test_chunks_at_a_prior_context_price_as_run_mixed_does(
    new: int, prior: int, decodes: int, keys: int
) -> None:
    clock = build_measured_clock(perf(tp=4), GB200)
    seconds = clock.step_seconds([keys - 1] * decodes, (Chunk(prior, new),))
    assert seconds * 1e3 == pytest.approx(_run_mixed_ms(4, new, prior, decodes, keys), rel=1e-6)


def test_later_chunks_of_a_long_prompt_cost_more() -> None:
    clock = build_measured_clock(perf(tp=1), GB200)
    chunks = [clock.step_seconds((), (Chunk(prior, 8192),)) for prior in (0, 8192, 16384, 24576)]
    assert chunks == sorted(chunks) and chunks[-1] > 1.2 * chunks[0]


def test_steps_are_priced_once_per_shape() -> None:
    calls: list[dict[str, dict[str, int]]] = []

    def estimate(metrics: dict[str, dict[str, int]]) -> float:
        calls.append(metrics)
        return 10.0

    source = MeasuredSource("0", "gb200", DATA_VERSION, 1, "w4a8_mxfp4_mxfp8", "bfloat16")
    clock = MeasuredClock(perf(tp=1), source, estimate)
    # Mean contexts are rounded to a KV block (32 tokens): these rows attend to 3057 to
    # 3087 keys on average over 31 steps, all priced as 3072.
    for step in range(31):
        assert clock.step_seconds([4080 + step, 2032 + step], (Chunk(1000, 512),)) == 0.01
    assert calls == [StepShape(1, 512, 992, 2, 3072).as_metrics()]
    assert calls[0]["scheduled_requests"]["sum_decode_kv_tokens"] == 2 * 3072
    assert clock.step_seconds([4112, 2064], ()) == 0.01  # mean 3089 keys: the next block
    assert len(calls) == 2
    assert clock.step_seconds((), ()) == 0.0 and len(calls) == 2


def test_the_source_names_package_data_and_parallelism() -> None:
    clock = build_clock(perf(tp=2, kv=KvDtype.FP8), AcceleratorProfile.B200)
    version = importlib.metadata.version("aiconfigurator-core")
    assert clock.source == (
        f"measured: aiconfigurator-core {version} b200_sxm trtllm {DATA_VERSION} "
        "(attention TP2, experts EP2, w4a8_mxfp4_mxfp8, KV fp8)"
    )
    h200 = AcceleratorProfile.H200
    hopper = build_clock(perf(h200, tp=2, model=GPT_OSS_20B), h200)
    assert "w4a16_mxfp4" in hopper.source  # no MXFP8 kernels on Hopper


def test_where_the_database_cannot_answer_the_clock_says_why() -> None:
    # gpt-oss-120b's experts on one H100 were never measured (no EP1 rows on Hopper).
    fallback = build_clock(perf(AcceleratorProfile.H100, tp=1), AcceleratorProfile.H100)
    assert isinstance(fallback, AnalyticClock)
    assert fallback.source.startswith("analytic roofline (no measured data: measured: ")
    assert "h100_sxm" in fallback.source
    with pytest.raises(ClockError, match="the measured clock is unavailable"):
        build_clock(perf(AcceleratorProfile.H100, tp=1), AcceleratorProfile.H100,
                    choice=ClockChoice.MEASURED)  # fmt: skip
    fp32 = build_clock(perf(kv=KvDtype.FP32), GB200)
    assert fp32.source == (
        "analytic roofline (no measured data: no measured data for gpt-oss-120b with KV fp32 "
        "on gb200 (it covers gpt-oss-120b and gpt-oss-20b on gb200, b200, h200, h100))"
    )
    chosen = build_clock(perf(), GB200, choice=ClockChoice.ANALYTIC)
    assert chosen.source == "analytic roofline (chosen)"
    assert chosen.step_seconds([100], ()) == perf().step_seconds([100], ())


def test_a_table_and_the_measured_clock_exclude_each_other() -> None:
    table = PerfTable((1.0,), (1.0,), (1.0,), (1.0,), ((1.0,),))
    with pytest.raises(ClockError, match="exclude each other"):
        build_clock(perf(), GB200, choice=ClockChoice.MEASURED, table=table)


def test_workers_of_one_shape_share_a_clock_and_its_prices() -> None:
    first = build_measured_clock(perf(tp=2), GB200)
    first.step_seconds([4095] * 8, ())
    again = build_measured_clock(perf(tp=2), GB200)
    assert again is first and StepShape.of([4095] * 8, ()) in again._cache
    assert build_measured_clock(perf(tp=4), GB200) is not first
