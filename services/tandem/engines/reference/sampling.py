"""Token sampling that any process reproduces: the random draw for the token at
position p depends only on (seed, p), never on process, batch or call history."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from tandem.engines.base import EngineError, SamplingParams

_SEED_MODULUS = 2**64


def derive_seed(request_id: str) -> int:
    """Seed for requests that bring none: stable across processes, so the prefill and
    decode sides of one request still agree."""
    return int.from_bytes(hashlib.sha256(request_id.encode()).digest()[:8], "big")


def check_sampling(params: SamplingParams) -> None:
    if params.max_tokens < 1:
        raise EngineError(f"max_tokens must be >= 1, got {params.max_tokens}")
    if not params.temperature >= 0.0:
        raise EngineError(f"temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise EngineError(f"top_p must be in (0, 1], got {params.top_p}")


def sample_token(
    logits: npt.NDArray[np.float32], params: SamplingParams, seed: int, position: int
) -> int:
    """Greedy (lowest id wins ties) at temperature 0, else temperature + nucleus."""
    if params.temperature == 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    sorted_probs = probs[order]
    cumulative = np.cumsum(sorted_probs)
    # Smallest prefix whose mass reaches top_p (always at least one token).
    keep = int(np.searchsorted(cumulative, params.top_p * cumulative[-1])) + 1
    kept = cumulative[: min(keep, len(order))]
    rng = np.random.default_rng((seed % _SEED_MODULUS, position))
    draw = rng.random() * kept[-1]
    index = min(int(np.searchsorted(kept, draw, side="right")), len(kept) - 1)
    return int(order[index])
