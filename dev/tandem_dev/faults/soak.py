"""The soak: a local cluster (``tandem up``) offered twice its capacity for a long time,
with every process's memory, file descriptors and threads sampled from /proc.

Capacity is measured first, on the same cluster (answers per second of a closed loop of
clients, enough to keep it busy); then requests arrive open-loop at ``overload`` x that
rate. The frontend must turn the excess away with 429 + Retry-After and keep the latency
of what it admits bounded; nothing may be lost or hang; no process may grow (RSS below
+10% after warm-up, descriptors and threads flat).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tandem_dev.faults.load import (
    LoadShape,
    Outcome,
    RequestRecord,
    SpreadTransport,
    SteadyLoad,
    client_for,
    send_one,
)

SAMPLE_EVERY_S = 5.0
SLACK = 2  # descriptors/threads a process may hold above its early level at the end


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    rss_bytes: int
    fds: int
    threads: int


def read_sample(pid: int, t: float) -> Sample | None:
    """One process's RSS, open descriptors and threads from /proc; None if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss = int(fields["VmRSS"].split()[0]) * 1024
    return Sample(t, rss, fds, int(fields["Threads"]))


@dataclass(frozen=True, slots=True)
class Growth:
    """One process: RSS under load after warm-up (medians of the first tenth, the tenth
    around half-time and the last tenth of the samples), and descriptors and threads
    before the load, at most during it, and once it stopped."""

    name: str
    rss_start: float
    rss_mid: float  # a leak keeps growing past half-time; a warming cache flattens
    rss_end: float
    fds: tuple[int, int, int]  # before, max during, after
    threads: tuple[int, int, int]

    @property
    def rss_growth(self) -> float:
        return self.rss_end / self.rss_start - 1

    @property
    def flat(self) -> bool:
        """Back to where it started once the load stopped: what the load opened (client
        connections, in-flight streams) was closed again."""
        return self.fds[2] <= self.fds[0] + SLACK and self.threads[2] <= self.threads[0] + SLACK


def judge_growth(
    name: str, samples: Sequence[Sample], warmup_end: float, load_end: float
) -> Growth:
    """One process's growth from its samples (pure): the first is the baseline before the
    load, those in [warmup_end, load_end) measure RSS, the last is after the load."""
    under = [s for s in samples if warmup_end <= s.t < load_end]
    if len(under) < 4 or samples[-1].t < load_end:
        raise ValueError(f"{name}: too few samples after warm-up or none after the load")
    tenth = max(1, len(under) // 10)
    half = len(under) // 2
    middle = under[half - tenth // 2 : half - tenth // 2 + tenth]
    during = [s for s in samples if s.t < load_end]
    return Growth(
        name,
        statistics.median(s.rss_bytes for s in under[:tenth]),
        statistics.median(s.rss_bytes for s in middle),
        statistics.median(s.rss_bytes for s in under[-tenth:]),
        (samples[0].fds, max(s.fds for s in during), samples[-1].fds),
        (samples[0].threads, max(s.threads for s in during), samples[-1].threads),
    )


@dataclass
class Sampler:
    """Samples ``pids()`` (name -> pid, read each round) every ``every_s`` in a thread."""

    pids: Callable[[], Mapping[str, int]]
    every_s: float = SAMPLE_EVERY_S
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            for name, pid in self.pids().items():
                sample = read_sample(pid, now)
                if sample is not None:
                    self.samples.setdefault(name, []).append(sample)
            if self._stop.wait(self.every_s):
                return


def measure_capacity(
    targets: Sequence[tuple[str, int]], model: str, shape: LoadShape, seconds: float
) -> float:
    """Answers per second of a closed loop of ``shape.concurrency`` clients."""
    with SteadyLoad(targets, model, shape) as load:
        load.wait_answered(shape.concurrency)  # warm
        started = time.monotonic()
        time.sleep(seconds)
        answered = load.count(Outcome.ANSWERED, after=started)
    return answered / seconds


def offer_open_loop(
    targets: Sequence[tuple[str, int]],
    model: str,
    shape: LoadShape,
    rate: float,
    seconds: float,
    max_in_flight: int = 1024,
) -> tuple[list[RequestRecord], int]:
    """Requests arriving at ``rate`` per second for ``seconds``, whatever the answers;
    returns the records and how many arrivals were skipped because ``max_in_flight``
    were already waiting (a bound on the client, reported, never expected)."""

    async def run() -> tuple[list[RequestRecord], int]:
        records: list[RequestRecord] = []
        skipped = 0
        in_flight: set[asyncio.Task[RequestRecord]] = set()
        async with httpx.AsyncClient(
            transport=SpreadTransport(targets), timeout=None,
            limits=httpx.Limits(max_connections=max_in_flight),
        ) as http:  # fmt: skip
            client = client_for(http, shape.deadline_s)
            start = time.monotonic()
            index = 0
            while (now := time.monotonic()) < start + seconds:
                due = start + index / rate
                if due > now:
                    await asyncio.sleep(due - now)
                if len(in_flight) >= max_in_flight:
                    skipped += 1
                else:
                    task = asyncio.create_task(send_one(client, model, shape, index))
                    in_flight.add(task)
                index += 1
                finished = {t for t in in_flight if t.done()}
                records.extend(t.result() for t in finished)
                in_flight -= finished
            if in_flight:
                records.extend(await asyncio.gather(*in_flight))
        return records, skipped

    return asyncio.run(run())


@dataclass(frozen=True, slots=True)
class SoakResult:
    seconds: float
    warmup_s: float
    capacity_rps: float
    offered_rps: float
    records: tuple[RequestRecord, ...]
    skipped: int
    growth: tuple[Growth, ...]
    restarts: int  # processes whose pid changed during the soak

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.records if r.outcome is outcome)

    @property
    def rejected(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status == 429]

    @property
    def answered_latency(self) -> list[float]:
        return sorted(r.latency for r in self.records if r.outcome is Outcome.ANSWERED)

    def p99_by_third(self) -> list[float]:
        """p99 latency of the answers started in each third of the run: bounded means it
        does not climb from one third to the next."""
        answered = [r for r in self.records if r.outcome is Outcome.ANSWERED]
        if not answered:
            return []
        start = min(r.started for r in self.records)
        thirds: list[list[float]] = [[], [], []]
        for r in answered:
            thirds[min(2, int(3 * (r.started - start) / self.seconds))].append(r.latency)
        return [percentile(sorted(t), 0.99) for t in thirds]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, nearest rank (pure)."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def soak_prompt(index: int) -> str:
    """Every other prompt is long enough to prefill remotely (KV moves between pools)."""
    from tandem_dev.faults.scenarios import long_prompt

    return long_prompt(index) if index % 2 else f"Request {index}: say hello."


def soak_cluster(name: str = "soak") -> dict[str, object]:
    """The reference example's shape (1 prefill + 1 decode, KV over NIXL on loopback)
    with a short frontend queue, so overload shows as 429s rather than as a long wait,
    and a small KV pool."""
    from tandem_dev.faults.scenarios import fault_cluster

    doc = fault_cluster(name).to_wire()
    spec = doc["spec"]
    spec["prefill"] = {"replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    spec["decode"] = {"replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    spec["kvTransfer"] = {"backend": "nixl", "ucxTransports": ["tcp"]}
    spec["frontend"]["maxQueuedRequests"] = 16
    # A KV pool (4096 blocks x 8 KiB = 32 MiB) small enough that the prefix caches fill
    # it and evict during the run. (It is resident from the start either way: a pool
    # touched block by block as the cache fills grew a decode worker's RSS for minutes.)
    spec["engine"]["options"] = {"num_kv_blocks": 4096}
    return doc


def run_soak(
    home: Path, seconds: float, warmup_s: float, *, overload: float = 2.0, capacity_s: float = 20.0
) -> SoakResult:
    from tandem.runtime.state import cluster_dir, read_state
    from tandem_dev.faults.local import running_cluster

    doc = soak_cluster()
    with running_cluster(doc, home) as state:
        port = int(state.endpoint.rsplit(":", 1)[1].split("/")[0])
        targets = [("127.0.0.1", port)]
        model = "reference"
        shape = LoadShape(concurrency=8, max_tokens=8, deadline_s=60.0, prompt=soak_prompt)
        first: dict[str, int] = {}
        changed: set[str] = set()

        def pids() -> dict[str, int]:
            now = read_state(cluster_dir(state.cluster, home)) or state
            found = {"supervisor": now.supervisor_pid}
            if now.frontend is not None:
                found["frontend"] = now.frontend.pid
            found.update({w.name: w.pid for w in now.workers})
            for name, pid in found.items():
                if first.setdefault(name, pid) != pid:
                    changed.add(name)
            return found

        capacity = measure_capacity(targets, model, shape, capacity_s)
        with Sampler(pids) as sampler:
            started = time.monotonic()
            records, skipped = offer_open_loop(targets, model, shape, overload * capacity, seconds)
            load_end = time.monotonic()
            time.sleep(2 * SAMPLE_EVERY_S)  # idle: what the load opened must close
        growth = tuple(
            judge_growth(name, samples, started + warmup_s, load_end)
            for name, samples in sorted(sampler.samples.items())
        )
    return SoakResult(seconds, warmup_s, capacity, overload * capacity, tuple(records),
                      skipped, growth, len(changed))  # fmt: skip


def verdicts(result: SoakResult) -> list[str]:
    """The soak's targets, each met or not, in words (pure)."""
    grew = [f"{g.name} {g.rss_growth:+.1%}" for g in result.growth if g.rss_growth >= 0.10]
    leaky = [g.name for g in result.growth if not g.flat]
    rejected = result.rejected
    return [
        "nothing lost or hung: "
        + ("yes" if result.count(Outcome.LOST) == result.count(Outcome.HUNG) == 0 else "NO"),
        "excess refused with 429 + Retry-After: "
        + ("yes" if rejected and all(r.retry_after for r in rejected) else "NO"),
        "RSS growth under 10% after warm-up in every process: "
        + ("yes" if not grew else f"NO ({', '.join(grew)})"),
        "descriptors and threads back to their level after the load: "
        + ("yes" if not leaky else f"NO ({', '.join(leaky)})"),
    ]


def render_soak(result: SoakResult) -> str:
    latency = result.answered_latency
    rejected = result.rejected
    lines = [
        "Targets: " + "; ".join(verdicts(result)) + ".",
        "",
        "| duration | capacity | offered | sent | answered | 429 (with Retry-After) "
        "| other clean errors | dropped | lost | hung | answered p50 / p99 / max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {result.seconds:.0f} s | {result.capacity_rps:.1f} req/s "
        f"| {result.offered_rps:.1f} req/s | {len(result.records)} "
        f"| {result.count(Outcome.ANSWERED)} "
        f"| {len(rejected)} ({sum(1 for r in rejected if r.retry_after)}) "
        f"| {result.count(Outcome.CLEAN_ERROR) - len(rejected)} "
        f"| {result.count(Outcome.DROPPED)} | {result.count(Outcome.LOST)} "
        f"| {result.count(Outcome.HUNG)} | {percentile(latency, 0.5):.2f} / "
        f"{percentile(latency, 0.99):.2f} / {latency[-1] if latency else float('nan'):.2f} s |",
        "",
        "p99 of the answers by third of the run: "
        + " / ".join(f"{p:.2f} s" for p in result.p99_by_third()),
        "",
        f"| process (after {result.warmup_s:.0f} s warm-up) | RSS then | at half-time "
        "| at the end | growth | fds before / max during / after the load "
        "| threads before / max during / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in result.growth:
        lines.append(
            f"| {g.name} | {g.rss_start / 2**20:.1f} MiB | {g.rss_mid / 2**20:.1f} MiB "
            f"| {g.rss_end / 2**20:.1f} MiB | {g.rss_growth:+.1%} "
            f"| {' / '.join(map(str, g.fds))} | {' / '.join(map(str, g.threads))} |"
        )
    return "\n".join(lines)
