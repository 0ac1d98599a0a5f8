"""Tenant queues: a light tenant's TTFT while a heavy tenant offers 10x capacity.

Issue 34's target: a light tenant's TTFT p90 while a heavy tenant offers 10x capacity
stays within 1.5x of the light tenant alone, and none of the light tenant's requests is
refused.

Real processes as ``tandem up`` plans them (``plan_local``): ONE aggregated decode
worker of the simulated gpt-oss-120b engine on a GB200 clock (the example manifest's
engine; no prefill pool, no autoscaler) and the real frontend, which requires API keys:
one for tenant ``light``, one for ``heavy`` (weight 1 each, no other limits), written
as key records into a directory. The simulated clock runs slower than real time
(``SPEEDUP``), so that the modelled GPU, not this machine's CPUs (client, frontend and
worker share them), sets the pace; times are reported modelled (wall x speed-up).

Two rows over the same worker, each with its own fresh frontend: *tenant queues* (the
frontend document's ``router.dispatchDepth`` at its default, 2: requests beyond 2 per
ready worker awaiting their first token are held in the frontend and leave in
weighted-fair order) and *no tenant queues* (``dispatchDepth`` 100,000: every admitted
request goes straight to the worker's FIFO, as before tenant queues existed). Per row:

1. capacity C: the heavy tenant closed-loop with ``HEAVY_STREAMS`` streams;
2. light alone: the light tenant open-loop (Poisson) at ``LIGHT_SHARE`` x C;
3. contended: the heavy tenant open-loop (Poisson) at 10 C -- an in-flight cap on the
   client, arrivals beyond it skipped and counted -- starting a little earlier and
   offering until the light tenant's last request has ended, together with the light
   tenant at the same rate as in 2.

Every request is streamed with its tenant's key through the official ``openai`` client
(``tandem_dev.faults.load.send_one``, retries off); TTFT is taken at the first content
chunk. Prompts render to exactly ``ISL`` gpt-oss tokens (the goodput benchmark's
builder), answers are ``OSL`` tokens. Every phase is bounded in count and time; at the
end of the contended phase the heavy tenant's unfinished requests are cancelled and the
worker is let go idle before the next phase. The heavy tenant's *answered* counts only
answers completed within the phase: with tenant queues its admitted requests decode
together in the worker's batch, and many are cut off mid-answer at the phase's end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import queue
import random
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import parse_inference_cluster
from tandem.devcluster.ports import allocate_ports
from tandem.frontend.api_keys import dump_record, new_key, new_record
from tandem.kv import nixl_available
from tandem.runtime.plan import LocalPlan, plan_local
from tandem.security import issue, write_identities
from tandem.security.credentials import utc_now
from tandem.tokenization.harmony import HarmonyTokenizer, load_harmony_tokenizer
from tandem_dev.bench.chat_workload import sum_samples, summarize_ttft
from tandem_dev.bench.goodput.workload import build_prompt
from tandem_dev.bench.local_fleet import FRONTEND, run_frontends, run_workers
from tandem_dev.faults.load import LoadShape, Outcome, RequestRecord, send_one

MODEL = "gpt-oss-120b"
SPEEDUP = 0.1  # modelled seconds per wall second
ISL = 4096
OSL = 64
HEAVY_STREAMS = 16  # closed loop: enough to fill the worker's batch
LIGHT_SHARE = 0.2  # light rate, x C
HEAVY_OVERLOAD = 10.0  # heavy rate in the contended phase, x C
HEAVY_IN_FLIGHT = 512  # the client's bound: above the frontend's queue (256)
DEFAULT_DEPTH = 2  # RouterTuning.dispatch_depth's default
NO_QUEUES_DEPTH = 100_000
STARTUP_S = 300.0
IDLE_S = 120.0  # the most to wait for the worker to go idle between phases
LIGHT_DEADLINE_S = 120.0  # a light request not finished by then counts as unanswered
TARGET_RATIO = 1.5
TENANTS = ("light", "heavy")


@dataclass(frozen=True, slots=True)
class Phases:
    """How long each phase runs (wall seconds) and how many requests it may send."""

    capacity_s: float
    light_requests: int  # light arrivals in each of the light-alone and contended phases
    light_max_s: float  # ... within at most this long
    heavy_lead_s: float  # the heavy tenant's head start in the contended phase
    max_requests: int  # any one tenant in any one phase


FULL = Phases(
    capacity_s=30.0, light_requests=40, light_max_s=180.0, heavy_lead_s=15.0, max_requests=10_000
)
QUICK = Phases(
    capacity_s=10.0, light_requests=12, light_max_s=60.0, heavy_lead_s=5.0, max_requests=4000
)


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    dispatch_depth: int


ROWS = (Row("tenant queues", DEFAULT_DEPTH), Row("no tenant queues", NO_QUEUES_DEPTH))


@dataclass(frozen=True, slots=True)
class Offered:
    """One tenant's open-loop phase: what it sent and what each request became."""

    records: list[RequestRecord]
    skipped: int  # arrivals beyond the client's in-flight bound, never sent
    cut: int  # still unfinished at the phase's end, cancelled

    @property
    def answered(self) -> list[RequestRecord]:
        return [r for r in self.records if r.outcome is Outcome.ANSWERED]

    @property
    def refused(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status is not None and r.status != 200]

    @property
    def unanswered(self) -> int:
        return len(self.records) - len(self.answered) + self.cut

    def ttft(self) -> list[float]:
        """Modelled TTFT (s) of the answered requests."""
        return [
            (r.first_token - r.started) * SPEEDUP
            for r in self.answered
            if r.first_token is not None
        ]


@dataclass(frozen=True, slots=True)
class RowResult:
    row: Row
    capacity_rps: float  # wall requests/s of the closed loop
    alone: Offered
    light: Offered  # with the heavy tenant
    heavy: Offered
    light_rate: float  # wall requests/s
    heavy_rate: float


def cluster_spec() -> InferenceCluster:
    """The benchmarked cluster, as a user would write it for ``tandem up``: the example
    manifest's simulated engine as one aggregated decode worker, two tenants."""
    doc = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "tenants-bench"},
        "spec": {
            "model": {
                "name": f"openai/{MODEL}",
                "servedName": MODEL,
                "maxInputTokens": 32768,
                "maxOutputTokens": 2048,
            },
            "engine": {
                "kind": "simulated",
                "options": {"kv_cache_dtype": "fp8", "speedup": SPEEDUP},
            },
            "accelerator": {"profile": "gb200"},
            "frontend": {"tenants": [{"name": t, "weight": 1} for t in TENANTS]},
            "prefill": {"replicas": 0, "minReplicas": 0, "maxReplicas": 1},
            "decode": {"replicas": 1, "minReplicas": 1, "maxReplicas": 1},
            "autoscaling": {"enabled": False},
            "kvTransfer": {
                "backend": "nixl" if nixl_available() else "tcp",
                "ucxTransports": ["tcp"],
            },
        },
    }
    return parse_inference_cluster(doc, "tenants benchmark")


def write_keys(directory: Path) -> dict[str, str]:
    """A key per tenant, its record written into ``directory``; tenant -> key."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = {}
    for tenant in TENANTS:
        key = new_key()
        (directory / f"{tenant}-bench").write_text(
            dump_record(new_record(f"{tenant}-bench", tenant, key))
        )
        keys[tenant] = key
    return keys


def _plan(row: Row, state_dir: Path, worker_ports: Sequence[int], key_dir: Path) -> LocalPlan:
    """``tandem up``'s plan, its documents written, ``router.dispatchDepth`` set to the
    row's."""
    plan = plan_local(
        cluster_spec(),
        state_dir=state_dir,
        frontend_port=allocate_ports(1)[0],
        worker_ports=worker_ports,
        python=sys.executable,
        api_key_dirs=[key_dir],
    )
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    for path, text in plan.documents.items():
        path.write_text(text)
    config = state_dir / "frontend.json"
    doc = json.loads(config.read_text())
    doc.setdefault("router", {})["dispatchDepth"] = row.dispatch_depth
    config.write_text(json.dumps(doc))
    return plan


class Prompts:
    """Distinct prompts of exactly ``ISL`` tokens (no prefix shared across requests).

    ``build_prompt`` renders each prompt twice (~25 ms at 4k tokens here), too slow for
    the heavy tenant's arrivals; the filler it finds depends only on how the index
    tokenizes, which o200k does by digit count (digits in groups of three), so it is
    built once per digit count and reused."""

    def __init__(self, tokenizer: HarmonyTokenizer) -> None:
        self._tokenizer = tokenizer
        self._filler: dict[int, str] = {}  # digits of the index -> filler

    def __call__(self, index: int) -> str:
        head = f"Request {index}:"
        digits = len(str(index))
        if digits not in self._filler:
            self._filler[digits] = build_prompt(self._tokenizer, ISL, index).removeprefix(head)
        return head + self._filler[digits]


@contextlib.asynccontextmanager
async def _client(endpoint: str, key: str, connections: int) -> AsyncIterator[openai.AsyncOpenAI]:
    async with httpx.AsyncClient(
        timeout=None, limits=httpx.Limits(max_connections=connections)
    ) as http:
        yield openai.AsyncOpenAI(
            base_url=endpoint, api_key=key, max_retries=0, timeout=None, http_client=http
        )


def _shape(deadline_s: float, max_requests: int, prompts: Prompts) -> LoadShape:
    """Every tenant's requests: ``ISL``-token prompts, ``OSL``-token streamed answers."""
    return LoadShape(
        max_tokens=OSL, deadline_s=deadline_s, max_requests=max_requests, stream_every=1,
        prompt=prompts,
    )  # fmt: skip


async def _closed_loop(
    client: openai.AsyncOpenAI, shape: LoadShape, first: int, seconds: float
) -> float:
    """``HEAVY_STREAMS`` streams back to back for ``seconds`` after a warm-up round;
    their throughput (wall requests/s) by Little's law: streams / mean latency of the
    answers that ended in that time. (Counting answers per second would be lumpy: the
    streams start together and, sharing one batch, keep ending in bursts of about
    ``HEAVY_STREAMS``.)"""
    counter = iter(range(first, first + shape.max_requests))
    answered: list[RequestRecord] = []
    stop_at = [float("inf")]

    async def stream() -> None:
        while time.monotonic() < stop_at[0]:
            index = next(counter, None)
            if index is None:
                return
            record = await send_one(client, MODEL, shape, index)
            if record.outcome is Outcome.ANSWERED:
                answered.append(record)

    tasks = [asyncio.create_task(stream()) for _ in range(HEAVY_STREAMS)]
    try:
        async with asyncio.timeout(seconds + 600):
            while len(answered) < HEAVY_STREAMS:  # warm: the batch is full
                if all(t.done() for t in tasks):
                    raise RuntimeError("the closed loop stopped before warming up")
                await asyncio.sleep(0.1)
            started = time.monotonic()
            stop_at[0] = started + seconds
            await asyncio.sleep(seconds)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    latencies = [r.latency for r in answered if started <= r.ended <= stop_at[0]]
    if not latencies:
        raise RuntimeError(f"the closed loop answered nothing in {seconds:.0f} s")
    return HEAVY_STREAMS * len(latencies) / sum(latencies)


async def _open_loop(
    client: openai.AsyncOpenAI,
    shape: LoadShape,
    *,
    first: int,
    rate: float,
    count: int,
    seconds: float,
    max_in_flight: int,
    seed: int,
    drain_s: float,
    stop: asyncio.Event | None = None,
) -> Offered:
    """Poisson arrivals at ``rate`` (wall /s): at most ``count`` of them, within
    ``seconds`` or until ``stop`` is set; then ``drain_s`` for the unfinished to end
    before they are cancelled."""
    stop = stop or asyncio.Event()
    rng = random.Random(seed)
    records: list[RequestRecord] = []
    in_flight: set[asyncio.Task[RequestRecord]] = set()
    skipped = 0
    start = time.monotonic()
    due = start
    for index in range(first, first + count):
        due += rng.expovariate(rate)
        if due > start + seconds or await _stopped(stop, due):
            break
        finished = {t for t in in_flight if t.done()}
        records += [t.result() for t in finished]
        in_flight -= finished
        if len(in_flight) >= max_in_flight:
            skipped += 1
            continue
        in_flight.add(asyncio.create_task(send_one(client, MODEL, shape, index)))
    await _stopped(stop, start + seconds)
    if not in_flight:
        return Offered(records, skipped, 0)
    done, pending = await asyncio.wait(in_flight, timeout=drain_s)
    records += [t.result() for t in done]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return Offered(records, skipped, len(pending))


async def _stopped(stop: asyncio.Event, until: float) -> bool:
    """Waits until ``until`` (monotonic) or ``stop``, whichever first; whether stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, until - time.monotonic()))
    return stop.is_set()


def _wait_idle(metrics_url: str) -> None:
    """Until the worker holds no request (queued or decoding), at most ``IDLE_S``."""
    deadline = time.monotonic() + IDLE_S
    while time.monotonic() < deadline:
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            text = response.read().decode()
        busy = sum(
            sum(sum_samples(text, f"tandem_worker_{name}").values())
            for name in ("queued_requests", "active_sequences")
        )
        if busy == 0:
            return
        time.sleep(0.5)
    _progress(f"the worker was still busy after {IDLE_S:.0f} s; going on")


async def _measure_row(
    row: Row,
    endpoint: str,
    keys: dict[str, str],
    metrics_url: str,
    prompts: Prompts,
    phases: Phases,
    seed: int,
) -> RowResult:
    light_shape = _shape(LIGHT_DEADLINE_S, phases.max_requests, prompts)
    # The heavy tenant's requests end with the phase (cancelled), whatever their deadline.
    heavy_deadline_s = phases.heavy_lead_s + phases.light_max_s + LIGHT_DEADLINE_S
    heavy_shape = _shape(heavy_deadline_s, phases.max_requests, prompts)
    # Distinct indices, so no prompt repeats (the head carries the index).
    base = seed * 10_000_000
    async with (
        _client(endpoint, keys["light"], 64) as light,
        _client(endpoint, keys["heavy"], HEAVY_IN_FLIGHT) as heavy,
    ):
        _progress(f"{row.label}: capacity, {HEAVY_STREAMS} closed-loop streams")
        capacity = await _closed_loop(heavy, heavy_shape, base, phases.capacity_s)
        await asyncio.to_thread(_wait_idle, metrics_url)
        light_rate = LIGHT_SHARE * capacity
        light_s = min(phases.light_max_s, phases.light_requests / light_rate)
        _progress(
            f"{row.label}: C = {capacity:.2f} req/s (wall); light alone at "
            f"{light_rate:.2f} req/s for up to {light_s:.0f} s"
        )
        alone = await _open_loop(
            light, light_shape, first=base + 1_000_000, rate=light_rate,
            count=phases.light_requests, seconds=light_s, max_in_flight=64, seed=seed,
            drain_s=LIGHT_DEADLINE_S,
        )  # fmt: skip
        await asyncio.to_thread(_wait_idle, metrics_url)
        heavy_rate = HEAVY_OVERLOAD * capacity
        _progress(f"{row.label}: light with heavy at {heavy_rate:.1f} req/s")
        # The heavy tenant starts first (its backlog built when the light one comes) and
        # keeps offering until the light tenant's last request has ended.
        heavy_s = phases.heavy_lead_s + light_s + LIGHT_DEADLINE_S
        heavy_count = min(phases.max_requests, round(heavy_rate * heavy_s) + 10)
        load = HeavyLoad(
            endpoint, keys["heavy"], first=base + 3_000_000, rate=heavy_rate,
            count=heavy_count, seconds=heavy_s, deadline_s=heavy_shape.deadline_s,
            max_requests=phases.max_requests, seed=seed + 2,
        )  # fmt: skip
        with _heavy_tenant(load) as heavy_offered:
            await asyncio.sleep(phases.heavy_lead_s)
            contended_light = await _open_loop(
                light, light_shape, first=base + 2_000_000, rate=light_rate,
                count=phases.light_requests, seconds=light_s, max_in_flight=64,
                seed=seed + 1, drain_s=LIGHT_DEADLINE_S,
            )  # fmt: skip
        (contended_heavy,) = heavy_offered
        await asyncio.to_thread(_wait_idle, metrics_url)
    return RowResult(row, capacity, alone, contended_light, contended_heavy, light_rate, heavy_rate)


@dataclass(frozen=True, slots=True)
class HeavyLoad:
    """The contended phase's heavy tenant (``_open_loop``'s arguments), for its process."""

    endpoint: str
    key: str
    first: int
    rate: float
    count: int
    seconds: float
    deadline_s: float
    max_requests: int
    seed: int


@contextlib.contextmanager
def _heavy_tenant(load: HeavyLoad) -> Iterator[list[Offered]]:
    """The heavy tenant's open loop in a process of its own, offering from when the block
    starts until it ends; the list yielded holds its ``Offered`` after the block.

    Tenants are separate clients: in one event loop with the light tenant's requests, the
    heavy tenant's streams (a thousand chunks a second at 10x capacity) would delay the
    moment the light tenant's client reads its first token, and the bench would charge
    its own client's lag to the frontend."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    results: multiprocessing.queues.Queue[Offered] = context.Queue()
    process = context.Process(
        target=_heavy_process, args=(load, ready, stop, results), name="heavy-tenant"
    )
    offered: list[Offered] = []
    process.start()
    try:
        if not ready.wait(STARTUP_S):
            raise RuntimeError(f"the heavy tenant's process did not start in {STARTUP_S:.0f} s")
        yield offered
    finally:
        stop.set()
        # Read before joining: the process ends only once its result left the queue.
        with contextlib.suppress(queue.Empty):
            offered.append(results.get(timeout=IDLE_S))
        process.join(IDLE_S)
        if process.is_alive():
            process.kill()
    if not offered:
        raise RuntimeError(f"the heavy tenant's process returned nothing in {IDLE_S:.0f} s")


def _heavy_process(
    load: HeavyLoad,
    ready: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[Offered],
) -> None:
    prompts = Prompts(load_harmony_tokenizer())
    prompts(load.first)  # the filler, built before the first arrival is due
    results.put(asyncio.run(_heavy_open_loop(load, prompts, ready, stop)))


async def _heavy_open_loop(
    load: HeavyLoad,
    prompts: Prompts,
    ready: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
) -> Offered:
    shape = _shape(load.deadline_s, load.max_requests, prompts)
    stopped = asyncio.Event()

    async def watch() -> None:
        # The parent sets ``stop`` on every way out, so this thread always ends.
        await asyncio.to_thread(stop.wait)
        stopped.set()

    async with _client(load.endpoint, load.key, HEAVY_IN_FLIGHT) as heavy:
        watcher = asyncio.create_task(watch())
        ready.set()
        try:
            return await _open_loop(
                heavy, shape, first=load.first, rate=load.rate, count=load.count,
                seconds=load.seconds, max_in_flight=HEAVY_IN_FLIGHT, seed=load.seed,
                drain_s=0.0, stop=stopped,
            )  # fmt: skip
        finally:
            watcher.cancel()


def run_rows(rows: Sequence[Row], phases: Phases) -> list[RowResult]:
    """Each row with its own fresh frontend over the same worker, one after another."""
    tokenizer = load_harmony_tokenizer()
    prompts = Prompts(tokenizer)
    with tempfile.TemporaryDirectory(prefix="tenants-") as tmp:
        root = Path(tmp)
        keys = write_keys(root / "keys")
        worker_ports = allocate_ports(1)
        plans = [
            _plan(row, root / f"row-{i}", worker_ports, root / "keys") for i, row in enumerate(rows)
        ]
        issued = issue(plans[0].cluster, utc_now())
        for plan in plans:  # one cluster: every frontend trusts the worker's CA
            write_identities(plan.credentials_dir, issued)
        _progress("starting the worker")
        with run_workers(plans[0], STARTUP_S) as urls:
            results = []
            for i, (row, plan) in enumerate(zip(rows, plans, strict=True)):
                _progress(f"starting the frontend of {row.label!r}")
                with _frontend(plan) as endpoint:
                    results.append(
                        asyncio.run(
                            _measure_row(row, endpoint, keys, urls[0], prompts, phases, i + 1)
                        )
                    )
    return results


@contextlib.contextmanager
def _frontend(plan: LocalPlan) -> Iterator[str]:
    with run_frontends([(plan, FRONTEND, 1)], STARTUP_S) as groups:
        yield groups[0][0]


def _progress(line: str) -> None:
    print(f"tenants: {line}", file=sys.stderr, flush=True)


def _ms(values: Sequence[float]) -> str:
    if not values:
        return "-"
    p50, p90 = summarize_ttft(values)
    return f"{p50 * 1000:,.0f} / {p90 * 1000:,.0f}"


def _ratio(result: RowResult) -> float | None:
    alone, contended = result.alone.ttft(), result.light.ttft()
    if not alone or not contended:
        return None
    return summarize_ttft(contended)[1] / summarize_ttft(alone)[1]


def _answered_of_sent(offered: Offered) -> str:
    return f"{len(offered.answered)} of {len(offered.records) + offered.cut}"


def _light_unanswered(result: RowResult) -> str:
    light = result.light
    sent = len(light.records) + light.cut
    refused = len(light.refused)
    other = light.unanswered - refused
    text = f"{refused} of {sent}"
    return text + (f" (+{other} unanswered)" if other else "")


def render(results: Sequence[RowResult], phases: Phases, loads: tuple[float, float]) -> str:
    lines = [
        "| row | capacity C | light alone TTFT p50 / p90 | light with heavy at 10x TTFT "
        "p50 / p90 | p90 ratio | light refused | heavy offered / answered / refused |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ratio = _ratio(r)
        heavy = r.heavy
        offered = len(heavy.records) + heavy.cut + heavy.skipped
        lines.append(
            f"| {r.row.label} | {r.capacity_rps / SPEEDUP:,.1f} req/s | "
            f"{_ms(r.alone.ttft())} ms | {_ms(r.light.ttft())} ms | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {_light_unanswered(r)} | "
            f"{offered:,} / {len(heavy.answered):,} / {len(heavy.refused):,} |"
        )
    first = results[0]
    lines += [
        "",
        f"Parameters: one aggregated decode worker (simulated gpt-oss-120b, GB200 clock, "
        f"TP1, fp8 KV), speed-up {SPEEDUP:g} (times and rates above are modelled: wall x "
        f"{SPEEDUP:g}, requests/s / {SPEEDUP:g}); prompts of exactly {ISL:,} tokens, "
        f"{OSL}-token streamed answers; tenants light and heavy, weight 1, no limits; "
        f"`router.dispatchDepth` {DEFAULT_DEPTH} vs {NO_QUEUES_DEPTH:,}, frontend queue "
        f"{cluster_spec().spec.frontend.max_queued_requests}. C: the heavy tenant's "
        f"{HEAVY_STREAMS} closed-loop streams for "
        f"{phases.capacity_s:.0f} s (wall), streams / mean latency; light: Poisson at "
        f"{LIGHT_SHARE:g} C, up to "
        f"{phases.light_requests} arrivals within {phases.light_max_s:.0f} s (wall); "
        f"heavy: Poisson at {HEAVY_OVERLOAD:g} C from {phases.heavy_lead_s:.0f} s before "
        "the light tenant's first arrival until its last request ended, at most "
        f"{HEAVY_IN_FLIGHT} in flight from the client (arrivals skipped beyond it: "
        + ", ".join(f"{r.heavy.skipped:,} ({r.row.label})" for r in results)
        + "; unfinished at the end and cancelled, not counted as answered: "
        + ", ".join(f"{r.heavy.cut:,}" for r in results)
        + "). Offered heavy includes skipped arrivals; refused is any non-200. Light "
        "requests answered of sent, alone / contended: "
        + ", ".join(f"{_answered_of_sent(r.alone)} / {_answered_of_sent(r.light)}" for r in results)
        + f". Load average {loads[0]:.1f} at start, {loads[1]:.1f} at the end; "
        f"{'quick run, ' if phases is QUICK else ''}first row's C {first.capacity_rps:.2f} "
        "req/s wall.",
        "",
        _reading(results),
    ]
    return "\n".join(lines)


def _reading(results: Sequence[RowResult]) -> str:
    parts = []
    for r in results:
        ratio = _ratio(r)
        refused, unanswered = len(r.light.refused), r.light.unanswered
        if ratio is None:
            parts.append(f"{r.row.label}: too few light answers to compare.")
            continue
        within = "within" if ratio <= TARGET_RATIO else "beyond"
        none = "none" if refused == 0 else f"{refused}"
        others = unanswered - refused
        also = f" ({others} more unanswered without a refusal)" if others else ""
        parts.append(
            f"{r.row.label}: the light tenant's TTFT p90 with the heavy tenant at "
            f"{HEAVY_OVERLOAD:g}x capacity is {ratio:.2f}x its p90 alone ({within} the "
            f"target's {TARGET_RATIO:g}x), and {none} of its requests were refused{also} "
            "(target: none)."
        )
    queued = next((r for r in results if r.row.dispatch_depth == DEFAULT_DEPTH), None)
    met = (
        queued is not None
        and (ratio := _ratio(queued)) is not None
        and ratio <= TARGET_RATIO
        and queued.light.unanswered == 0
    )
    verdict = "met" if met else "not met"
    return f"**Reading.** {' '.join(parts)} Issue 34's target is {verdict} here."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.tenants", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    args = parser.parse_args(argv)
    phases = QUICK if args.quick else FULL
    load_before = _load()
    results = run_rows(ROWS, phases)
    print(render(results, phases, (load_before, _load())))
    return 0


def _load() -> float:
    return os.getloadavg()[0]


if __name__ == "__main__":
    raise SystemExit(main())
