"""The data-plane fault suite (tandem_dev.faults) under steady load from the official
``openai`` client, one fault per test on one bed: workers in network namespaces of their
own, two frontends, the real supervisor restarting what dies. Each test asserts that no
request was lost or hung and that the failures the fault caused were clean; the counts
are printed (run with -s) and written to docs/benchmarks.md by
``python -m tandem_dev.bench --only faults``. Needs root (namespaces, a bridge, iptables).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tandem_dev.faults import scenarios
from tandem_dev.faults.bed import FaultBed, fault_bed
from tandem_dev.faults.load import Outcome
from tandem_dev.faults.report import FaultResult, render_table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBed]:
    with fault_bed(scenarios.fault_cluster(), tmp_path_factory.mktemp("faults")) as bed:
        yield bed


def run(bed: FaultBed, fault: Callable[[FaultBed], FaultResult]) -> FaultResult:
    result = fault(bed)
    print("\n" + render_table([result]))
    assert result.lost == 0, [r for r in result.records if r.outcome is Outcome.LOST]
    assert result.hung == 0, [r for r in result.records if r.outcome is Outcome.HUNG]
    assert result.sent == result.answered + result.clean_errors + result.dropped
    assert result.answered > 0
    return result


def test_prefill_worker_killed_mid_transfer(bed: FaultBed) -> None:
    result = run(bed, scenarios.prefill_killed_mid_transfer)
    assert result.facts["kv_pulls_cut"] >= 1  # the kill did land inside a KV pull
    # The router retries a cut pull with local prefill: nobody sees the kill.
    assert result.answered == result.sent


def test_decode_worker_killed_mid_stream(bed: FaultBed) -> None:
    result = run(bed, scenarios.decode_killed_mid_stream)
    assert result.facts["streams_migrated"] >= 1  # the kill did land mid-stream
    # Every stream the kill caught went on on the other decode worker: none was cut.
    assert result.facts["streams_cut"] == 0
    assert result.dropped == 0


def test_frontend_replica_killed(bed: FaultBed) -> None:
    result = run(bed, scenarios.frontend_replica_killed)
    # What was on the killed replica saw its connection drop (at most one request per
    # client); everything sent while it was down went to the other replica.
    assert result.dropped <= 4
    assert result.facts["answered_while_down"] == result.facts["sent_while_down"] > 0, [
        r for r in result.records if r.outcome is not Outcome.ANSWERED
    ]


def test_prefill_decode_partition(bed: FaultBed) -> None:
    result = run(bed, scenarios.prefill_decode_partition)
    assert result.answered == result.sent
    assert result.facts["local_after_failed_prefill"] >= 1  # the partition was felt


def test_slow_kv_link(bed: FaultBed) -> None:
    result = run(bed, scenarios.slow_kv_link)
    assert result.answered == result.sent


def test_bed_leaves_nothing_behind(tmp_path: Path) -> None:
    with fault_bed(scenarios.fault_cluster("leftovers"), tmp_path) as bed:
        namespaces = [h.namespace for h in bed.net.plan.hosts]
        pids = [bed.pid_of(w.name) for w in bed.supervisor.plan.workers]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in namespaces)
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert bed.net.plan.bridge not in links
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
