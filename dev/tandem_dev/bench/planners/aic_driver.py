"""Drive AIConfigurator 0.12.0 in-process for the planner benchmark.

Run it with AIConfigurator's own interpreter (this file imports only the standard library
and aiconfigurator, so it works without our project installed)::

    .bench/aiconfigurator/bin/python dev/tandem_dev/bench/planners/aic_driver.py REQ RES

REQ holds ``recommend`` items (fewest GPUs for a request rate under TTFT/TPOT, aggregated
and disaggregated) and ``estimate`` items (AIConfigurator's estimator judging a fixed
deployment at a request rate). One process answers all of them so that the perf database
is loaded once. RES is rewritten atomically after every item; ids already in RES are
skipped, so an interrupted run resumes where it stopped.

Every call pins ``database_mode="SILICON"``: only measured kernel data, no empirical
fill-in. ``cli recommend`` alone defaults to HYBRID (``default`` and ``estimate`` default to
SILICON), and HYBRID adds configs with no measurement behind them (e.g. moe_tp=2 for
gpt-oss), so pinning keeps both tools on the same measured data. All other settings are
AIConfigurator's defaults.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

# AIConfigurator logs to stdout (its handler is bound to sys.stdout) and warns at import
# that the package moves to ``aisimulate``: silence both before importing it.
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)

from aiconfigurator.cli.api import cli_estimate, cli_recommend  # noqa: E402
from aiconfigurator.cli.main import build_default_tasks  # noqa: E402
from aiconfigurator.sdk.perf_database import get_latest_database_version  # noqa: E402
from aiconfigurator.sdk.picking import (  # noqa: E402
    _RATE_MATCHING_PREFILL_DEGRADATION_FACTOR as PREFILL_DERATE,
)
from aiconfigurator.sdk.sweep import (  # noqa: E402
    _DEFAULT_AGG_BATCH_SCHEDULE,
    _DEFAULT_DECODE_BATCH_SCHEDULE,
)

DATABASE_MODE = "SILICON"
BACKEND = "trtllm"  # AIConfigurator's default backend
TOP_N = 5
MODES = ("agg", "disagg")
# The batch sizes AIConfigurator's own sweeps try: agg up to its max_batch_size of 512
# (sdk/pareto_analysis.py), decode up to decode_max_batch_size 512 (sdk/task_v2.py).
AGG_BATCHES = tuple(b for b in _DEFAULT_AGG_BATCH_SCHEDULE if b <= 512)
DECODE_BATCHES = tuple(_DEFAULT_DECODE_BATCH_SCHEDULE)

Json = dict[str, Any]
# An estimate entry's numeric/descriptive fields (null when the estimator fails).
ESTIMATE_FIELDS = (
    "batch",
    "ttft_ms",
    "tpot_ms",
    "seq_per_s",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ctx_tokens_used",
    "kvcache",
    "moe",
    "note",
)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def num(x: Any) -> float:
    """A numpy/pandas scalar as a JSON float, at AIConfigurator's precision."""
    return round(float(x), 3)


# --- recommend -------------------------------------------------------------------------


def pick_figures(row: Mapping[str, Any]) -> Json:
    """What an aggregated and a disaggregated row report alike."""
    return {
        "gpus": int(row["total_gpus_needed"]),
        "replicas": int(row["replicas_needed"]),
        "ttft_ms": num(row["ttft"]),
        "tpot_ms": num(row["tpot"]),
        "tokens_per_s_per_gpu": num(row["tokens/s/gpu"]),
        "tokens_per_s_per_user": num(row["tokens/s/user"]),
        "seq_per_s": num(row["seq/s"]),
    }


def agg_pick(row: Mapping[str, Any]) -> Json:
    return {
        **pick_figures(row),
        "parallel": str(row["parallel"]),
        "workers": int(row["replicas_needed"]),
        "tp": int(row["tp"]),
        "dp": int(row["dp"]),
        "moe_ep": int(row["moe_ep"]),
        "bs": int(row["bs"]),
        "ctx_tokens": int(row["ctx_tokens"]),
        "kvcache": str(row["kvcache"]),
        "moe": str(row["moe"]),
    }


def disagg_pick(row: Mapping[str, Any]) -> Json:
    replicas = int(row["replicas_needed"])
    p_workers, d_workers = int(row["(p)workers"]), int(row["(d)workers"])

    def both(col: str) -> str:  # the prefill and decode quant, once if they agree
        p, d = str(row[f"(p){col}"]), str(row[f"(d){col}"])
        return p if p == d else f"p:{p}/d:{d}"

    return {
        **pick_figures(row),
        # one replica's shape: workers x per-worker parallelism
        "parallel": f"{p_workers}x{row['(p)parallel']} + {d_workers}x{row['(d)parallel']}",
        "prefill_workers": p_workers * replicas,
        "prefill_tp": int(row["(p)tp"]),
        "prefill_dp": int(row["(p)dp"]),
        "decode_workers": d_workers * replicas,
        "decode_tp": int(row["(d)tp"]),
        "decode_dp": int(row["(d)dp"]),
        "decode_bs": int(row["(d)bs"]),
        "kvcache": both("kvcache"),
        "moe": both("moe"),
    }


def first_meeting(df: Any, mode: str, ttft_ms: float, tpot_ms: float) -> Json | None:
    """The first top-N row that meets both targets. When no sweep point meets TPOT,
    recommend silently returns the closest rows instead (even with strict_sla), so each
    row is checked here; TTFT is already enforced by the sweep, checked for safety."""
    if df is None:
        return None
    for _, row in df.iterrows():
        if float(row["tpot"]) <= tpot_ms and float(row["ttft"]) <= ttft_ms:
            return agg_pick(row) if mode == "agg" else disagg_pick(row)
    return None


def frontier(df: Any) -> list[list[float]]:
    """(tokens/s/user, tokens/s/gpu) of every frontier row, by tokens/s/user. The
    per-replica tokens/s/gpu, not the cluster column (equal in recommend anyway)."""
    if df is None or df.empty:
        return []
    return sorted(
        [num(x), num(y)] for x, y in zip(df["tokens/s/user"], df["tokens/s/gpu"], strict=True)
    )


def recommend(item: Json) -> Json:
    start = time.perf_counter()
    try:
        res = cli_recommend(
            model_path=item["model"],
            system=item["system"],
            database_mode=DATABASE_MODE,
            target_request_rate=float(item["rate"]),
            isl=int(item["isl"]),
            osl=int(item["osl"]),
            ttft=float(item["ttft_ms"]),
            tpot=float(item["tpot_ms"]),
            top_n=TOP_N,
        )
    except Exception as exc:  # NoFeasibleConfigError (nothing meets TTFT) or anything else
        return {
            "agg": None,
            "disagg": None,
            "chosen": None,
            "error": first_line(exc),
            "pareto": {mode: [] for mode in MODES},
            "seconds": round(time.perf_counter() - start, 2),
        }
    picks = {
        mode: first_meeting(
            res.best_configs.get(mode), mode, float(item["ttft_ms"]), float(item["tpot_ms"])
        )
        for mode in MODES
    }
    # AIConfigurator's res.chosen_exp maximises 1/total_gpus_needed of each mode's rank-1
    # row, so it agrees with this on the GPU count whenever both modes meet the SLO; on a
    # GPU tie it keeps whichever mode's thread finished first (recommend runs agg and
    # disagg in a thread pool), so the tie is broken here by its own secondary key,
    # tokens/s/gpu. It may also choose a mode whose rows all miss TPOT; this never does.
    met = [mode for mode in MODES if picks[mode] is not None]
    chosen = min(
        met,
        key=lambda m: (_of(picks[m])["gpus"], -_of(picks[m])["tokens_per_s_per_gpu"]),
        default=None,
    )
    return {
        **picks,
        "chosen": chosen,
        "error": None,
        "pareto": {mode: frontier(res.pareto_fronts.get(mode)) for mode in MODES},
        "seconds": round(time.perf_counter() - start, 2),
    }


# --- estimate --------------------------------------------------------------------------


class BatchTooLarge(Exception):
    """The batch does not fit: weights + activations + KV cache exceed GPU memory."""


@dataclass(frozen=True, slots=True)
class Point:
    batch: int
    ttft_ms: float
    tpot_ms: float
    seq_per_s: float  # the whole deployment
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ctx_tokens: int | None = None  # agg only
    prefill_cap: float | None = None  # disagg: the most req/s the prefill pool passes on


def smallest_batch(
    batches: tuple[int, ...], probe: Callable[[int], Point], rate: float
) -> tuple[Point, bool]:
    """The smallest batch whose throughput carries the rate, and True; or, when none
    does, the largest batch that fits, and False.

    AIConfigurator's estimate has no request-rate input: it models a saturated worker at
    concurrency = batch. So the deployment "at a rate" is taken at the smallest batch
    that carries the rate, as recommend itself sizes replicas (ceil(R / seq/s)).

    The batches are scanned in order rather than bisected: seq/s is not monotonic in the
    batch everywhere (steps in the measured kernel data; gpt-oss-20b on h200_sxm, decode
    TP2: 21.2 req/s at batch 248, 23.7 at 256, 20.1 at 320), so a binary search can skip
    the smallest batch (at 22 req/s it answered 384, TPOT 15.6 ms, for 256, TPOT 9.7 ms).
    A scan costs under 2 s (about 10-20 ms an estimate, see db_version). It stops at the
    first batch that does not fit (OOM, or a KV cache too small for it): memory only
    grows with the batch. If batch 1 does not fit, that BatchTooLarge propagates.
    """
    largest: Point | None = None
    for bs in batches:
        try:
            point = probe(bs)
        except BatchTooLarge:
            if largest is None:
                raise
            break
        if point.seq_per_s >= rate:
            return point, True
        largest = point
    assert largest is not None
    return largest, False


@cache
def db_version(system: str) -> str | None:
    """The perf-database version estimate uses by default (the latest for the backend),
    resolved once. Left to itself, estimate re-resolves it on every call by parsing every
    system's YAML metadata: about 0.8 s of each 0.8 s call; passed in, a call takes
    10-20 ms and gives identical results."""
    found = get_latest_database_version(system=system, backend=BACKEND)
    return None if found is None else str(found)


def _of(pick: Json | None) -> Json:
    assert pick is not None  # only met modes are ranked
    return pick


@cache
def sweep_quant(model: str, system: str) -> tuple[str, str]:
    """The KV-cache dtype and MoE quant AIConfigurator's sweep (recommend/default) uses
    for this model on this system, as its task resolves them. ``estimate`` does not apply
    the same defaults: on Blackwell the sweep promotes gpt-oss MoE to w4a8_mxfp4_mxfp8
    while estimate keeps the checkpoint's w4a16_mxfp4 (about 2x the TPOT), so both are
    passed explicitly. For gpt-oss: bfloat16 KV everywhere; w4a8_mxfp4_mxfp8 on
    gb200/b200_sxm, w4a16_mxfp4 (the default) on h200_sxm."""
    task = build_default_tasks(
        model_path=model,
        total_gpus=8,
        system=system,
        backend=BACKEND,
        database_mode=DATABASE_MODE,
        serving_mode="agg",
    )["agg"]
    return task.kvcache_quant_mode.name, task.moe_quant_mode.name


def run_estimate(item: Json, **config: Any) -> Any:
    """One ``cli_estimate`` call (SILICON) on the item's model, system and workload.
    estimate raises RuntimeError("OOM: ...") for a batch that does not fit: that is a size
    limit for the search; anything else (missing silicon data, say) is an error."""
    try:
        return cli_estimate(
            item["model"],
            item["system"],
            backend_name=BACKEND,
            backend_version=db_version(item["system"]),
            database_mode=DATABASE_MODE,
            isl=int(item["isl"]),
            osl=int(item["osl"]),
            **config,
        )
    except RuntimeError as exc:
        if str(exc).startswith("OOM"):
            raise BatchTooLarge(first_line(exc)) from exc
        raise


def agg_probe(item: Json, dep: Json, quant: Json) -> Callable[[int], Point]:
    """W identical workers of TP t (attention DP 1, pure expert parallel moe_ep = t, since
    the silicon MoE data covers only moe_tp = 1); the estimate models one worker."""
    workers, tp, isl = int(dep["workers"]), int(dep["tp"]), int(item["isl"])
    budget = dep.get("max_num_tokens")

    def probe(bs: int) -> Point:
        # ctx_tokens is the per-step context budget. AIConfigurator's agg model handles a
        # budget below ISL as chunked prefill (TTFT counts ceil(ISL / ctx_tokens) steps:
        # base_backend.run_agg), so the deployment's max_num_tokens is used. It does fill
        # every mixed step with ctx_tokens of context, though, so a budget above what the
        # batch can hold is capped as the sweep caps it (ctx_tokens <= (bs - 1) * ISL,
        # ISL at bs 1): a step cannot prefill more than the waiting requests hold.
        ctx = isl if budget is None else min(int(budget), max(bs - 1, 1) * isl)
        est = run_estimate(
            item,
            mode="agg",
            batch_size=bs,
            ctx_tokens=ctx,
            tp_size=tp,
            moe_tp_size=1,
            moe_ep_size=tp,
            **quant,
        )
        if est.kv_cache_warning:  # the sweep drops these points (kv_cache_oom) too
            raise BatchTooLarge(est.kv_cache_warning)
        return Point(
            batch=bs,
            ttft_ms=num(est.ttft),
            tpot_ms=num(est.tpot),
            seq_per_s=num(workers * est.seq_per_second),
            tokens_per_s_per_gpu=num(est.tokens_per_second_per_gpu),
            tokens_per_s_per_user=num(est.tokens_per_second_per_user),
            ctx_tokens=ctx,
        )

    return probe


def disagg_probe(item: Json, dep: Json, quant: Json) -> Callable[[int], Point]:
    """P prefill workers of TP a at batch 1 (as the sweep fixes it) and D decode workers
    of TP b, both pure expert parallel; the batch searched is the per-worker decode batch.

    The disagg estimate already models the whole deployment: its seq/s is
    min(P * prefill seq/s * 0.9, D * decode seq/s * 0.92) (rate-matching derates,
    sdk/picking._build_disagg_summary_dict), and a KV cache too small for the decode
    batch is raised as OOM (inference_session.run_disagg)."""
    p_workers, p_tp = int(dep["prefill_workers"]), int(dep["prefill_tp"])
    d_workers, d_tp = int(dep["decode_workers"]), int(dep["decode_tp"])

    def probe(bs: int) -> Point:
        raw = run_estimate(
            item,
            mode="disagg",
            prefill_tp_size=p_tp,
            prefill_moe_tp_size=1,
            prefill_moe_ep_size=p_tp,
            prefill_batch_size=1,
            prefill_num_workers=p_workers,
            decode_tp_size=d_tp,
            decode_moe_tp_size=1,
            decode_moe_ep_size=d_tp,
            decode_batch_size=bs,
            decode_num_workers=d_workers,
            **quant,
        ).raw
        return Point(
            batch=bs,
            ttft_ms=num(raw["ttft"]),
            tpot_ms=num(raw["tpot"]),
            seq_per_s=num(raw["seq/s"]),
            tokens_per_s_per_gpu=num(raw["tokens/s/gpu"]),
            tokens_per_s_per_user=num(raw["tokens/s/user"]),
            prefill_cap=num(raw["(p)seq/s/worker"] * p_workers * PREFILL_DERATE),
        )

    return probe


def estimate(item: Json) -> Json:
    start = time.perf_counter()
    dep, rate = item["deployment"], float(item["rate"])
    try:
        kvcache, moe = sweep_quant(item["model"], item["system"])
        quant = {"kvcache_quant_mode": kvcache, "moe_quant_mode": moe}
        if dep["mode"] == "agg":
            point, reaches = smallest_batch(AGG_BATCHES, agg_probe(item, dep, quant), rate)
        elif dep["mode"] == "disagg":
            point, reaches = smallest_batch(DECODE_BATCHES, disagg_probe(item, dep, quant), rate)
        else:
            raise ValueError(f"unknown deployment mode {dep['mode']!r}")
    except Exception as exc:  # missing silicon data, OOM at batch 1, a bad request
        return {
            **dict.fromkeys(ESTIMATE_FIELDS),
            "meets": False,
            "reaches_rate": False,
            "error": first_line(exc),
            "seconds": round(time.perf_counter() - start, 2),
        }
    notes = []
    if dep["mode"] == "agg":
        budget = dep.get("max_num_tokens")
        if budget is None:
            notes.append("no max_num_tokens: ctx_tokens = ISL (estimate's default)")
        elif int(budget) < int(item["isl"]):
            notes.append("ctx_tokens = max_num_tokens < ISL: prefill modelled in chunks")
        elif point.ctx_tokens == int(budget):
            notes.append("ctx_tokens = max_num_tokens")
        else:
            notes.append(f"ctx_tokens = max_num_tokens {budget} capped to (bs-1)*ISL, as the sweep")
    elif not reaches and point.prefill_cap is not None and point.prefill_cap < rate:
        notes.append(f"prefill-limited: the prefill pool passes at most {point.prefill_cap} req/s")
    if not reaches:
        notes.append(f"no batch reaches {rate:g} req/s: largest fitting batch reported")
    meets = (
        reaches
        and point.ttft_ms <= float(item["ttft_ms"])
        and point.tpot_ms <= float(item["tpot_ms"])
    )
    return {
        "batch": point.batch,
        "ttft_ms": point.ttft_ms,
        "tpot_ms": point.tpot_ms,
        "seq_per_s": point.seq_per_s,
        "tokens_per_s_per_gpu": point.tokens_per_s_per_gpu,
        "tokens_per_s_per_user": point.tokens_per_s_per_user,
        "meets": meets,
        "reaches_rate": reaches,
        "ctx_tokens_used": point.ctx_tokens,
        "kvcache": kvcache,
        "moe": moe,
        "note": "; ".join(notes) or None,
        "error": None,
        "seconds": round(time.perf_counter() - start, 2),
    }


# --- driver ----------------------------------------------------------------------------


def write_atomic(path: Path, data: Json) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2])
    previous = json.loads(out.read_text()) if out.exists() else {}
    result: Json = {
        "aiconfigurator": version("aiconfigurator"),
        "database_mode": DATABASE_MODE,
        "recommend": previous.get("recommend", {}),
        "estimate": previous.get("estimate", {}),
    }
    jobs: tuple[tuple[str, Callable[[Json], Json]], ...] = (
        ("recommend", recommend),
        ("estimate", estimate),
    )
    for kind, run in jobs:
        items = request.get(kind, [])
        for n, item in enumerate(items, 1):
            if item["id"] in result[kind]:
                continue
            entry = run(item)
            result[kind][item["id"]] = entry
            write_atomic(out, result)
            status = entry["error"] or "ok"
            print(
                f"[{kind} {n}/{len(items)}] {item['id']}: {entry['seconds']} s, {status}",
                file=sys.stderr,
            )
    write_atomic(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
