"""What the chat benchmarks on SmolLM2 (``kv_routing``, ``kv_offload``) share: a
cluster's ``tandem up`` plan written out, one streamed chat completion through the
official ``openai`` client, and the workers' prompt-token counters."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from tandem.api.v1alpha1 import InferenceCluster
from tandem.devcluster.ports import allocate_ports
from tandem.runtime.plan import LocalPlan, plan_local
from tandem.security import issue, write_identities
from tandem.security.credentials import utc_now
from tandem.security.pki import Issued
from tandem_dev.bench.chat_workload import add_counts, sum_samples

SERVED = "smollm2"


def write_plan(
    cluster: InferenceCluster,
    state_dir: Path,
    worker_ports: Sequence[int],
    issued: Issued | None = None,
) -> LocalPlan:
    """``tandem up``'s plan for ``cluster`` on ``worker_ports``; its documents and
    credentials written, as the supervisor writes them on start. ``issued``: credentials
    to share with other plans whose frontends reach the same workers (fresh if None)."""
    plan = plan_local(
        cluster,
        state_dir=state_dir,
        frontend_port=allocate_ports(1)[0],
        worker_ports=worker_ports,
        python=sys.executable,
    )
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    for path, text in plan.documents.items():
        path.write_text(text)
    write_identities(plan.credentials_dir, issued or issue(plan.cluster, utc_now()))
    return plan


def scrape(urls: Sequence[str]) -> list[str]:
    texts = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            texts.append(response.read().decode())
    return texts


def diff_counts(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: v - b.get(k, 0.0) for k, v in a.items()}


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    """The workers' prompt-token counters: by source (computed / cache / offload), and
    computed by worker role; the KV blocks onboarded from each offload tier; and the
    seconds spent computing prompt tokens ("computed") and onboarding from each tier."""

    by_source: dict[str, float]
    computed_by_role: dict[str, float]
    onboarded_by_tier: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def read(cls, workers: Sequence[tuple[str, str]]) -> WorkerCounts:
        """``workers``: (role, metrics URL) of each worker."""
        texts = scrape([url for _, url in workers])
        sources = [sum_samples(t, "tandem_worker_prompt_tokens_total", "source") for t in texts]
        by_role = add_counts(
            [{role: c.get("computed", 0.0)} for (role, _), c in zip(workers, sources, strict=True)]
        )
        onboarded = [
            sum_samples(t, "tandem_worker_kv_offload_onboarded_blocks_total", "tier") for t in texts
        ]
        seconds = [
            sum_samples(t, "tandem_worker_kv_offload_onboard_seconds_total", "tier")
            | {"computed": sum(sum_samples(t, "tandem_worker_prefill_seconds_total").values())}
            for t in texts
        ]
        return cls(add_counts(sources), by_role, add_counts(onboarded), add_counts(seconds))

    def minus(self, earlier: WorkerCounts) -> WorkerCounts:
        return WorkerCounts(
            diff_counts(self.by_source, earlier.by_source),
            diff_counts(self.computed_by_role, earlier.computed_by_role),
            diff_counts(self.onboarded_by_tier, earlier.onboarded_by_tier),
            diff_counts(self.seconds, earlier.seconds),
        )


async def ask(
    client: AsyncOpenAI, messages: list[ChatCompletionMessageParam], max_tokens: int
) -> tuple[float, str, int]:
    """One streamed greedy chat completion: (TTFT, answer, prompt tokens)."""
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model=SERVED,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    ttft = None
    parts: list[str] = []
    prompt_tokens = 0
    async for chunk in stream:
        if ttft is None and chunk.choices:
            ttft = time.perf_counter() - started
        parts += [c.delta.content for c in chunk.choices if c.delta.content]
        if chunk.usage is not None:
            prompt_tokens = chunk.usage.prompt_tokens
    if ttft is None:
        raise RuntimeError("a stream ended without tokens")
    return ttft, "".join(parts), prompt_tokens
