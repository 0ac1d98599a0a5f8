"""``tandem plan --output json``: a recommendation as a document programs read (pure).

The document's shape is :data:`PLAN_SCHEMA` (JSON Schema, draft 2020-12), which
docs/gpu-deployment.md describes field by field. Times are in seconds, rates per second;
a deployment is the chosen one or a runner-up the search simulated.
"""

from __future__ import annotations

from typing import Any

from tandem.engines.simulated.config import SimulatedOptions
from tandem.sim.metrics import Percentiles
from tandem.sim.planner import Evaluation, Recommendation, Setup

FORMAT = "tandem.plan/v1"

_PERCENTILES = {
    "type": "object",
    "additionalProperties": False,
    "required": ["p50", "p90", "p99"],
    "properties": {q: {"type": ["number", "null"]} for q in ("p50", "p90", "p99")},
}
_POOL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["workers", "tensorParallelSize", "maxBatchSize", "maxNumTokens"],
    "properties": {
        "workers": {"type": "integer", "minimum": 1},
        "tensorParallelSize": {"type": "integer", "minimum": 1},
        "maxBatchSize": {"type": "integer", "minimum": 1},
        "maxNumTokens": {"type": "integer", "minimum": 1},
    },
}
_DEPLOYMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "mode", "gpus", "prefill", "decode", "meetsSlo", "ttftSeconds", "itlSeconds",
        "longestGapSeconds", "tokensPerSecondPerGpu", "tokensPerSecondPerUser",
        "requestsJudged", "stoppedEarly",
    ],
    "properties": {
        "mode": {"enum": ["aggregated", "disaggregated"]},
        "gpus": {"type": "integer", "minimum": 1},
        # Aggregated deployments have no prefill pool: their decode workers prefill.
        "prefill": {"oneOf": [{"type": "null"}, _POOL]},
        "decode": _POOL,
        "meetsSlo": {"type": "boolean"},
        "ttftSeconds": _PERCENTILES,
        "itlSeconds": _PERCENTILES,
        "longestGapSeconds": _PERCENTILES,
        "tokensPerSecondPerGpu": {"type": "number", "minimum": 0},
        "tokensPerSecondPerUser": {"type": "number", "minimum": 0},
        "requestsJudged": {"type": "integer", "minimum": 0},
        # Why the run stopped before its end (the SLO was missed for sure); the figures
        # then cover the requests finished by then. Null for a complete run.
        "stoppedEarly": {"type": ["string", "null"]},
    },
}  # fmt: skip
PLAN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "workload", "clockSources", "recommended", "reason", "runnersUp"],
    "properties": {
        "format": {"const": FORMAT},
        "workload": {
            "type": "object",
            "additionalProperties": False,
            "required": ["isl", "osl", "islP90", "oslP90", "requestsPerSecond", "slo"],
            "properties": {
                "isl": {"type": "integer", "minimum": 1},
                "osl": {"type": "integer", "minimum": 1},
                "islP90": {"type": ["integer", "null"], "minimum": 1},
                "oslP90": {"type": ["integer", "null"], "minimum": 1},
                "requestsPerSecond": {"type": "number", "exclusiveMinimum": 0},
                "slo": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["ttftP90Seconds", "itlP90Seconds", "longestGapP90Seconds"],
                    "properties": {
                        "ttftP90Seconds": {"type": "number"},
                        "itlP90Seconds": {"type": "number"},
                        "longestGapP90Seconds": {"type": ["number", "null"]},
                    },
                },
            },
        },
        # Where the step times came from (tandem.perf.clock), one entry per distinct clock.
        "clockSources": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "recommended": {"oneOf": [{"type": "null"}, _DEPLOYMENT]},
        # Why nothing is recommended; null when something is.
        "reason": {"type": ["string", "null"]},
        # Every other deployment simulated, fewest GPUs first.
        "runnersUp": {"type": "array", "items": _DEPLOYMENT},
    },
}


def render_plan_document(result: Recommendation, setup: Setup) -> dict[str, Any]:
    workload = result.workload
    chosen = result.chosen
    others = [e for e in result.evaluated if e is not chosen]
    others.sort(key=lambda e: (e.candidate.gpus, not e.meets, e.itl.p90))
    return {
        "format": FORMAT,
        "workload": {
            "isl": workload.isl,
            "osl": workload.osl,
            "islP90": workload.isl_p90,
            "oslP90": workload.osl_p90,
            "requestsPerSecond": workload.rate,
            "slo": {
                "ttftP90Seconds": workload.slo.ttft_p90_s,
                "itlP90Seconds": workload.slo.itl_p90_s,
                "longestGapP90Seconds": workload.max_stall_s,
            },
        },
        "clockSources": list(result.clock_sources),
        "recommended": None if chosen is None else _deployment(chosen, setup),
        "reason": result.reason,
        "runnersUp": [_deployment(e, setup) for e in others],
    }


def _deployment(evaluation: Evaluation, setup: Setup) -> dict[str, Any]:
    c = evaluation.candidate
    shaped = setup.shaped(c.prefill_tp, c.decode_tp, c.max_num_tokens)
    prefill = SimulatedOptions.model_validate(dict(shaped.prefill_options))
    decode = SimulatedOptions.model_validate(dict(shaped.decode_options))
    return {
        "mode": "aggregated" if c.prefill == 0 else "disaggregated",
        "gpus": c.gpus,
        "prefill": None if c.prefill == 0 else _pool(c.prefill, c.prefill_tp, prefill),
        "decode": _pool(c.decode, c.decode_tp, decode),
        "meetsSlo": evaluation.meets,
        "ttftSeconds": _percentiles(evaluation.ttft),
        "itlSeconds": _percentiles(evaluation.itl),
        "longestGapSeconds": _percentiles(evaluation.longest_gap),
        "tokensPerSecondPerGpu": evaluation.tokens_per_second_per_gpu,
        "tokensPerSecondPerUser": evaluation.tokens_per_second_per_user,
        "requestsJudged": evaluation.requests,
        "stoppedEarly": evaluation.stopped,
    }


def _pool(workers: int, tensor_parallel_size: int, options: SimulatedOptions) -> dict[str, int]:
    return {
        "workers": workers,
        "tensorParallelSize": tensor_parallel_size,
        "maxBatchSize": options.max_batch_size,
        "maxNumTokens": options.max_num_tokens,
    }


def _percentiles(p: Percentiles) -> dict[str, float | None]:
    """JSON has no infinity: a deployment that finished nothing has no percentiles."""
    return {
        name: (value if value != float("inf") else None)
        for name, value in (("p50", p.p50), ("p90", p.p90), ("p99", p.p99))
    }
