"""The data-plane faults, each under steady load on a ``FaultBed``.

Every scenario: load reaches a steady state (answers flowing), the fault is injected at a
moment chosen by what the workers report (a KV pull in progress, a stream decoding), the
load runs through the fault and the recovery, then stops; every request it sent is
counted by outcome. "Recovered" means: both frontends ready and seeing every worker
healthy again, and a prompt prefilled remotely (KV moving between pools) since.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence

from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import parse_inference_cluster
from tandem_dev.faults.bed import FaultBed, metric_sum, wait_for
from tandem_dev.faults.load import LoadShape, Outcome, RequestRecord, SteadyLoad
from tandem_dev.faults.report import FaultResult, summarize

LONG_PROMPT_WORDS = 90  # ~600 byte tokens: prefilled remotely, ~0.9 MB of KV to move
SLOW_LINK_KBIT = 4000  # a ~0.9 MB pull takes ~1.8 s alone: slower than the 3 s timeout when shared
CUT_LINK_KBIT = 8000  # the prefill kill: a pull lasts ~0.9 s, two at once stay under 3 s
FAULT_HOLD_S = 8.0  # how long a partition or slow link lasts


def long_prompt(index: int) -> str:
    """A prompt long enough to prefill remotely whose every KV block is its own (the
    request number is in every word), so no worker has any of it cached."""
    return " ".join(f"r{index}w{k}" for k in range(LONG_PROMPT_WORDS))


def latency_note(records: Sequence[RequestRecord], start: float, end: float) -> str:
    """p50/max latency of the answers that overlapped ``[start, end]`` (pure)."""
    during = [r.latency for r in records
              if r.outcome is Outcome.ANSWERED and r.started < end and r.ended > start]  # fmt: skip
    if not during:
        return "no answer overlapped the fault"
    return (
        f"answers during the fault: p50 {statistics.median(during):.2f} s, max {max(during):.2f} s"
    )


def streams_spanning(records: Sequence[RequestRecord], at: float) -> list[RequestRecord]:
    """Streams that had produced tokens before ``at`` and ended after it (pure)."""
    return [r for r in records
            if r.stream and r.first_token is not None and r.first_token < at < r.ended]  # fmt: skip


def _recovered(bed: FaultBed, killed: tuple[str, int] | None = None) -> Callable[[], bool]:
    """True once the killed process (name, old pid) was replaced, every process is ready
    and seen healthy, and a prompt was prefilled remotely after that."""
    remote_at_ready: list[float] = []

    def check() -> bool:
        if not remote_at_ready:
            if killed is not None and bed.pid_of(killed[0]) == killed[1]:
                return False
            if not bed.all_ready():
                return False
            remote_at_ready.append(bed.remote_prefills())
            return False
        return bed.remote_prefills() > remote_at_ready[0]

    return check


def _kill(bed: FaultBed, name: str) -> tuple[float, Callable[[], bool]]:
    """SIGKILL ``name``: when, and the check that it recovered."""
    pid = bed.pid_of(name)
    return bed.kill(name), _recovered(bed, (name, pid))


def decisions_note(before: Counter[str], after: Counter[str]) -> str:
    """The router's prefill decisions taken in between, most frequent first (pure)."""
    taken = after - before
    return ", ".join(f"{k} {v:.0f}" for k, v in taken.most_common(4)) or "none"


def _pulling(bed: FaultBed) -> bool:
    """KV parked on the prefill worker while a decode worker waits for its pull."""
    held = metric_sum(bed.worker_metrics("prefill-0"), "tandem_worker_kv_held_for_transfer")
    waiting = sum(metric_sum(bed.worker_metrics(n), "tandem_worker_queued_requests")
                  for n in _decoders(bed))  # fmt: skip
    return held >= 1 and waiting >= 1


def _active(bed: FaultBed, worker: str) -> float:
    return metric_sum(bed.worker_metrics(worker), "tandem_worker_active_sequences")


def _decoders(bed: FaultBed) -> list[str]:
    return [w.name for w in bed.supervisor.plan.workers if w.component == "decode"]


def _decode_failures(bed: FaultBed) -> float:
    """Decode attempts the routers saw fail before their first token (a cut KV pull
    among them), summed over both frontends."""
    return metric_sum(bed.frontend_metrics(), "tandem_router_worker_errors_total", stage="decode")


def _load(bed: FaultBed, **shape: object) -> SteadyLoad:
    defaults: dict[str, object] = {"concurrency": 4, "max_tokens": 16, "prompt": long_prompt}
    return SteadyLoad(bed.targets, bed.model, LoadShape(**{**defaults, **shape}))  # type: ignore[arg-type]


KILL_ATTEMPTS = 3  # a kill that misses what it aims at (a pull, a stream) cuts nothing: again


def prefill_killed_mid_transfer(bed: FaultBed) -> FaultResult:
    bed.net.shape("prefill-0", CUT_LINK_KBIT)
    recover_s: list[float] = []
    cut = 0.0
    try:
        with _load(bed, concurrency=2) as load:
            load.wait_answered(3)
            while not cut and len(recover_s) < KILL_ATTEMPTS:
                wait_for(lambda: _pulling(bed), "a KV pull in progress")
                time.sleep(0.15)  # into the pull, which lasts ~0.9 s on this link
                failures = _decode_failures(bed)
                killed, back = _kill(bed, "prefill-0")
                recovered = wait_for(back, "recovery")
                recover_s.append(recovered - killed)
                load.wait_answered(3, after=recovered)
                cut = _decode_failures(bed) - failures
    finally:
        bed.net.unshape("prefill-0")
    note = (f"{cut:.0f} decode(s) whose KV pull the kill cut, retried locally "
            f"(kill {len(recover_s)} of at most {KILL_ATTEMPTS})")  # fmt: skip
    return summarize("prefill worker SIGKILL mid-transfer", load.snapshot(), recover_s[-1],
                     note, kv_pulls_cut=cut, kills=len(recover_s))  # fmt: skip


def decode_killed_mid_stream(bed: FaultBed) -> FaultResult:
    # Active sequences include ones still waiting for their first token, so under CPU
    # load a kill can land before any stream on decode-0 has one: then kill again.
    spanning: list[RequestRecord] = []
    kills = 0
    resumed_before = _migrations(bed)
    with _load(bed, max_tokens=96, stream_every=1) as load:  # every request streams
        load.wait_answered(3)
        while not spanning and kills < KILL_ATTEMPTS:
            wait_for(lambda: _active(bed, "decode-0") >= 2, "decode-0 streaming")
            before = _migrations(bed)
            killed, back = _kill(bed, "decode-0")
            kills += 1
            recovered = wait_for(back, "recovery")
            load.wait_answered(3, after=recovered)
            if _migrations(bed) > before:  # streams were mid-way on decode-0
                spanning = streams_spanning(load.snapshot(), killed)
    records = load.snapshot()
    migrated = _migrations(bed) - resumed_before
    cut = [r for r in spanning if r.outcome is not Outcome.ANSWERED]
    clean = sum(r.outcome is Outcome.CLEAN_ERROR for r in cut)
    note = f"no stream was mid-way on decode-0 (kill {kills} of at most {KILL_ATTEMPTS})"
    if migrated:
        note = (f"{migrated:.0f} stream(s) moved to another decode worker, "
                f"{len(cut)} cut ({clean} with a clean error; "
                f"kill {kills} of at most {KILL_ATTEMPTS})")  # fmt: skip
    return summarize("decode worker SIGKILL mid-stream", records, recovered - killed, note,
                     streams_migrated=migrated, streams_cut=len(cut), streams_cut_clean=clean,
                     kills=kills)  # fmt: skip


def _migrations(bed: FaultBed) -> float:
    """Streams the routers resumed on another decode worker, summed over both frontends."""
    text = bed.frontend_metrics()
    return metric_sum(text, "tandem_router_migrations_total", outcome="resumed")


def frontend_replica_killed(bed: FaultBed) -> FaultResult:
    with _load(bed, max_tokens=48) as load:
        load.wait_answered(4)
        # The supervisor restarts it; the second replica serves meanwhile.
        killed, back = _kill(bed, "frontend")
        recovered = wait_for(back, "recovery")
        load.wait_answered(3, after=recovered)
    records = load.snapshot()
    after = sum(1 for r in records if killed < r.started < recovered)
    served = sum(1 for r in records
                 if killed < r.started < recovered and r.outcome is Outcome.ANSWERED)  # fmt: skip
    return summarize("frontend replica SIGKILL", records, recovered - killed,
                     f"{served} of {after} requests sent while it was down answered by the other",
                     sent_while_down=after, answered_while_down=served)  # fmt: skip


def _held_fault(
    bed: FaultBed, name: str, inject: Callable[[], None], heal: Callable[[], None]
) -> FaultResult:
    with _load(bed) as load:
        load.wait_answered(4)
        before = bed.decisions()
        started = time.monotonic()
        inject()
        try:
            time.sleep(FAULT_HOLD_S)
        finally:
            heal()
        healed = time.monotonic()
        during = bed.decisions()
        recovered = wait_for(_recovered(bed), "recovery")
        load.wait_answered(3, after=recovered)
    records = load.snapshot()
    taken = during - before
    note = f"{latency_note(records, started, healed)}; decisions: {decisions_note(before, during)}"
    return summarize(name, records, recovered - healed, note,
                     local_after_failed_prefill=taken["local/prefill_failed"])  # fmt: skip


def prefill_decode_partition(bed: FaultBed) -> FaultResult:
    def cut() -> None:
        for name in _decoders(bed):
            bed.net.partition("prefill-0", name)

    return _held_fault(bed, f"prefill<->decode partition ({FAULT_HOLD_S:.0f} s)", cut, bed.net.heal)


def slow_kv_link(bed: FaultBed) -> FaultResult:
    return _held_fault(
        bed,
        f"slow KV link: prefill egress {SLOW_LINK_KBIT // 1000} Mbit/s tbf ({FAULT_HOLD_S:.0f} s)",
        lambda: bed.net.shape("prefill-0", SLOW_LINK_KBIT),
        lambda: bed.net.unshape("prefill-0"),
    )


LOCAL_FAULTS: tuple[Callable[[FaultBed], FaultResult], ...] = (
    prefill_killed_mid_transfer,
    decode_killed_mid_stream,
    frontend_replica_killed,
    prefill_decode_partition,
    slow_kv_link,
)


def fault_cluster(name: str = "faults") -> InferenceCluster:
    """The suite's cluster: the reference engine's small random model, 1 prefill and 2
    decode workers, KV over TCP with a 3 s transfer timeout."""
    doc = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "tandem/reference-tiny", "servedName": "reference",
                      "maxInputTokens": 8192, "maxOutputTokens": 512},
            "engine": {"kind": "reference"},
            "frontend": {"disaggregation": {"minPrefillTokens": 32}},
            "prefill": {"replicas": 1, "minReplicas": 1, "maxReplicas": 1},
            "decode": {"replicas": 2, "minReplicas": 2, "maxReplicas": 2},
            "kvTransfer": {"backend": "tcp", "timeoutSeconds": 3},
        },
    }  # fmt: skip
    return parse_inference_cluster(doc)
