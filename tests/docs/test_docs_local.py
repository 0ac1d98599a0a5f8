"""README's quickstart, docs/gpu-deployment.md's capacity check, and docs/simulated-engine.md's
first answer and its profile of the reference engine, run as written: the local runtime in
a reader's shell (its own network namespace, so port 8000 is free)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def metric(output: str, line_start: str) -> float:
    """The value on the (one) line of ``output`` that starts with ``line_start``."""
    found = [line for line in output.splitlines() if line.startswith(line_start)]
    assert len(found) == 1, (line_start, output[-3000:])
    return float(found[0].rsplit(" ", 1)[1])


def test_readme_quickstart(docs: Any, doc_shell: Any) -> None:
    run = doc_shell.run(docs.sequence("README.md", "local"), timeout_s=540)
    assert run.mismatches == [], "\n".join(run.mismatches)
    # The long prompt was prefilled by the prefill worker and its KV moved over NIXL.
    remote = 'tandem_router_prefill_decisions_total{path="remote",reason="long_prompt"} '
    assert metric(run.output, remote) >= 1
    assert metric(run.output, "tandem_router_kv_transfer_bytes_total ") > 0
    # `make demo` answered, and `tandem up` of the autoscaling example came up after it.
    assert re.search(r"reference-autoscaling", run.output), run.output[-3000:]


@pytest.mark.parallel  # no clock in it: beside other tests
def test_gpu_deployment_plan(docs: Any, doc_shell: Any) -> None:
    run = doc_shell.run(docs.sequence("docs/gpu-deployment.md", "plan"), timeout_s=300)
    assert run.mismatches == [], "\n".join(run.mismatches)


@pytest.mark.parallel  # no clock in it: beside other tests
def test_monitoring_rules(docs: Any, doc_shell: Any) -> None:
    # Builds promtool if `make test` has not yet (about 9 minutes cold on two busy cores).
    run = doc_shell.run(docs.sequence("docs/monitoring.md", "rules"), timeout_s=900)
    assert run.mismatches == [], "\n".join(run.mismatches)


def test_simulated_engine_quickstart(docs: Any, doc_shell: Any) -> None:
    run = doc_shell.run(docs.sequence("docs/simulated-engine.md", "quickstart"), timeout_s=180)
    assert run.mismatches == [], "\n".join(run.mismatches)
    # curl's JSON answer (no newline after it): the final channel's text, run to max_tokens.
    answer, _ = json.JSONDecoder().raw_decode(run.output, run.output.index('{"id"'))
    assert answer["usage"]["completion_tokens"] == 16
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["content"]


def test_local_planned_cluster(docs: Any, doc_shell: Any) -> None:
    run = doc_shell.run(docs.sequence("docs/operator.md", "planned"), timeout_s=300)
    assert run.mismatches == [], "\n".join(run.mismatches)
    assert "shape     1(TP1) agg" in run.output
    assert "plan      auto, met: the planned shape (aggregated, 1 TP1 worker)" in run.output


def test_reference_profile_and_plan(docs: Any, doc_shell: Any) -> None:
    # SmolLM2's profile takes about 45 s on two idle cores; the plan a second or two.
    run = doc_shell.run(docs.sequence("docs/simulated-engine.md", "profile"), timeout_s=420)
    assert run.mismatches == [], "\n".join(run.mismatches)
