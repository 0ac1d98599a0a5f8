"""A fresh worker's /metrics already lists the claim and refusal series at 0: dashboards
and rate() need them before the first claim (a new prefill pod has served none)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from tandem.worker.metrics import WorkerMetrics


def test_known_label_values_are_exposed_at_zero() -> None:
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    text = generate_latest(registry).decode()
    for outcome in ("granted", "gone", "wrong_incarnation"):
        assert f'tandem_worker_kv_claims_total{{outcome="{outcome}"}} 0.0' in text
    assert 'tandem_worker_kv_refused_total{reason="config_mismatch"} 0.0' in text
    for call in ("ClaimKv", "KvAgent", "kv_tcp"):
        assert f'tandem_worker_refused_peers_total{{call="{call}"}} 0.0' in text
