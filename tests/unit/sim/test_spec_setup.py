"""A reference spec on cpu plans from a table ``tandem profile`` measured, and only from
one: the stand-in workers, two searches solved by hand from the table, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tandem.api.validate import load_inference_cluster
from tandem.capacity.models import TANDEM_REFERENCE
from tandem.perf.table import FORMAT, MeasuredWorker, PerfTableError, render_worker
from tandem.sim.metrics import Slo
from tandem.sim.planner import Limits, Workload, recommend
from tandem.sim.spec_setup import PlanSpecError, compute_setup

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"
REFERENCE = load_inference_cluster(EXAMPLES / "reference-cpu.yaml").spec  # <= 2 + 2 workers
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def table(**changes: Any) -> dict[str, Any]:
    """Prefill takes 1 ms a token (P(n) = n / 1000 s); a decode step 10 ms per sequence
    at any context (1 -> 10 ms, 11 -> 110 ms); a 64 MiB pool, 64 tokens a step."""
    document: dict[str, Any] = {
        "format": FORMAT,
        "model": SMOLLM2,
        "source": "by hand",
        "prefill": [[1000, 1.0]],
        "decode": {"batch": [1, 11], "context": [100, 2000], "seconds": [[0.01] * 2, [0.11] * 2]},
        "worker": render_worker(MeasuredWorker(TANDEM_REFERENCE, 64 << 20, 16, 64)),
    }
    document.update(changes)
    return document


@pytest.fixture
def table_file(tmp_path: Path) -> Path:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table()))
    return path


def test_each_worker_stands_in_with_the_measured_steps_and_pool(table_file: Path) -> None:
    setup, limits = compute_setup(REFERENCE, str(table_file))
    assert (
        setup.prefill_options
        == setup.decode_options
        == {
            "model": SMOLLM2,
            "accelerator": "cpu",
            "perf_table": str(table_file),
            "max_num_tokens": 64,
            "tokens_per_block": 16,
        }
    )
    assert setup.min_prefill_tokens == 32  # the spec's disaggregation threshold
    assert limits == Limits(2, 2, 1, 1, (1,))  # one process per worker: no TP to try


def test_one_worker_carries_a_light_load(table_file: Path) -> None:
    # 100-token prompts and 10-token answers at 1 req/s: a request keeps one worker busy
    # 0.1 s prefilling and 9 x 10 ms decoding alone, 19% of a second; a 10 ms step (plus a
    # 64-token chunk, 64 ms, when a prompt arrives) is far inside a 50 ms mean ITL.
    setup, limits = compute_setup(REFERENCE, str(table_file))
    workload = Workload(100, 10, 1.0, Slo(1.0, 0.05))
    result = recommend(workload, setup, limits)
    assert result.chosen is not None, result.reason
    assert (result.chosen.candidate.gpus, result.chosen.candidate.prefill) == (1, 0)
    assert result.clock_sources[0].startswith("table: by hand; KV transfers unpriced")


def test_two_workers_are_needed_once_prefill_outgrows_one(table_file: Path) -> None:
    # 1000-token prompts at 1.2 req/s: 1.2 s of prefill arrive every second, more than one
    # worker has, so its queue (and TTFT) grows without end. Two share it at 0.6 s a
    # second each. A prefill worker of its own beside one decode worker would be as
    # overrun (1.2 s a second), so two workers means two aggregated ones.
    setup, limits = compute_setup(REFERENCE, str(table_file))
    workload = Workload(1000, 10, 1.2, Slo(8.0, 0.2))
    result = recommend(workload, setup, limits)
    assert result.chosen is not None, result.reason
    assert (result.chosen.candidate.gpus, result.chosen.candidate.prefill) == (2, 0)


def test_without_a_table_the_refusal_says_how_to_measure_one() -> None:
    with pytest.raises(PlanSpecError) as refused:
        compute_setup(REFERENCE)
    assert str(refused.value) == (
        "engine.kind: the reference engine has no step-time database; measure it where its "
        "workers run with `tandem profile -f FILE -o table.json`, then plan with "
        "`tandem plan -f FILE --perf-table table.json ...` (or start it planned with "
        "`tandem up -f FILE --perf-table table.json`)"
    )


def test_a_table_of_another_model_or_without_its_worker_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table(model="openai/gpt-oss-20b")))
    with pytest.raises(PlanSpecError, match=r"^model\.name: .*measured 'openai/gpt-oss-20b'"):
        compute_setup(REFERENCE, str(path))
    path.write_text(json.dumps({k: v for k, v in table().items() if k != "worker"}))
    with pytest.raises(PerfTableError, match="no worker"):
        compute_setup(REFERENCE, str(path))


def test_a_gpu_spec_takes_the_tables_steps_too(tmp_path: Path) -> None:
    gpu = load_inference_cluster(EXAMPLES / "simulated-gpt-oss-120b-gb200.yaml").spec
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table(model=gpu.model.name)))
    setup, _ = compute_setup(gpu, str(path))
    assert setup.decode_options["perf_table"] == setup.prefill_options["perf_table"] == str(path)
    assert setup.decode_options["accelerator"] == "gb200"
