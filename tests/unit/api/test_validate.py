"""`tandem validate` and the API models: what is accepted, what is refused, and where."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tandem.api import v1alpha1 as api
from tandem.api.validate import (
    ManifestError,
    load_documents,
    load_file,
    parse_inference_cluster,
)
from tandem.cli.main import main as cli

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))

MINIMAL = {
    "apiVersion": "tandem.dev/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "c"},
    "spec": {"model": {"name": "m", "maxInputTokens": 4096}},
}


def _with(path: str, value: object) -> str:
    """MINIMAL with one dotted path set, as YAML."""
    doc = yaml.safe_load(yaml.safe_dump(MINIMAL))
    node = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return yaml.safe_dump(doc)


def _errors(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as exc:
        load_documents(text, "t.yaml")
    return [(e.path, e.message) for e in exc.value.errors]


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "reference-cpu.yaml",
        "gpt-oss-120b-gb200.yaml",
        "gpt-oss-120b-b200.yaml",
        "gpt-oss-20b-h100.yaml",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid(path: Path) -> None:
    (obj,) = load_file(path)
    assert isinstance(obj, api.InferenceCluster)
    # Wire form round-trips through the model unchanged.
    again = api.InferenceCluster.model_validate(obj.to_wire())
    assert again == obj


def test_defaults_fill_a_minimal_cluster() -> None:
    (obj,) = load_documents(yaml.safe_dump(MINIMAL), "t.yaml")
    assert isinstance(obj, api.InferenceCluster)
    assert obj.spec.decode.min_replicas == 1
    assert obj.spec.prefill.min_replicas == 0
    assert obj.spec.kv_transfer.backend is api.KvBackend.NIXL
    assert obj.spec.model.public_name == "m"


def test_a_decode_pool_may_scale_to_zero_under_autoscaling() -> None:
    doc = yaml.safe_load(_with("spec.decode", {"minReplicas": 0, "replicas": 0}))
    doc["spec"]["autoscaling"] = {"enabled": True, "mode": "external"}
    (obj,) = load_documents(yaml.safe_dump(doc), "t.yaml")
    assert isinstance(obj, api.InferenceCluster)
    assert obj.spec.decode.min_replicas == 0
    assert obj.spec.frontend.cold_start_timeout_seconds == 300


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [
        ("spec.bogus", 1, "spec.bogus", "unknown field"),
        ("spec.prefill.replics", 1, "spec.prefill.replics", "unknown field"),
        ("spec.prefill.replicas", -1, "spec.prefill.replicas", "greater than or equal to 0"),
        ("spec.decode.replicas", -3, "spec.decode.replicas", "greater than or equal to 0"),
        (
            "spec.prefill",
            {"minReplicas": 3, "maxReplicas": 2, "replicas": 2},
            "spec.prefill.minReplicas",
            "must not exceed maxReplicas",
        ),
        (
            "spec.decode",
            {"minReplicas": 0, "replicas": 1},
            "spec.decode.minReplicas",
            "needs autoscaling.enabled",
        ),
        (
            "spec.kvTransfer",
            {"maxTokensInBuffer": 1024},
            "spec.kvTransfer.maxTokensInBuffer",
            "longest prompt",
        ),
        (
            "spec.prefill",
            {"replicas": 9, "maxReplicas": 8},
            "spec.prefill.replicas",
            "within [minReplicas, maxReplicas]",
        ),
        ("spec.engine", {"kind": "trtllm"}, "spec.engine.kind", "GPU accelerator profile"),
        ("spec.engine", {"kind": "vllm"}, "spec.engine.kind", "Input should be"),
        ("spec.accelerator", {"profile": "tpu"}, "spec.accelerator.profile", "Input should be"),
        (
            "spec.decode",
            {"tensorParallelSize": 8, "gpusPerWorker": 4},
            "spec.decode.gpusPerWorker",
            "cover tensorParallelSize",
        ),
        ("metadata.name", "Not_A_Name", "metadata.name", "pattern"),
        ("metadata.name", "x" * 41, "metadata.name", "at most 40"),
        ("spec.frontend", {"port": 70000}, "spec.frontend.port", "less than or equal"),
        ("spec.frontend", {"port": 9091}, "spec.frontend.port", "metrics port"),
        (
            "spec.frontend",
            {"apiKeys": {"secrets": ["keys", "keys"]}},
            "spec.frontend.apiKeys.secrets",
            "must not name a Secret twice",
        ),
        (
            "spec.frontend",
            {"apiKeys": {"secrets": [f"keys-{i}" for i in range(17)]}},
            "spec.frontend.apiKeys.secrets",
            "at most 16 items",
        ),
        (
            "spec.frontend",
            {"apiKeys": {"secrets": ["Not_A_Secret"]}},
            "spec.frontend.apiKeys.secrets[0]",
            "pattern",
        ),
        (
            "spec.frontend",
            {"apiKeys": {"required": "maybe"}},
            "spec.frontend.apiKeys.required",
            "boolean",
        ),
        (
            "spec.frontend",
            {"tenants": [{"name": "a"}, {"name": "a", "weight": 2}]},
            "spec.frontend.tenants",
            "must not name a tenant twice",
        ),
        (
            "spec.frontend",
            {"tenants": [{"name": f"t{i}"} for i in range(65)]},
            "spec.frontend.tenants",
            "at most 64 items",
        ),
        (
            "spec.frontend",
            {"tenants": [{"name": "Team A"}]},
            "spec.frontend.tenants[0].name",
            "pattern",
        ),
        (
            "spec.frontend",
            {"tenants": [{"name": "a", "weight": 1001}]},
            "spec.frontend.tenants[0].weight",
            "less than or equal to 1000",
        ),
        (
            "spec.frontend",
            {"tenantDefaults": {"maxInFlightRequests": 0}},
            "spec.frontend.tenantDefaults.maxInFlightRequests",
            "greater than or equal to 1",
        ),
    ],
)
def test_invalid_input_names_the_field(path: str, value: object, field: str, fragment: str) -> None:
    errors = _errors(_with(path, value))
    assert any(p == field and fragment in m for p, m in errors), errors


def test_malformed_yaml_reports_a_line() -> None:
    errors = _errors("spec: [1, 2\n")
    assert len(errors) == 1
    assert "malformed YAML: line" in errors[0][1]


def test_wrong_kind_is_refused() -> None:
    assert _errors("apiVersion: v1\nkind: Pod\n") == [
        ("kind", "must be InferenceCluster or WorkerPool, got 'Pod'")
    ]


def test_a_program_written_cluster_must_be_an_inference_cluster() -> None:
    assert parse_inference_cluster(MINIMAL, "bench").metadata.name == "c"
    pool = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": "c-prefill"},
        "spec": {"clusterName": "c", "role": "prefill", "replicas": 1},
    }
    with pytest.raises(ManifestError) as exc:
        parse_inference_cluster(pool, "bench")
    assert [(e.path, e.message) for e in exc.value.errors] == [
        ("kind", "must be InferenceCluster, got WorkerPool")
    ]


def test_every_error_of_every_document_is_reported() -> None:
    text = _with("spec.bogus", 1) + "---\n" + _with("spec.prefill.replicas", -1)
    with pytest.raises(ManifestError) as exc:
        load_documents(text, "t.yaml")
    assert [e.source for e in exc.value.errors] == ["t.yaml#0", "t.yaml#1"]


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(MINIMAL))
    bad = tmp_path / "bad.yaml"
    bad.write_text(_with("spec.decode", {"minReplicas": 0}))
    assert cli(["validate", "-f", str(good)]) == 0
    assert cli(["validate", "-f", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "spec.decode.minReplicas" in err
    assert cli(["validate", "-f", str(tmp_path / "missing.yaml")]) == 2
