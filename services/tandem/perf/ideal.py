"""The rate-matched ideal: disaggregated serving with exactly as much prefill as decode
needs, GPUs counted fractionally (TensorRT-LLM's disaggregation study draws this curve
as the bound its measured deployments approach).

A decode worker with ``b`` sequences steps in ``t(b)`` at the mean context of a request
(prompt + half the answer): every user gets ``1 / t(b)`` tokens per second and the worker
finishes ``b / (osl x t(b))`` requests per second, each of which cost a prefill worker
``P(isl)`` seconds (the prompt alone, in chunks). So one decode worker needs
``b x P(isl) / (osl x t(b))`` prefill workers, and

    tokens/s/GPU = (b / t(b)) / (decode GPUs + prefill workers x prefill GPUs).

``b`` runs up to what the decode worker's KV pool holds and its batch limit. KV transfer
overlaps with other work and costs no GPU time here; an aggregated worker would do the
same work with the prefill chunks inside its decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.perf.clock import StepClock
from tandem.perf.model import KvCapacity, compute_prefill_seconds, compute_sequence_blocks


@dataclass(frozen=True, slots=True)
class IdealPoint:
    batch: int  # sequences per decode worker
    step_seconds: float  # decode step = time per output token
    prefill_workers_per_decode_worker: float
    tokens_per_second_per_gpu: float

    @property
    def tokens_per_second_per_user(self) -> float:
        return 1.0 / self.step_seconds


def compute_rate_matched_curve(
    prefill: StepClock,
    decode: StepClock,
    decode_capacity: KvCapacity,
    *,
    isl: int,
    osl: int,
    chunk_tokens: int = 8192,
    max_batch: int = 256,
) -> list[IdealPoint]:
    """One point per decode batch size, 1 up to what fits."""
    prefill_s = compute_prefill_seconds(prefill, isl, chunk_tokens)
    sequence_blocks = compute_sequence_blocks(decode.perf, decode_capacity, isl + osl)
    fits = decode_capacity.blocks // sequence_blocks
    context = isl + osl // 2
    points = []
    for batch in range(1, min(max_batch, fits) + 1):
        step = decode.step_seconds([context] * batch, ())
        requests_per_s = batch / (osl * step)
        prefill_workers = requests_per_s * prefill_s
        gpus = (
            decode.perf.tensor_parallel_size + prefill_workers * prefill.perf.tensor_parallel_size
        )
        points.append(IdealPoint(batch, step, prefill_workers, batch / step / gpus))
    return points


def find_best_within(points: list[IdealPoint], max_step_seconds: float) -> IdealPoint | None:
    """The ideal point with the most tokens/s/GPU whose time per token is within a
    target (an ITL SLO); None when even one sequence per worker is too slow."""
    meeting = [p for p in points if p.step_seconds <= max_step_seconds]
    return max(meeting, key=lambda p: p.tokens_per_second_per_gpu, default=None)
