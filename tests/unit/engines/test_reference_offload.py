"""KV offload in the reference engine: a prompt pushed out of a small device pool comes
back from the host and disk tiers instead of being recomputed, with the same tokens; a
block damaged on disk is caught, counted and recomputed; a disk that fails mid-run
leaves fewer tiers and every request answered. The engine's KV events say which tier
holds each block, and reach the router's index through the worker's event log and the
wire format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import numpy as np
import pytest

from tandem.engines.base import KvCapacityError, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.offload import OffloadStore, Tier
from tandem.kv.offload.records import HEADER
from tandem.router.kv_index import KvIndex
from tandem.worker.convert import kv_batch_from_pb, kv_batch_to_pb
from tandem.worker.kv_event_log import KvEventLog
from tandem.worker.types import KvEventBatch

from .conftest import generate

TinyConfigFactory = Callable[..., ReferenceModelConfig]
GREEDY = SamplingParams(max_tokens=6)
BLOCK = 8  # the tiny config's kv_block_size
ENTRY_BYTES = 2 * 8 * 2 * 2 * 16 * 4  # tiny config: layers x block x (k, v) x heads x dim x 4


def answer(engine: ReferenceEngine, request_id: str, prompt: list[int]) -> list[int]:
    return generate(engine, request_id, prompt, GREEDY)


def tokens_of(length: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, length).tolist()


def push_out(engine: ReferenceEngine, long: list[int]) -> None:
    """Ask ``long``, then two other prompts that need the whole device pool."""
    answer(engine, "first", long)
    for seed in (11, 12):
        answer(engine, f"other-{seed}", tokens_of(len(long), seed))


def push_out_and_ask_again(engine: ReferenceEngine, long: list[int]) -> list[int]:
    """``push_out``, then ``long`` again; returns the second answer."""
    push_out(engine, long)
    return answer(engine, "again", long)


def offload_config(
    tiny_config: TinyConfigFactory, tmp_path: Path, host_entries: int, **overrides: object
) -> ReferenceModelConfig:
    options: dict[str, object] = {
        "num_kv_blocks": 40,  # 20 blocks of every layer: one 100-token prompt at a time
        "offload_host_bytes": host_entries * ENTRY_BYTES,
        "offload_disk_bytes": 100 * (HEADER.size + ENTRY_BYTES),
        "offload_disk_path": str(tmp_path),
    }
    return tiny_config(**{**options, **overrides})


@pytest.mark.parametrize("window", [0, 24])
@pytest.mark.parametrize(
    ("host_entries", "source"),
    # 64 entries hold every evicted block; 4 only the last ones evicted (the other
    # prompts'), the long prompt went on to disk; 0: no host tier at all.
    [(64, Tier.HOST), (4, Tier.DISK), (0, Tier.DISK)],
)
def test_a_pushed_out_prompt_comes_back_from_the_tiers_with_the_same_tokens(
    tiny_config: TinyConfigFactory, tmp_path: Path, window: int, host_entries: int, source: Tier
) -> None:
    long = tokens_of(100, 1)
    plain = ReferenceEngine(tiny_config(num_kv_blocks=40, sliding_window=window))
    expected = push_out_and_ask_again(plain, long)
    assert plain.stats().prompt_tokens_computed == 4 * len(long)  # evicted, recomputed

    engine = ReferenceEngine(
        offload_config(tiny_config, tmp_path, host_entries, sliding_window=window)
    )
    assert push_out_and_ask_again(engine, long) == expected
    stats = engine.stats()
    full_blocks = (len(long) - 1) // 8
    assert stats.prompt_tokens_onboarded == full_blocks * 8
    assert stats.prompt_tokens_computed == 3 * len(long) + len(long) - full_blocks * 8
    assert stats.offload is not None
    assert stats.offload.onboarded == {source: full_blocks}
    assert not stats.offload.damaged and not stats.offload.disabled
    # Both timed, for the router's tier weights: the blocks' way back, and the prompts.
    assert stats.offload.onboard_seconds[source] > 0
    assert set(stats.offload.onboard_seconds) == {source}
    assert stats.prefill_seconds > 0


def test_a_flipped_byte_on_disk_is_caught_and_the_block_recomputed(
    tiny_config: TinyConfigFactory, tmp_path: Path
) -> None:
    long = tokens_of(100, 1)
    expected = push_out_and_ask_again(ReferenceEngine(tiny_config(num_kv_blocks=40)), long)
    engine = ReferenceEngine(offload_config(tiny_config, tmp_path, host_entries=0))
    push_out(engine, long)
    assert engine.offload is not None and engine.offload.disk is not None
    # One byte of the long prompt's 6th block, in the disk tier's file.
    offset = _slot_of(engine, long, block=5) * (HEADER.size + ENTRY_BYTES) + HEADER.size + 1000
    fd = engine.offload.disk.fd
    os.pwrite(fd, bytes([os.pread(fd, 1, offset)[0] ^ 0x10]), offset)

    assert answer(engine, "again", long) == expected
    stats = engine.stats()
    assert stats.offload is not None
    assert stats.offload.damaged == {Tier.DISK: 1}
    assert stats.prompt_tokens_onboarded == 5 * 8  # blocks 0..4; 5 on are recomputed
    assert stats.prompt_tokens_computed == 3 * len(long) + len(long) - 5 * 8
    # Reading stopped at the damaged block: the ones after it went back unread.
    names = compute_block_names(long, BLOCK)
    assert [engine.offload.index.where(n.block_hash) for n in names[6:12]] == [Tier.DISK] * 6


class GatedReads:
    """Holds every block read from the tiers until ``open`` (on the onboarding thread)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._gate = threading.Event()
        read = OffloadStore.read

        def gated(store: OffloadStore, *args: object, **kwargs: object) -> object:
            assert self._gate.wait(30), "the test never opened the gate"
            return read(store, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(OffloadStore, "read", gated)

    def open(self) -> None:
        self._gate.set()


def test_a_prompt_coming_back_from_the_tiers_does_not_hold_up_the_other_sequences(
    tiny_config: TinyConfigFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a pushed-out prompt's blocks are read back, a decoding sequence gets a token
    every step; the prompt then prefills from what came back, and both answers are those
    each gets alone."""
    long, short = tokens_of(100, 1), tokens_of(10, 5)
    chat = SamplingParams(max_tokens=30)
    plain = ReferenceEngine(tiny_config(num_kv_blocks=40))
    expected_long = push_out_and_ask_again(plain, long)
    expected_short = generate(plain, "short", short, chat)
    engine = ReferenceEngine(offload_config(tiny_config, tmp_path, host_entries=4))
    push_out(engine, long)
    reads = GatedReads(monkeypatch)

    first = engine.prefill("short", short, chat)
    got = {"short": [first.first_token], "again": []}
    engine.start_prefill("again", long, GREEDY)
    for _ in range(5):
        (output,) = engine.step({"short": chat})
        got["short"].append(output.token)
    assert engine.stats().prompt_tokens_onboarded == 0  # still reading
    reads.open()
    decoding = {"short": chat}
    while decoding or not got["again"]:
        # "again" joins the decode rows once the step that finishes its prefill says so.
        for output in engine.step(dict(decoding)):
            got[output.request_id].append(output.token)
            if output.finish_reason is not None:
                decoding.pop(output.request_id, None)
            else:
                decoding[output.request_id] = chat if output.request_id == "short" else GREEDY
    assert got == {"short": expected_short, "again": expected_long}
    stats = engine.stats()
    assert stats.prompt_tokens_onboarded == (len(long) - 1) // BLOCK * BLOCK


def test_a_prompt_released_while_its_blocks_come_back_leaks_nothing_and_keeps_them(
    tiny_config: TinyConfigFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = tokens_of(100, 1)
    expected = push_out_and_ask_again(ReferenceEngine(tiny_config(num_kv_blocks=40)), long)
    engine = ReferenceEngine(offload_config(tiny_config, tmp_path, host_entries=4))
    push_out(engine, long)
    reads = GatedReads(monkeypatch)
    engine.start_prefill("gone", long, GREEDY)
    engine.release("gone")  # the client went away
    reads.open()
    # Steps take the blocks in once read; then every pool block is free again.
    deadline = time.monotonic() + 30
    while engine.stats().kv_blocks_free < engine.stats().kv_blocks_total:
        assert engine.step({}) == []
        assert time.monotonic() < deadline, "blocks still held"
    # What came back stays cached for the next prompt.
    full = (len(long) - 1) // BLOCK * BLOCK
    assert held_by(engine, long) == {Tier.DEVICE: full}
    assert answer(engine, "again", long) == expected
    assert engine.stats().prompt_tokens_computed == 4 * len(long) - full


def _slot_of(engine: ReferenceEngine, prompt: list[int], block: int) -> int:
    from tandem.kv.block_hashes import compute_block_names

    assert engine.offload is not None
    name = compute_block_names(prompt, 8)[block]
    assert engine.offload.index.where(name.block_hash) is Tier.DISK
    return engine.offload._slot[name.block_hash]


DISK_FULL_SCRIPT = """
import json, sys
import numpy as np
from tandem.engines.base import KvCapacityError, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
options = json.loads(sys.argv[1])
engine = ReferenceEngine(ReferenceModelConfig.from_options(options))
answered = 0
for i, seed in enumerate([0, 1, 2, 0, 3, 1, 0, 2]):
    prompt = np.random.default_rng(seed).integers(0, 256, 100).tolist()
    params = SamplingParams(max_tokens=3)
    result = engine.prefill(str(i), prompt, params)
    while result.finish_reason is None and engine.step({str(i): params})[0].finish_reason is None:
        pass
    engine.release(str(i))
    answered += 1
stats = engine.stats()
print(json.dumps({"answered": answered, "disabled": sorted(stats.offload.disabled),
                  "onboarded": stats.prompt_tokens_onboarded}))
"""


def test_a_disk_that_fills_up_mid_run_leaves_the_host_tier_and_loses_no_request(
    tiny_config: TinyConfigFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk runs out after a few blocks: a file-size limit on the process (the kernel
    refuses the write that would pass it, EFBIG, as it would ENOSPC) set in a child
    process, so nothing else in the test run is limited."""
    from tests.unit.engines.conftest import TINY_OPTIONS

    options = {
        **TINY_OPTIONS,
        "num_kv_blocks": 40,
        "offload_host_bytes": 16 * ENTRY_BYTES,
        "offload_disk_bytes": 100 * (HEADER.size + ENTRY_BYTES),
        "offload_disk_path": str(tmp_path),
    }
    limit = 5 * (HEADER.size + ENTRY_BYTES)
    script = (
        "import resource, signal\n"
        # The kernel signals SIGXFSZ before failing the write; ignored, the write fails.
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
        + DISK_FULL_SCRIPT
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["answered"] == 8
    assert report["disabled"] == ["disk"]
    assert done.stderr.count("the disk tier failed") == 1
    assert report["onboarded"] > 0  # the host tier still served prompts asked again


def test_a_prompt_that_does_not_fit_beside_a_running_one_is_refused_cleanly(
    tiny_config: TinyConfigFactory, tmp_path: Path
) -> None:
    """Onboarding pins the prompt's cached prefix and brings back only what the pool has
    room for beside a running sequence; the prompt is then refused as without offload,
    nothing leaks, and once the running sequence is gone it is answered as ever."""
    long = tokens_of(100, 1)
    sibling = long[:32] + tokens_of(68, 2)  # shares the long prompt's first 4 blocks
    pool = {"num_kv_blocks": 48, "sliding_window": 0}  # 24 blocks of every layer
    config = offload_config(tiny_config, tmp_path, host_entries=64, **pool)
    expected = answer(ReferenceEngine(tiny_config(**pool)), "alone", long)
    engine = ReferenceEngine(config)
    answer(engine, "long", long)
    answer(engine, "sibling", sibling)
    engine.prefill("running", tokens_of(100, 3), GREEDY)  # holds 26 of the 48 blocks
    with pytest.raises(KvCapacityError):
        engine.prefill("long-again", long, GREEDY)
    engine.release("running")
    assert answer(engine, "long-again", long) == expected
    stats = engine.stats()
    assert stats.kv_blocks_free == stats.kv_blocks_total
    assert stats.offload is not None
    assert sum(stats.offload.onboarded.values()) == 8  # blocks 4..11 came back, once each


def held_by(engine: ReferenceEngine, prompt: list[int]) -> dict[Tier, int]:
    """Tokens of ``prompt``'s cached prefix per tier, as the engine itself has them."""
    assert engine.cache is not None and engine.offload is not None
    held: Counter[Tier] = Counter()
    for name in compute_block_names(prompt, BLOCK):
        in_device = name.block_hash in engine.cache
        tier = Tier.DEVICE if in_device else engine.offload.index.where(name.block_hash)
        if tier is None:
            break
        held[tier] += BLOCK
    return dict(held)


class Follower:
    """A router's index fed by one subscription, every batch through protobuf."""

    def __init__(self, log: KvEventLog) -> None:
        self.index = KvIndex()
        self._stream: AsyncGenerator[KvEventBatch, None] = log.subscribe()

    async def catch_up(self, batches: int) -> None:
        for _ in range(batches):
            batch = kv_batch_from_pb(kv_batch_to_pb(await anext(self._stream)))
            self.index.apply("w:1", batch)

    async def close(self) -> None:
        await self._stream.aclose()


@pytest.mark.parametrize(
    ("host_entries", "lower"),
    # 64 host entries keep every evicted block; 4 pass the long prompt's on to disk.
    [(64, Tier.HOST), (4, Tier.DISK)],
)
async def test_the_router_sees_which_tier_holds_each_block(
    tiny_config: TinyConfigFactory, tmp_path: Path, host_entries: int, lower: Tier
) -> None:
    engine = ReferenceEngine(offload_config(tiny_config, tmp_path, host_entries))
    log = KvEventLog("w", "i1", BLOCK)
    live = Follower(log)
    await live.catch_up(1)  # the (empty) snapshot
    published = 0

    def ask(request_id: str, prompt: list[int]) -> None:
        nonlocal published
        engine.prefill(request_id, prompt, GREEDY)
        engine.release(request_id)
        events = engine.drain_kv_events()
        log.publish(events)
        published += 1 if events else 0

    long = tokens_of(100, 1)
    ask("first", long)
    for seed in (11, 12):  # push the long prompt out of the device pool
        ask(f"other-{seed}", tokens_of(100, seed))
    pushed_out = held_by(engine, long)
    assert Tier.DEVICE not in pushed_out and pushed_out.get(lower, 0) > 0
    await live.catch_up(published)
    late = Follower(log)
    await late.catch_up(1)
    for follower in (live, late):
        assert follower.index.cached_by_tier(long) == {"w:1": pushed_out}

    published = 0
    ask("again", long)  # onboarded back into the device pool
    back = held_by(engine, long)
    assert back.get(Tier.DEVICE, 0) > 0
    await live.catch_up(published)
    late_again = Follower(log)
    await late_again.catch_up(1)
    for follower in (live, late_again):
        assert follower.index.cached_by_tier(long) == {"w:1": back}
    for follower in (live, late, late_again):
        await follower.close()
