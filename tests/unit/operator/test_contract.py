"""The operator <-> pod contract: command lines and config documents, as golden output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.frontend.config import FrontendConfig, compute_router_config
from tandem_operator.render.contract import (
    frontend_command,
    merge_options,
    render_frontend_config,
    render_worker_config,
    worker_command,
)

REPO = Path(__file__).resolve().parents[3]


def test_commands_match_the_golden_file(assert_golden: Callable[[str, str], None]) -> None:
    commands = {
        "frontend": frontend_command(8000),
        **{role.value: worker_command(role) for role in PoolRole},
    }
    assert_golden("contract-commands.json", json.dumps(commands, indent=2) + "\n")


@pytest.mark.parametrize("example", ["reference-cpu.yaml", "gpt-oss-120b-gb200.yaml"])
def test_config_documents_match_the_golden_file(
    example: str, assert_golden: Callable[[str, str], None]
) -> None:
    cr = load_inference_cluster(REPO / "manifests" / "examples" / example)
    documents = {
        "frontend": render_frontend_config(cr),
        **{role.value: render_worker_config(cr, role) for role in PoolRole},
    }
    assert_golden(
        f"contract-{example}.json", json.dumps(documents, indent=2, sort_keys=True) + "\n"
    )


def test_frontend_finds_workers_through_the_headless_services() -> None:
    cr = load_inference_cluster(REPO / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml")
    workers = render_frontend_config(cr)["workers"]
    assert workers == {
        "prefill": "kubernetes:///gpt-oss-120b-prefill.inference:grpc",
        "decode": "kubernetes:///gpt-oss-120b-decode.inference:grpc",
    }


def test_only_a_decode_pool_that_scales_to_zero_makes_requests_wait_for_a_cold_start() -> None:
    cr = load_inference_cluster(REPO / "manifests" / "examples" / "reference-cpu.yaml")
    assert "coldStartTimeoutSeconds" not in render_frontend_config(cr)["frontend"]
    spec = cr.spec.model_copy(
        update={
            "decode": cr.spec.decode.model_copy(update={"min_replicas": 0}),
            "autoscaling": cr.spec.autoscaling.model_copy(update={"enabled": True}),
            "frontend": cr.spec.frontend.model_copy(update={"cold_start_timeout_seconds": 45}),
        }
    )
    document = render_frontend_config(cr.model_copy(update={"spec": spec}))
    assert document["frontend"]["coldStartTimeoutSeconds"] == 45
    # The frontend reads it as the router's bound on the wait.
    config = FrontendConfig.model_validate(document)
    assert compute_router_config(config).cold_start_wait_seconds == 45.0


@pytest.mark.parametrize(
    ("base", "override", "merged"),
    [
        ({}, {}, {}),
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        (
            {"kv": {"dtype": "fp8", "frac": 0.9}},
            {"kv": {"frac": 0.8}},
            {"kv": {"dtype": "fp8", "frac": 0.8}},
        ),
        ({"kv": {"dtype": "fp8"}}, {"kv": None}, {"kv": None}),
        ({"list": [1, 2]}, {"list": [3]}, {"list": [3]}),
    ],
)
def test_pool_engine_options_merge_over_the_cluster_options(
    base: dict[str, object], override: dict[str, object], merged: dict[str, object]
) -> None:
    assert merge_options(base, override) == merged
