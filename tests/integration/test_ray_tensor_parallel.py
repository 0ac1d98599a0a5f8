"""A tensor-parallel reference worker launched as a LeaderWorkerSet group launches it,
on this machine (``tandem_dev.ray_group``): two Ray nodes (``tandem.worker.ray_launch``
leader and follower, token authentication on, every port in its block), the worker on
the leader placing its follower rank on the other node through Ray. Its greedy answers
are token for token those of a TP1 worker, and KV moves both ways between it and a TP1
worker (gathered into the whole model's layout, or split across its ranks) to the same
answers."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.engines.base import SamplingParams
from tandem.worker.errors import WorkerCallError
from tandem_dev.ray_group import FOLLOWER_IP, LocalRayGroup

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

ENGINE: dict[str, object] = {
    "num_layers": 2,
    "hidden": 48,
    "num_heads": 6,
    "num_kv_heads": 3,  # split 2 + 1 across the two ranks
    "head_dim": 8,
    "intermediate": 96,
    "num_kv_blocks": 1024,
    "seed": 3,
}
SAMPLING = SamplingParams(max_tokens=10)
LONG = SamplingParams(max_tokens=100_000)  # still streaming when its rank dies
PROMPTS = [list(range(5, 45)), list(range(100, 177)), [7] * 20]  # a 262-token vocabulary


@pytest.fixture
def ray_group() -> Iterator[LocalRayGroup]:
    group = LocalRayGroup()
    yield group
    group.stop()


async def _answers(client: Any) -> list[list[int]]:
    answers = []
    for i, prompt in enumerate(PROMPTS):
        tokens = [
            t async for chunk in client.decode(f"r{i}", prompt, SAMPLING) for t in chunk.token_ids
        ]
        answers.append(tokens)
    return answers


async def test_a_tp2_group_answers_as_one_worker(
    tmp_path: Path, worker_launcher: Any, ray_group: LocalRayGroup
) -> None:
    def args(worker_id: str, tp: int) -> list[str]:
        return [
            "--role=both",
            f"--worker-id={worker_id}",
            f"--engine-options={json.dumps({**ENGINE, 'tensor_parallel_size': tp})}",
            "--kv-backend=tcp",
        ]

    ray_group.start_follower(tmp_path / "follower.log")
    # Its pod address (POD_IP) is the Ray node's; its gRPC and KV ports are on 127.0.0.1,
    # where the TP1 worker reaches them.
    group = await worker_launcher.start(
        "tp2", [*args("tp2", 2), "--advertise-host=127.0.0.1"], log=tmp_path / "tp2.log",
        env=ray_group.env,
        launcher=ray_group.leader_launcher(),
    )  # fmt: skip
    single = await worker_launcher.start(
        "tp1", args("tp1", 1), log=tmp_path / "tp1.log", env=os.environ
    )
    expected = await _answers(single.client)
    assert all(len(tokens) == SAMPLING.max_tokens for tokens in expected)
    assert await _answers(group.client) == expected
    log = (tmp_path / "tp2.log").read_text()
    assert "Ray group of 2 joined" in log
    assert f"tensor-parallel group of 2: followers at {FOLLOWER_IP}:{ray_group.rank_port}" in log
    # TP2 -> TP1: the group prefills, gathers both ranks' heads into the whole layout,
    # and the TP1 worker pulls that KV and decodes the answer it gives alone.
    for i, prompt in enumerate(PROMPTS):
        reply = await group.client.prefill(f"p{i}", prompt, SAMPLING)
        assert reply.kv is not None and reply.kv.nbytes > 0
        chunks = [
            chunk
            async for chunk in single.client.decode(
                f"p{i}", prompt, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
        ]
        assert not chunks[0].prefilled_locally
        assert chunks[0].kv_bytes_transferred == reply.kv.nbytes
        assert [t for chunk in chunks for t in chunk.token_ids] == expected[i]
    # TP1 -> TP2: the group pulls the TP1 worker's KV into its whole layout and splits
    # it across its ranks (the follower's heads over the rank link).
    for i, prompt in enumerate(PROMPTS):
        reply = await single.client.prefill(f"q{i}", prompt, SAMPLING)
        assert reply.kv is not None
        tokens = [
            t
            async for chunk in group.client.decode(
                f"q{i}", prompt, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
            for t in chunk.token_ids
        ]
        assert tokens == expected[i]

    # The follower's pod dies mid-stream: the stream fails with a clean error at once,
    # and the worker leaves (exit 1) so that its group restarts as a whole.
    streamed: list[int] = []
    killed = 0
    with pytest.raises(WorkerCallError, match="engine is lost: tensor-parallel rank 1"):
        async with asyncio.timeout(30):  # nothing hangs
            async for chunk in group.client.decode("long", PROMPTS[0], LONG):
                streamed += chunk.token_ids
                if len(streamed) >= 8 and not killed:
                    killed = ray_group.kill_follower()
    assert killed and 8 <= len(streamed) < LONG.max_tokens
    async with asyncio.timeout(30):
        assert await group.proc.wait() == 1
    assert "the engine is lost: exiting for a restart" in (tmp_path / "tp2.log").read_text()
