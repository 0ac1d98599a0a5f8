"""``kvCache.offload`` of a pool, rendered: the reference engine's ``offload_*`` options in
the operator's worker document and the local runtime's command line, the disk tier's
volume and the host tier's memory in the worker pod, the simulated engine's tier options,
and the API refusing an offload without a tier (trtllm's host tier:
tests/unit/engines/trtllm/test_trtllm_offload.py)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import ManifestError, load_inference_cluster, parse_object
from tandem.runtime.plan import count_workers, plan_local
from tandem_operator.render.contract import render_worker_config
from tandem_operator.render.pods import RenderSettings, render_worker_pod_template
from tandem_operator.render.quantity import QuantityError, parse_quantity

EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "reference-cpu.yaml"
OFFLOAD = {"enabled": True, "hostBytes": 1 << 30, "diskBytes": 8 << 30, "diskPath": "/kv"}
OPTIONS = {"offload_host_bytes": 1 << 30, "offload_disk_bytes": 8 << 30, "offload_disk_path": "/kv"}


def with_decode_offload(offload: dict[str, Any], example: Path = EXAMPLE) -> InferenceCluster:
    doc = load_inference_cluster(example).to_wire()
    doc["metadata"] |= {"uid": "ic-uid", "namespace": "serving"}
    doc["spec"]["decode"]["kvCache"] = {"offload": offload}
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def test_the_operator_renders_offload_options_for_the_pool_that_enables_it() -> None:
    cr = with_decode_offload(OFFLOAD)
    decode = render_worker_config(cr, PoolRole.DECODE)["engine"]["options"]
    assert {k: decode[k] for k in OPTIONS} == OPTIONS
    prefill = render_worker_config(cr, PoolRole.PREFILL)["engine"]["options"]
    assert not any(key.startswith("offload_") for key in prefill)
    off = with_decode_offload({**OFFLOAD, "enabled": False})
    assert not any(
        k.startswith("offload_")
        for k in render_worker_config(off, PoolRole.DECODE)["engine"]["options"]
    )


def test_the_disk_tier_gets_a_local_volume_capped_at_its_budget() -> None:
    cr = with_decode_offload(OFFLOAD)
    pod = render_worker_pod_template(cr, PoolRole.DECODE, RenderSettings(), "hash")["spec"]
    assert {"name": "kv-offload", "emptyDir": {"sizeLimit": str(8 << 30)}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "kv-offload", "mountPath": "/kv"} in mounts
    prefill = render_worker_pod_template(cr, PoolRole.PREFILL, RenderSettings(), "hash")["spec"]
    assert all(v["name"] != "kv-offload" for v in prefill["volumes"])


def local_decode_options(cr: InferenceCluster, tmp_path: Path) -> dict[str, Any]:
    """The engine options on the local runtime's first decode worker's command line."""
    ports = list(range(41000, 41000 + count_workers(cr)))
    plan = plan_local(cr, state_dir=tmp_path, frontend_port=8123, worker_ports=ports, python="py")
    argv = list(plan.pools[PoolRole.DECODE].workers[0].argv)
    options: dict[str, Any] = json.loads(argv[argv.index("--engine-options") + 1])
    return options


def test_the_local_runtime_passes_the_same_options_on_the_command_line(tmp_path: Path) -> None:
    options = local_decode_options(with_decode_offload(OFFLOAD), tmp_path)
    assert {k: options[k] for k in OPTIONS} == OPTIONS


# The simulated engine models the tiers (nothing is written: no path), its prefix cache on.
SIMULATED_EXAMPLE = EXAMPLE.with_name("simulated-gpt-oss-120b-gb200.yaml")
SIMULATED_OPTIONS = {
    "prefix_cache": True,
    "offload_host_bytes": 1 << 30,
    "offload_disk_bytes": 8 << 30,
}


def test_the_simulated_engine_gets_its_tier_options_from_operator_and_local_runtime(
    tmp_path: Path,
) -> None:
    cr = with_decode_offload(OFFLOAD, SIMULATED_EXAMPLE)
    decode = render_worker_config(cr, PoolRole.DECODE)["engine"]["options"]
    assert {k: decode[k] for k in SIMULATED_OPTIONS} == SIMULATED_OPTIONS
    assert "offload_disk_path" not in decode
    prefill = render_worker_config(cr, PoolRole.PREFILL)["engine"]["options"]
    assert not set(SIMULATED_OPTIONS) & set(prefill)
    local = local_decode_options(cr, tmp_path)
    assert {k: local[k] for k in SIMULATED_OPTIONS} == SIMULATED_OPTIONS
    # It writes nothing: no disk volume.
    pod = render_worker_pod_template(cr, PoolRole.DECODE, RenderSettings(), "hash")["spec"]
    assert all(v["name"] != "kv-offload" for v in pod["volumes"])


@pytest.mark.parametrize(
    ("offload", "engine", "message"),
    [
        ({"enabled": True}, "reference", "needs hostBytes or diskBytes"),
        ({"enabled": True, "diskBytes": 1024}, "reference", "diskBytes needs diskPath"),
    ],
)
def test_the_api_refuses_an_offload_no_engine_can_run(
    offload: dict[str, Any], engine: str, message: str
) -> None:
    doc = load_inference_cluster(EXAMPLE).to_wire()
    doc["spec"]["decode"]["kvCache"] = {"offload": offload}
    doc["spec"]["engine"]["kind"] = engine
    with pytest.raises(ManifestError, match=message):
        parse_object(doc)


def worker_resources(cr: InferenceCluster) -> dict[str, Any]:
    pod = render_worker_pod_template(cr, PoolRole.DECODE, RenderSettings(), "hash")["spec"]
    resources: dict[str, Any] = pod["containers"][0]["resources"]
    return resources


def test_the_host_tier_is_added_to_the_pods_memory_request_and_limit() -> None:
    plain = worker_resources(with_decode_offload({**OFFLOAD, "enabled": False}))
    assert plain["requests"]["memory"] == "1536Mi"  # the reference worker's floor
    cr = with_decode_offload(OFFLOAD)
    assert worker_resources(cr)["requests"]["memory"] == str(1536 * 2**20 + (1 << 30))
    doc = cr.to_wire()
    doc["spec"]["decode"]["resources"] = {
        "requests": {"cpu": "2", "memory": "2Gi"},
        "limits": {"memory": "4.5Gi"},
    }
    limited = parse_object(doc)
    assert isinstance(limited, InferenceCluster)
    resources = worker_resources(limited)
    assert resources["requests"] == {"cpu": "2", "memory": str(3 << 30)}
    assert resources["limits"] == {"memory": str((4 << 30) + (1 << 29) + (1 << 30))}


def test_the_simulated_engine_models_its_host_tier_and_asks_for_no_memory() -> None:
    cr = with_decode_offload(OFFLOAD, SIMULATED_EXAMPLE)
    off = with_decode_offload({**OFFLOAD, "enabled": False}, SIMULATED_EXAMPLE)
    assert worker_resources(cr) == worker_resources(off)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1536Mi", 1536 * 2**20), ("1.5G", 1_500_000_000), ("2e3", 2000), ("512", 512),
     ("1Ei", 2**60), ("1E", 10**18), ("100m", Decimal("0.1")), ("1e-3", Decimal("0.001"))],
)  # fmt: skip
def test_quantities_parse_as_the_api_reads_them(text: str, value: int | Decimal) -> None:
    assert parse_quantity(text) == value


def test_a_malformed_quantity_is_refused_by_name() -> None:
    with pytest.raises(QuantityError, match=re.escape("'1.5 Gi'")):
        parse_quantity("1.5 Gi")
