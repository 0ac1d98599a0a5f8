"""``tandem up`` with ``planning.mode: auto`` through real processes: the simulated
gpt-oss-120b on GB200 (cheap workers with a measured GPU clock).

The spec promises TTFT p90 <= 1 s and ITL p90 <= 8 ms for short prompts: the planner
deploys one aggregated worker, not the hand-written 1P+1D. Prompts then drift to ~16k
tokens, where prefill chunks on the decode worker break the ITL target: after one window
outside the plan the re-planner plans 1P+1D and rolls a prefill worker in, while the
traffic goes on -- and no request fails. Progress is read from ``planning.json``, never
timed: the waits below only bound a broken run.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tandem.devcluster.probes import wait_until
from tandem.runtime.planning_record import PlanningRecord, read_record
from tandem.runtime.state import Phase, cluster_dir, read_state

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"
NAME = "plan-itest"
MODEL = "gpt-oss-120b"
ANSWER_TOKENS = 32
SENTENCE = "Disaggregated serving splits prefill from decode. "
LONG_PROMPT_TOKENS = 16_000  # the planner disaggregates from ~11k tokens at this SLO
RATE = 1.5  # requests per second: a 30 s window holds 45, over the 30 a re-plan needs
WINDOW_S = 30


def write_spec(tmp_path: Path) -> Path:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = NAME
    spec = doc["spec"]
    spec["engine"]["options"].update({"speedup": 100})
    spec["slo"] = {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.008}
    spec["workload"] = {
        "isl": 200,
        "osl": ANSWER_TOKENS,
        "requestsPerSecond": {"min": 0.5, "max": 2},
    }
    spec["planning"] = {
        "mode": "auto",
        "replan": {"windowSeconds": WINDOW_S, "minIntervalSeconds": 60, "tolerance": 0.5},
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Running:
    home: Path
    process: subprocess.Popen[str]
    endpoint: str = ""

    @property
    def state_dir(self) -> Path:
        return cluster_dir(NAME, self.home)

    def record(self) -> PlanningRecord:
        record = read_record(self.state_dir)
        assert record is not None, "no planning.json"
        return record

    def pool_sizes(self) -> dict[str, int]:
        state = read_state(self.state_dir)
        assert state is not None
        sizes = {"prefill": 0, "decode": 0}
        for worker in state.workers:
            if not worker.retiring:
                sizes[worker.component] += 1
        return sizes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Running]:
    home, log = tmp_path / "home", tmp_path / "up.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.runtime", "-f", str(write_spec(tmp_path)), "--port", "0"],
        env={**os.environ, "TANDEM_HOME": str(home)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    running = Running(home, process)

    def up() -> bool:
        assert process.poll() is None, log.read_text()
        state = read_state(running.state_dir)
        return state is not None and state.phase is Phase.RUNNING

    try:
        wait_until(up, what="the cluster to run", timeout_s=300)
        state = read_state(running.state_dir)
        assert state is not None
        running.endpoint = state.endpoint
        yield running
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        print(log.read_text())


@dataclass
class Traffic:
    """Requests sent at ``RATE`` per second from a thread each, counted as they end."""

    endpoint: str
    prompt: str
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def ask(self, prompt: str) -> int:
        """One chat completion; its prompt's token count."""
        client = openai.OpenAI(base_url=self.endpoint, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=ANSWER_TOKENS,
        )
        assert reply.usage is not None
        return reply.usage.prompt_tokens

    def _one(self, prompt: str) -> None:
        try:
            self.ask(prompt)
        except Exception as exc:  # every failure counts, whatever raised it
            with self.lock:
                self.failed.append(repr(exc))
            return
        with self.lock:
            self.ok += 1

    def run(self) -> None:
        while not self.stopping.wait(1 / RATE):
            thread = threading.Thread(target=self._one, args=(self.prompt,))
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=130)


def test_a_planned_cluster_starts_planned_and_rolls_on_drift_without_a_failure(
    cluster: Running,
) -> None:
    record = cluster.record()
    assert record.plan is not None and record.plan.outcome.value == "met", record
    assert record.plan.shape == "1(TP1) agg"
    assert record.shape == "1(TP1) agg"
    assert cluster.pool_sizes() == {"prefill": 0, "decode": 1}  # not the spec's 1P+1D

    traffic = Traffic(cluster.endpoint, "What is the capital of France? " * 20)
    per_sentence = traffic.ask(SENTENCE * 100) / 100
    long_prompt = SENTENCE * math.ceil(LONG_PROMPT_TOKENS / per_sentence)
    assert traffic.ask(long_prompt) >= LONG_PROMPT_TOKENS * 0.9
    sender = threading.Thread(target=traffic.run)
    sender.start()
    try:
        wait_until(
            lambda: (w := cluster.record().workload) is not None and w.observed is not None,
            what="a window of short prompts observed",
            timeout_s=60,
        )
        assert cluster.record().workload.outside is None  # type: ignore[union-attr]
        traffic.prompt = long_prompt  # the drift
        wait_until(
            lambda: cluster.record().rollouts >= 1, what="a re-plan and its roll", timeout_s=240
        )
    finally:
        traffic.stop()
        sender.join()

    record = cluster.record()
    assert record.workload is not None
    assert record.workload.replans == 1
    assert record.workload.planned.source.value == "observed"
    assert record.workload.planned.isl > 10_000
    assert record.plan is not None and record.plan.shape == "1P(TP1)+1D(TP1)"
    assert record.rollouts == 1
    assert cluster.pool_sizes() == {"prefill": 1, "decode": 1}
    assert traffic.failed == []
    assert traffic.ok > 2 * WINDOW_S * RATE * 0.5  # traffic ran through the whole drift
