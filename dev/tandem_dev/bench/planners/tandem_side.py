"""Tandem's half of the comparison: ``tandem plan``'s search for a cell, and another
tool's pick replayed in the simulated cluster (the same runs ``tandem plan`` judges by).

Engines as AIConfigurator models them by default, so both price the same worker: the
gpt-oss checkpoint's MXFP4 experts, a BF16 KV cache, TensorRT-LLM's step times from the
measured database. Worker counts may reach 32 per pool (AIConfigurator's own bound).
"""

from __future__ import annotations

import time
from typing import Any

from tandem.capacity.gpus import gpu_for
from tandem.engines.simulated.config import SimulatedOptions
from tandem.sim.metrics import Slo
from tandem.sim.planner import (
    Candidate,
    Evaluation,
    Limits,
    Setup,
    Workload,
    count_requests,
    evaluate,
    generate_arrivals,
    recommend,
)
from tandem.sim.spec_setup import TENSOR_PARALLEL_SIZES
from tandem_dev.bench.planners.cells import Cell

KV_DTYPE = "bf16"  # AIConfigurator's default for gpt-oss (its rows' ``kvcache`` column)
MAX_WORKERS = 32  # per pool
MIN_PREFILL_TOKENS = 2048  # the frontend's default: shorter prompts stay on decode workers


def engine_options(cell: Cell) -> dict[str, object]:
    return {"model": cell.model, "accelerator": cell.profile.value, "kv_cache_dtype": KV_DTYPE}


def build_workload(cell: Cell, max_stall_s: float | None = None) -> Workload:
    slo = Slo(cell.ttft_s, cell.tpot_ms / 1e3)
    return Workload(cell.isl, cell.osl, cell.rate, slo, max_stall_s)


def plan_cell(cell: Cell, max_stall_s: float | None = None) -> dict[str, Any]:
    """``tandem plan`` for the cell: its pick (None when nothing meets) and its cost."""
    options = engine_options(cell)
    node = gpu_for(cell.profile).gpus_per_node
    sizes = tuple(tp for tp in TENSOR_PARALLEL_SIZES if tp <= node)
    limits = Limits(MAX_WORKERS, MAX_WORKERS, 1, 1, sizes)
    started = time.perf_counter()
    result = recommend(
        build_workload(cell, max_stall_s), Setup(options, options, MIN_PREFILL_TOKENS), limits
    )
    return {
        "pick": None if result.chosen is None else describe(result.chosen),
        "reason": result.reason,
        "simulated": len(result.evaluated),
        "tried": {e.candidate.name: e.meets for e in result.evaluated},
        "seconds": time.perf_counter() - started,
        "clock": list(result.clock_sources),
    }


def read_aic_pick(pick: dict[str, Any]) -> Candidate | str:
    """AIConfigurator's pick (its driver's PICK) as a deployment of the simulated engine:
    its workers and TP sizes, its decode batch limit and, aggregated, its step budget; or
    why it has none."""
    if pick.get("dp", 1) != 1 or pick.get("decode_dp", 1) != 1 or pick.get("prefill_dp", 1) != 1:
        return "attention data parallelism: the simulated engine has none"
    if "workers" in pick:  # aggregated
        return Candidate(0, int(pick["workers"]), int(pick["tp"]), int(pick["tp"]),
                         int(pick["ctx_tokens"]), int(pick["bs"]))  # fmt: skip
    return Candidate(
        int(pick["prefill_workers"]), int(pick["decode_workers"]),
        int(pick["prefill_tp"]), int(pick["decode_tp"]), max_batch_size=int(pick["decode_bs"]),
    )  # fmt: skip


def replay_pick(cell: Cell, pick: dict[str, Any]) -> dict[str, Any]:
    """AIConfigurator's pick (:func:`read_aic_pick`) run to the end at the cell's rate."""
    candidate = read_aic_pick(pick)
    if isinstance(candidate, str):
        return {"error": candidate}
    options = engine_options(cell)
    setup = Setup(options, options, MIN_PREFILL_TOKENS)
    workload = build_workload(cell)
    arrivals = generate_arrivals(workload, count_requests(workload), seed=1)
    try:
        evaluation = evaluate(candidate, workload, setup, arrivals, stop_early=False)
    except ValueError as exc:  # the engine refuses the shape (weights or step do not fit)
        return {"error": str(exc).splitlines()[0]}
    return describe(evaluation)


def describe(e: Evaluation) -> dict[str, Any]:
    c = e.candidate
    return {
        "name": c.name,
        "mode": "aggregated" if c.prefill == 0 else "disaggregated",
        "gpus": c.gpus,
        "prefill_workers": c.prefill,
        "prefill_tp": c.prefill_tp,
        "decode_workers": c.decode,
        "decode_tp": c.decode_tp,
        "max_num_tokens": c.max_num_tokens,
        "meets": e.meets,
        "ttft_p90_s": e.ttft.p90,
        "itl_p90_s": e.itl.p90,
        "gap_p90_s": e.longest_gap.p90,
        "tokens_per_s_per_gpu": e.tokens_per_second_per_gpu,
        "tokens_per_s_per_user": e.tokens_per_second_per_user,
        "stopped": e.stopped,
    }


def default_step_tokens() -> int:
    """The simulated engine's step budget when nobody sets one (a prefill chunk)."""
    return SimulatedOptions.model_fields["max_num_tokens"].default  # type: ignore[no-any-return]
