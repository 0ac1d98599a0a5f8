"""plan_local: processes, ports, documents; status rendering; state round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.api.base import OpenObject
from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.frontend.config import FrontendConfig, compute_router_config
from tandem.router.membership import parse_members
from tandem.runtime.plan import count_workers, plan_local
from tandem.runtime.state import ClusterState, Phase, ProcessState
from tandem.runtime.status import compute_status, render_status

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "reference-cpu.yaml"


def cluster(prefill: int = 2, decode: int = 1) -> InferenceCluster:
    base = load_inference_cluster(EXAMPLE)
    spec = base.spec.model_copy(
        update={
            "prefill": base.spec.prefill.model_copy(update={"replicas": prefill}),
            "decode": base.spec.decode.model_copy(update={"replicas": decode}),
        }
    )
    return base.model_copy(update={"spec": spec})


def plan(c: InferenceCluster, tmp_path: Path):  # type: ignore[no-untyped-def]
    ports = list(range(41000, 41000 + count_workers(c)))
    return plan_local(c, state_dir=tmp_path, frontend_port=8123, worker_ports=ports, python="py")


@pytest.mark.parametrize(("prefill", "decode"), [(0, 1), (1, 1), (2, 3)])
def test_one_process_per_replica_with_distinct_ports(
    tmp_path: Path, prefill: int, decode: int
) -> None:
    c = cluster(prefill, decode)
    p = plan(c, tmp_path)
    assert [w.name for w in p.pools[PoolRole.PREFILL].workers] == [
        f"prefill-{i}" for i in range(prefill)
    ]
    assert len(p.pools[PoolRole.DECODE].workers) == decode
    ports = [w.port for w in p.workers] + [p.frontend.port]
    assert len(set(ports)) == len(ports) == prefill + decode + 1
    assert p.endpoint == "http://127.0.0.1:8123/v1"
    for worker in p.workers:
        argv = list(worker.argv)
        assert argv[:3] == ["py", "-m", "tandem.worker"]
        flags = dict(zip(argv[3::2], argv[4::2], strict=True))
        assert flags["--port"] == str(worker.port)
        assert flags["--role"] == worker.component
        assert flags["--host"] == "127.0.0.1"
        assert flags["--worker-id"] == f"reference-{worker.name}"
        assert flags["--engine"] == "reference"
        assert flags["--kv-backend"] == "nixl"
        assert json.loads(flags["--engine-options"]) == {}
        # Mutual TLS even on one machine: the credentials the supervisor issues, the
        # worker's own pair.
        assert flags["--credentials"] == str(tmp_path / "credentials" / "worker")
        assert p.credentials_dir == tmp_path / "credentials"
        # UCX_TLS from kvTransfer.ucxTransports; loopback only, always.
        assert dict(worker.env) == {"UCX_NET_DEVICES": "lo", "UCX_TLS": "tcp"}
    frontend = list(p.frontend.argv)
    # The frontend gets its own pair, never the workers'.
    assert frontend[frontend.index("--credentials") + 1] == str(p.credentials_dir / "frontend")


def test_the_worker_cli_accepts_the_planned_command_line(tmp_path: Path) -> None:
    from tandem.worker import main as worker_main

    for worker in plan(cluster(1, 1), tmp_path).workers:
        args = worker_main.build_parser().parse_args(list(worker.argv[3:]))
        config = worker_main.resolve_config(args, worker_main.load_contract(None), env={})
        assert (config.port, config.role.value) == (worker.port, worker.component)


def test_kv_backend_override(tmp_path: Path) -> None:
    c = cluster(1, 1)
    ports = list(range(41000, 41000 + count_workers(c)))
    p = plan_local(c, state_dir=tmp_path, frontend_port=1, worker_ports=ports, python="py",
                   kv_backend="tcp")  # fmt: skip
    assert all(w.argv[w.argv.index("--kv-backend") + 1] == "tcp" for w in p.workers)


def test_wrong_port_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="worker ports"):
        plan_local(cluster(), state_dir=tmp_path, frontend_port=1, worker_ports=[1], python="py")


def test_documents_wire_the_frontend_to_the_members_file(tmp_path: Path) -> None:
    c = cluster(2, 1)
    p = plan(c, tmp_path)
    docs = {path.name: text for path, text in p.documents.items()}
    assert set(docs) == {"frontend.json", "members.json"}
    frontend = FrontendConfig.model_validate(json.loads(docs["frontend.json"]))
    assert frontend.workers == {
        r: f"file://{tmp_path / 'members.json'}" for r in ("prefill", "decode")
    }
    assert frontend.served_model == "reference"
    router = compute_router_config(frontend)
    assert router.policy.min_prefill_tokens == c.spec.frontend.disaggregation.min_prefill_tokens
    members = parse_members(json.loads(docs["members.json"]))
    assert [(m.address, m.role.value) for m in members] == [
        (w.address, w.component) for w in p.workers
    ]


def test_operator_frontend_document_loads(tmp_path: Path) -> None:
    from tandem_operator.render import contract

    doc = contract.render_frontend_config(cluster(1, 1))
    config = FrontendConfig.model_validate(doc)
    assert config.served_model == "reference"
    assert config.workers["decode"] == "kubernetes:///reference-decode.default:grpc"


def _state() -> ClusterState:
    def proc(name: str, component: str, port: int) -> ProcessState:
        return ProcessState(name, component, port, 100 + port, 7, f"/logs/{name}.log")

    return ClusterState(
        cluster="reference",
        phase=Phase.RUNNING,
        endpoint="http://127.0.0.1:8000/v1",
        supervisor_pid=42,
        supervisor_start_ticks=9,
        frontend=proc("frontend", "frontend", 8000),
        workers=[proc("prefill-0", "prefill", 1), proc("decode-0", "decode", 2),
                 proc("decode-1", "decode", 3)],
    )  # fmt: skip


def test_state_round_trips() -> None:
    state = _state()
    assert ClusterState.from_json(state.to_json()) == state


def test_status_counts_ready_workers() -> None:
    alive = {"supervisor": True, "frontend": True, "prefill-0": True, "decode-0": True}
    seen = [
        {"address": "127.0.0.1:1", "healthy": True},
        {"address": "127.0.0.1:2", "healthy": True},
        {"address": "127.0.0.1:3", "healthy": True},  # reported healthy but its pid is gone
    ]
    status = compute_status(_state(), alive, seen)
    assert status["endpoint"] == "http://127.0.0.1:8000/v1"
    assert {p: (v["replicas"], v["ready"]) for p, v in status["pools"].items()} == {
        "prefill": (1, 1),
        "decode": (2, 1),
    }
    text = render_status(status)
    assert "decode    1/2 ready" in text and "dead" in text


def test_status_without_a_frontend_answer_has_nothing_ready() -> None:
    status = compute_status(_state(), {"supervisor": False}, None)
    assert status["phase"] == "stopped"
    assert all(p["ready"] == 0 for p in status["pools"].values())


def test_simulated_workers_model_the_specs_gpu_model_and_parallelism(tmp_path: Path) -> None:
    example = EXAMPLE.parent / "simulated-gpt-oss-120b-gb200.yaml"
    base = load_inference_cluster(example)
    decode = base.spec.decode.model_copy(
        update={"tensor_parallel_size": 4, "engine_options": OpenObject(speedup=5)}
    )
    c = base.model_copy(update={"spec": base.spec.model_copy(update={"decode": decode})})
    p = plan(c, tmp_path)
    options = {}
    for worker in p.workers:
        argv = list(worker.argv)
        flags = dict(zip(argv[3::2], argv[4::2], strict=True))
        assert flags["--engine"] == "simulated"
        assert flags["--tokenizer"] == "harmony"
        options[worker.component] = json.loads(flags["--engine-options"])
    common = {"model": "openai/gpt-oss-120b", "accelerator": "gb200", "kv_cache_dtype": "fp8"}
    assert options["prefill"] == {**common, "tensor_parallel_size": 1, "speedup": 1}
    # The pool's own options win over the cluster's; the spec fills only what is unset.
    assert options["decode"] == {**common, "tensor_parallel_size": 4, "speedup": 5}


@pytest.mark.parametrize(
    ("kind", "timeout_s"),
    [(EngineKind.REFERENCE, 900.0), (EngineKind.SIMULATED, 900.0), (EngineKind.TRTLLM, 120.0)],
)
def test_only_a_real_gpu_engine_gets_the_short_prefill_timeout(
    tmp_path: Path, kind: EngineKind, timeout_s: float
) -> None:
    docs = {path.name: text for path, text in plan(cluster(1, 1), tmp_path).documents.items()}
    frontend = FrontendConfig.model_validate(json.loads(docs["frontend.json"]))
    router = compute_router_config(frontend.model_copy(update={"engine_kind": kind}))
    assert router.prefill_timeout_seconds == timeout_s


@pytest.mark.parametrize(("wait_s", "start_wait_s"), [(None, None), (2.0, 10.0)])
def test_the_prefill_wait_limits_reach_the_router_from_both_renderers(
    tmp_path: Path, wait_s: float | None, start_wait_s: float | None
) -> None:
    from tandem_operator.render import contract

    c = cluster(1, 1)
    limits = {"max_prefill_wait_seconds": wait_s, "max_prefill_start_wait_seconds": start_wait_s}
    frontend_spec = c.spec.frontend.model_copy(
        update={"disaggregation": c.spec.frontend.disaggregation.model_copy(update=limits)}
    )
    c = c.model_copy(update={"spec": c.spec.model_copy(update={"frontend": frontend_spec})})
    docs = {path.name: text for path, text in plan(c, tmp_path).documents.items()}
    for doc in (json.loads(docs["frontend.json"]), contract.render_frontend_config(c)):
        policy = compute_router_config(FrontendConfig.model_validate(doc)).policy
        assert policy.max_prefill_wait_seconds == wait_s
        assert policy.max_prefill_start_wait_seconds == start_wait_s
