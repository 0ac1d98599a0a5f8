"""A deployment as a local InferenceCluster (``tandem up``): the manifest (pure), starting
and stopping it, and the engines' pacing books read back from the worker logs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tandem.api.validate import load_inference_cluster
from tandem.runtime.launcher import detach, down
from tandem.runtime.state import cluster_dir, read_state
from tandem_dev.bench.goodput.points import Split

MODEL = "gpt-oss-120b"
# Prompts at least this long go to the prefill pool; shorter ones prefill on their
# decode worker (conditional disaggregation).
MIN_PREFILL_TOKENS = 2048

_PACING = re.compile(
    r"pacing: (\d+) steps, modelled ([\d.]+) s, wall ([\d.]+) s, speedup ([\d.e+-]+), "
    r"overrun ([\d.]+) s, gaps ([\d.]+) s"
)


def render_cluster(
    name: str, profile: str, split: Split, speedup: float, max_num_tokens: int | None = None
) -> dict[str, Any]:
    """The InferenceCluster of one deployment: TP1 workers of the simulated engine, with
    ``max_num_tokens`` per step when given (else the engine's default)."""
    options: dict[str, Any] = {"kv_cache_dtype": "fp8", "speedup": speedup}
    if max_num_tokens is not None:
        options["max_num_tokens"] = max_num_tokens
    return {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": f"openai/{MODEL}",
                "servedName": MODEL,
                "maxInputTokens": 32768,
                "maxOutputTokens": 2048,
            },
            "engine": {
                "kind": "simulated",
                "options": options,
            },
            "accelerator": {"profile": profile},
            "frontend": {
                "port": 8000,
                "maxQueuedRequests": 1024,
                "disaggregation": {"minPrefillTokens": MIN_PREFILL_TOKENS},
            },
            "prefill": {
                "replicas": split.prefill,
                "minReplicas": 0,
                "maxReplicas": max(1, split.prefill),
            },
            "decode": {"replicas": split.decode, "minReplicas": 1, "maxReplicas": split.decode},
            "kvTransfer": {"backend": "nixl", "ucxTransports": ["tcp"]},
        },
    }


@contextmanager
def run_cluster(home: Path, name: str, document: dict[str, Any]) -> Iterator[str]:
    """Start it (``tandem up --detach``), yield its endpoint, always stop it."""
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    lines: list[str] = []
    try:
        code = detach(path, load_inference_cluster(path), port=0, progress=lines.append,
                      home=home, timeout_s=300)  # fmt: skip
        if code != 0:
            raise RuntimeError(f"tandem up {name} failed:\n" + "\n".join(lines[-20:]))
        state = read_state(cluster_dir(name, home))
        if state is None:
            raise RuntimeError(f"tandem up {name}: no state written")
        yield state.endpoint
    finally:
        down(name, progress=lambda _: None, home=home)


@dataclass(frozen=True, slots=True)
class Pacing:
    modelled_s: float
    lag_s: float  # overrun + gaps, wall seconds
    speedup: float

    @property
    def lag(self) -> float:
        """Wall time the plumbing added, over the wall time the modelled work needs."""
        need = self.modelled_s / self.speedup
        return self.lag_s / need if need > 0 else 0.0


def read_pacing(home: Path, name: str) -> dict[str, Pacing]:
    """The last pacing line of each worker's log (cumulative since it started)."""
    out = {}
    for log in sorted((cluster_dir(name, home) / "logs").glob("*-*.log")):
        found = _PACING.findall(log.read_text(errors="replace"))
        if found:
            _, modelled, _, speedup, overrun, gaps = found[-1]
            lag = float(overrun) + float(gaps)
            out[log.stem] = Pacing(float(modelled), lag, float(speedup))
    return out
