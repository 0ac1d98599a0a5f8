"""The simulated engine in-process: its pure scheduling, the payload that carries a
sequence between workers, pacing against an injected clock, and KV admission."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.capacity.models import TANDEM_REFERENCE, KvDtype
from tandem.engines.base import EngineError, KvLayout, SamplingParams
from tandem.engines.priority import FIRST_TOKENS
from tandem.engines.simulated import SimulatedConfigError, SimulatedEngine
from tandem.engines.simulated.engine import IDLE_TICK_S
from tandem.engines.simulated.pacing import Pacer
from tandem.engines.simulated.scheduler import Waiting, choose_admissions, plan_chunks
from tandem.engines.simulated.tokens import (
    Payload,
    PayloadError,
    decode_payload,
    encode_payload,
    hash_prompt,
)
from tandem.perf.model import compute_sequence_blocks
from tandem.perf.table import FORMAT, MeasuredWorker, render_worker

FAST = {"accelerator": "h100", "kv_cache_dtype": "fp8", "speedup": 10_000}


def engine(**options: object) -> SimulatedEngine:
    return SimulatedEngine.from_options({**FAST, **options})


def copy_kv(source: SimulatedEngine, src: KvLayout, target: SimulatedEngine, dst: KvLayout) -> None:
    """What a KV transport does: remote.ranges[i] -> local.ranges[i]."""
    a, b = source.kv_regions()[0], target.kv_regions()[0]
    for far, near in zip(src.ranges, dst.ranges, strict=True):
        b[near.offset : near.offset + near.length] = a[far.offset : far.offset + far.length]


def run_to_end(e: SimulatedEngine, rid: str, sampling: SamplingParams) -> list[int]:
    tokens: list[int] = []
    for _ in range(10_000):
        outputs = e.step({rid: sampling})
        tokens += [o.token for o in outputs]
        if outputs and outputs[-1].finish_reason is not None:
            return tokens
    raise AssertionError("never finished")


def test_admission_is_fifo_no_evict_and_bounded_by_the_batch() -> None:
    waiting = [Waiting(True, 4), Waiting(False, 1), Waiting(True, 3), Waiting(True, 1)]
    # 8 free: 4 then (skip the unready one) 3; the 1-block one behind them also fits.
    assert choose_admissions(waiting, 8, 10) == [0, 2, 3]
    # 6 free: 4 fits, 3 does not -> it blocks the 1 behind it (arrival order).
    assert choose_admissions(waiting, 6, 10) == [0]
    assert choose_admissions(waiting, 8, 2) == [0, 2]


def test_chunks_take_what_decode_rows_leave_in_arrival_order() -> None:
    assert plan_chunks(8192, 0, [10_000, 500]) == [8192, 0]
    assert plan_chunks(8192, 192, [5000, 5000]) == [5000, 3000]
    assert plan_chunks(100, 120, [50]) == [0]


def test_payload_round_trip_and_refusals() -> None:
    payload = Payload(hash_prompt([1, 2, 3]), 3, 42)
    data = encode_payload(payload)
    assert len(data) == 64
    assert decode_payload(data, 3, 42) == payload
    with pytest.raises(PayloadError, match="checksum"):
        decode_payload(bytes(64), 3, 42)  # nothing was written
    with pytest.raises(PayloadError, match="expected 4 tokens"):
        decode_payload(data, 4, 42)
    assert hash_prompt([1, 2, 3]) != hash_prompt([1, 2, 4]) != hash_prompt([1, 2, 3], seed=1)


def test_pacer_ends_steps_at_modelled_time_over_speedup() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(4.0, clock=lambda: now[0], sleep=sleep)
    start = pacer.now()
    now[0] += 0.1  # the step's own Python work
    pacer.finish_step(start, 2.0, work_waited=False)  # 2 modelled s = 0.5 wall s
    assert now[0] == pytest.approx(0.5) and slept == [pytest.approx(0.4)]
    now[0] += 0.2  # the event loop took 0.2 s to hand over the next step's work
    start = pacer.now()
    now[0] += 0.3  # and the step itself took longer than its 0.1 modelled wall s
    pacer.finish_step(start, 0.4, work_waited=True)
    report = pacer.report()
    assert (report.steps, report.modelled_s) == (2, pytest.approx(2.4))
    assert report.overrun_s == pytest.approx(0.2) and report.gap_s == pytest.approx(0.2)
    assert report.wall_s == pytest.approx(1.0)


def test_disaggregated_continues_exactly_where_local_would() -> None:
    prompt = list(range(5000, 5000 + 9000))
    sampling = SamplingParams(max_tokens=20)
    local = engine()
    head = local.prefill("a", prompt, sampling)
    local_tokens = [head.first_token, *run_to_end(local, "a", sampling)]
    prefill, decode = engine(), engine()
    result = prefill.prefill("b", prompt, sampling)
    layout = decode.reserve("b", prompt, result.first_token)
    with pytest.raises(EngineError, match="checksum"):
        decode.commit("b")  # the transport has not written the slot yet
    copy_kv(prefill, result.kv, decode, layout)
    decode.commit("b")
    remote_tokens = [result.first_token, *run_to_end(decode, "b", sampling)]
    assert remote_tokens == local_tokens and len(local_tokens) == 20
    # A harmony answer header, then ordinary o200k text ids.
    assert local_tokens[:3] == [200_005, 17_196, 200_008]
    assert all(0 <= t < 199_998 for t in local_tokens[3:])


def test_sequences_wait_for_kv_and_start_when_it_frees() -> None:
    e = engine(max_num_tokens=65_536)
    sampling = SamplingParams(max_tokens=1024)
    prompt = [7] * 32_768
    need = compute_sequence_blocks(e.config.perf, e.capacity, 32_768 + 1024)
    fits = e.capacity.blocks // need
    assert 1 <= fits < 50  # gpt-oss-120b on one 80 GB H100: a few dozen 33k sequences
    for i in range(fits + 1):
        e.start_prefill(f"r{i}", prompt, sampling)
    outputs = []
    for _ in range(fits + 2):
        outputs += e.step({})
    assert sorted(o.request_id for o in outputs) == sorted(f"r{i}" for i in range(fits))
    assert e.stats().queued_requests == 1
    assert e.stats().kv_blocks_free == e.capacity.blocks - fits * need
    e.release("r0")
    late = [o for _ in range(3) for o in e.step({})]
    assert [o.request_id for o in late] == [f"r{fits}"]
    assert e.stats().queued_requests == 0


def test_a_higher_priority_prompt_is_admitted_first_when_kv_frees() -> None:
    e = engine(max_num_tokens=65_536)
    prompt = [7] * 32_768
    need = compute_sequence_blocks(e.config.perf, e.capacity, 32_768 + 1024)
    fits = e.capacity.blocks // need
    for i in range(fits):
        e.start_prefill(f"r{i}", prompt, SamplingParams(max_tokens=1024))
    for _ in range(fits + 2):
        e.step({})
    e.start_prefill("low", prompt, SamplingParams(max_tokens=1024))
    e.start_prefill("high", prompt, SamplingParams(max_tokens=1024, priority=1))
    assert e.step({}) == []
    assert e.stats().queued_requests == 2  # the pool is full: both wait
    e.release("r0")
    late = [o.request_id for _ in range(3) for o in e.step({})]
    assert late == ["high"]  # arrived second, ranked first; "low" still waits for KV
    assert e.stats().queued_requests == 1


def test_a_step_prefills_the_higher_priority_prompt_alone() -> None:
    """Budget 1,000: the ranked-up 300-token prompt takes its step alone (the budget it
    leaves is not handed down); the earlier 600-token one runs in the next step."""
    e = engine(max_num_tokens=1000)
    e.start_prefill("low", [7] * 600, SamplingParams(max_tokens=4))
    e.start_prefill("high", [8] * 300, SamplingParams(max_tokens=4, priority=1))
    assert [o.request_id for o in e.step({})] == ["high"]
    assert e.stats().prompt_tokens_computed == 300
    assert [o.request_id for o in e.step({})] == ["low"]
    assert e.stats().prompt_tokens_computed == 900


def test_a_ranked_up_decode_row_pauses_then_holds_lower_prefill_to_a_quarter() -> None:
    """Budget 1,001: while the ranked-up "high" writes its first tokens (``FIRST_TOKENS``,
    the prefill's one of them), "low"'s prompt waits; then it advances 250 tokens a step
    (a quarter of the 1,000 left after the row); once "high" is done it takes the whole
    budget again."""
    e = engine(max_num_tokens=1001)
    ranked = SamplingParams(max_tokens=FIRST_TOKENS + 2, priority=1)
    e.start_prefill("high", [8] * 10, ranked)
    assert [o.request_id for o in e.step({})] == ["high"]
    e.start_prefill("low", [7] * 2000, SamplingParams(max_tokens=4))
    computed = e.stats().prompt_tokens_computed
    for _ in range(FIRST_TOKENS - 1):
        e.step({"high": ranked})
    assert e.stats().prompt_tokens_computed == computed
    e.step({"high": ranked})
    assert e.stats().prompt_tokens_computed - computed == 250
    e.step({"high": ranked})  # its last token
    e.release("high")
    computed = e.stats().prompt_tokens_computed
    e.step({})
    assert e.stats().prompt_tokens_computed - computed == 1001


def test_equal_priorities_share_a_step_in_arrival_order() -> None:
    e = engine(max_num_tokens=1000)
    e.start_prefill("first", [7] * 600, SamplingParams(max_tokens=4))
    e.start_prefill("second", [8] * 300, SamplingParams(max_tokens=4))
    assert [o.request_id for o in e.step({})] == ["first", "second"]


def test_nothing_to_run_waits_an_idle_tick() -> None:
    e = engine()
    e.start_prefill("a", [1] * 10, SamplingParams(max_tokens=2))
    e.step({})  # prefilled: held for a decode worker, nothing more to do
    before = e.pacer.report().steps
    assert e.step({}) == [] and e.pacer.report().steps == before
    assert IDLE_TICK_S > 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": 1}, "option bogus"),
        ({"accelerator": "cpu"}, "models a GPU"),
        ({"accelerator": "tpu"}, "option accelerator"),
        ({"model": "llama-70b"}, "unknown architecture"),
        ({"speedup": 0}, "option speedup"),
        ({"perf_table": "/nonexistent.json"}, "option perf_table: cannot read"),
        ({"clock": "roofline"}, "option clock: Input should be 'auto', 'measured' or 'analytic'"),
        ({"output_token_limit": 300_000}, "output_token_limit"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, object], message: str) -> None:
    with pytest.raises(SimulatedConfigError, match=message):
        engine(**options)


def test_requests_the_engine_cannot_take_are_refused() -> None:
    e = engine()
    with pytest.raises(EngineError, match="token ids must be in"):
        e.start_prefill("a", [300_000], SamplingParams(max_tokens=1))
    with pytest.raises(EngineError, match="leaves no room"):
        e.start_prefill("a", [1] * 131_072, SamplingParams(max_tokens=1))
    with pytest.raises(EngineError, match="unknown request"):
        e.step({"ghost": SamplingParams(max_tokens=1)})


def test_on_cpu_it_stands_in_for_a_measured_engine(tmp_path: Path) -> None:
    document = {
        "format": FORMAT,
        "prefill": [[1000, 1.0]],
        "decode": {"batch": [1], "context": [100], "seconds": [[0.05]]},
        "worker": render_worker(MeasuredWorker(TANDEM_REFERENCE, 100 * 16384, 16, 64)),
    }
    path = tmp_path / "table.json"
    path.write_text(json.dumps(document))
    cpu = engine(
        accelerator="cpu", perf_table=str(path), tokens_per_block=16, kv_cache_dtype="auto"
    )
    # The table's model: 2 full and 2 window layers of 2 KV heads x 32 dims in float32.
    assert (cpu.config.architecture, cpu.config.kv_dtype) == (TANDEM_REFERENCE, KvDtype.FP32)
    # A block is 16 tokens of both full layers: K and V x 2 heads x 32 x 4 B x 2 x 16 =
    # 16,384 bytes, so the worker's pool is 100 blocks, whatever a GPU would hold.
    assert (cpu.capacity.blocks, cpu.capacity.block_bytes) == (100, 16384)
    # 100 tokens: 112 (7 blocks' worth) in each full layer and each window layer, 448 token
    # slots of 512 bytes: 14 blocks.
    assert compute_sequence_blocks(cpu.config.perf, cpu.capacity, 100) == 14
    assert cpu.config.clock.step_seconds([100], ()) == pytest.approx(0.05)
    # No link rate in the table and no GPU link to fall back on: transfers are free, and
    # the clock says so.
    assert cpu.kv_transfer_delay_s(1000) == 0.0
    assert "KV transfers unpriced" in cpu.config.clock.source
    without_worker = {k: v for k, v in document.items() if k != "worker"}
    path.write_text(json.dumps(without_worker))
    with pytest.raises(SimulatedConfigError, match="measured by `tandem profile`"):
        engine(accelerator="cpu", perf_table=str(path))
